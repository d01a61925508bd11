"""`retromae mine`: hard negatives for every query of a training set, written as a training file.

Thin: parse → `MineConfig` (`retromae.retrieval.config`) → `retromae.retrieval.run.mine`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.retrieval.config import MineConfig
from retromae.runtime.options import add_config_arguments

HELP = "mine hard negatives (BM25 or a dense model) for a BEIR split or a training file; writes training JSON lines"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, MineConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(MineConfig, args)  # first: a wrong option, file or hub name answered before torch
    # numpy, faiss, bm25s or torch: only when the command runs, so --help stays instant
    from retromae.retrieval.run import mine

    show(mine(config))
    return 0
