"""`retromae train-reranker`: train a cross-encoder on queries with mined negatives (a distillation teacher)."""

from __future__ import annotations

import argparse

from retromae.config import add_config_arguments, build_config

NAME = "train-reranker"
HELP = "train a cross-encoder reranker (listwise loss over mined negatives), the teacher for finetune --distill"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from retromae.reranker import RerankerConfig

    add_config_arguments(parser, RerankerConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.reranker import RERANKER_DIR, RerankerConfig, train_reranker

    output = train_reranker(build_config(RerankerConfig, args))
    print(f"reranker: {output / RERANKER_DIR}")
    return 0
