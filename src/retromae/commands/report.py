"""`retromae report`: gather experiment variant folders (as the recipes lay them out) into a table and plots.

Thin: parse → `ReportConfig` → `evaluation.experiments.write_report`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import add_config_arguments, build_config, option, require
from retromae.console import quiet_by_default
from retromae.run_folder import OutputOptions, claim_folder, input_paths, run_identity

REPORT_FILES = ("report.md", "report.json", "pretrain-loss.png", "metrics.png")
HELP = ("gather experiment runs (VARIANT/pretrain, finetune, eval/*.json, times.txt) into report.md, report.json, "
        "pretrain-loss.png, metrics.png and, for runs that probed retrieval while pre-training, probe-curves.png")


@dataclasses.dataclass(kw_only=True)
class ReportConfig(OutputOptions):
    variants: list[Path] = option(help="variant folders (or `retromae adapt` output folders), one table row each, "
                                       "in this order")
    output: Path = option(help="folder for report.md, report.json and the plots")
    title: str = option("Results", "heading of report.md")

    def __post_init__(self) -> None:
        require(len(self.variants) > 0, "variants", "give at least one variant folder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, ReportConfig)


def run(args: argparse.Namespace) -> int:
    report(build_config(ReportConfig, args))
    return 0


@quiet_by_default
def report(config: ReportConfig | None = None, /, **options: Any) -> Path:
    """Gather variant folders into a report as `config` (or `ReportConfig(**options)`) says; returns the report
    folder (`retromae.report(...)`)."""
    # torch and matplotlib: only when the command runs, so --help stays instant
    from retromae.evaluation.experiments import write_report

    config = config if config is not None else ReportConfig(**options)
    claim_folder(config.output, "report", run_identity(config), REPORT_FILES, overwrite=config.overwrite,
                 inputs=input_paths(config),
                 resumable=False)
    print(write_report(config.variants, config.output, config.title))
    print(f"report: {config.output / 'report.md'}")
    return Path(config.output)
