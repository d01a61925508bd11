"""`retromae report`: gather experiment variant folders (as the recipes lay them out) into a table and plots.

Thin: parse → `ReportConfig` (`retromae.evaluation.config`) → `retromae.evaluation.experiments.report`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.evaluation.config import ReportConfig
from retromae.preflight import configured
from retromae.runtime.options import add_config_arguments

HELP = ("gather experiment runs (VARIANT/pretrain, finetune, eval/*.json, times.txt) into report.md, report.json, "
        "pretrain-loss.png, metrics.png and, for runs that probed retrieval while pre-training, probe-curves.png")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, ReportConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(ReportConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch and matplotlib: only when the command runs, so --help stays instant
    from retromae.evaluation.experiments import report

    show(report(config))
    return 0
