"""`retromae bm25`: a BM25 run (bm25s) of a retrieval set's queries over its corpus, as a TREC run file.

Thin: parse → `BM25Config` (`retromae.retrieval.config`) → `retromae.retrieval.run.bm25`. The lexical baseline, and
the source of BM25 hard negatives for fine-tuning.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.retrieval.config import BM25Config
from retromae.runtime.options import add_config_arguments

HELP = "BM25 retrieval with bm25s over a BEIR/MS MARCO folder (or corpus + queries files) → TREC run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, BM25Config)


def run(args: argparse.Namespace) -> int:
    config = configured(BM25Config, args)  # first: a wrong option, file or hub name answered before torch
    # numpy, faiss, bm25s or torch: only when the command runs, so --help stays instant
    from retromae.retrieval.run import bm25

    show(bm25(config))
    return 0
