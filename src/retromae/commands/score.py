"""`retromae score`: write a cross-encoder's scores of every (query, passage) pair into a training file.

Thin: parse → `ScoreConfig` (`retromae.reranking.config`) → `retromae.reranking.run.score`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.reranking.config import ScoreConfig
from retromae.runtime.options import add_config_arguments

HELP = "add teacher scores (pos_scores, neg_scores) from a cross-encoder to a training file, for finetune --distill"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, ScoreConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(ScoreConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.reranking.run import score

    show(score(config))
    return 0
