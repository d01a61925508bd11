"""`retromae score`: write a cross-encoder's scores of every (query, passage) pair into a training file."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import POSITIVE, add_config_arguments, at_least, build_config, option
from retromae.console import quiet_by_default
from retromae.run_folder import OutputOptions, claim_file, input_paths

HELP = "add teacher scores (pos_scores, neg_scores) from a cross-encoder to a training file, for finetune --distill"


@dataclasses.dataclass(kw_only=True)
class ScoreConfig(OutputOptions):
    model: str = option(help="cross-encoder folder, e.g. the reranker/ of `retromae train-reranker`")
    data: Path = option(help="training file (JSON lines: query, pos, neg)")
    output: Path = option(help="training file to write: the input with pos_scores and neg_scores")
    batch_size: int = option(64, "pairs per forward pass", POSITIVE)
    max_length: int | None = option(None, "max tokens of a (query, passage) pair; default 256, at most what the "
                                                  "model reads", at_least(8))
    device: str | None = option(None, "torch device; default: the GPU if any")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, ScoreConfig)


def run(args: argparse.Namespace) -> int:
    score(build_config(ScoreConfig, args))
    return 0


@quiet_by_default
def score(config: ScoreConfig | None = None, /, **options: Any) -> Path:
    """Score a training file with a cross-encoder as `config` (or `ScoreConfig(**options)`) says; returns the
    training file written (`retromae.score(...)`)."""
    # torch: only when the command runs, so --help stays instant
    from retromae.reranker import CrossEncoder, score_training_file

    config = config if config is not None else ScoreConfig(**options)
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    scorer = CrossEncoder(config.model, config.device, config.max_length)
    count = score_training_file(scorer, config.data, config.output, config.batch_size)
    print(f"scored {count} pairs into {config.output}")
    return Path(config.output)
