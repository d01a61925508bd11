"""`retromae index`: an embeddings folder → a faiss (or exact numpy) index folder; with `--hybrid`, a BM25 index of
the same documents beside it, so that `retromae search` fuses both.

Thin: parse → `IndexConfig` (`retromae.retrieval.config`) → `retromae.retrieval.run.index`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.retrieval.config import IndexConfig
from retromae.runtime.options import add_config_arguments

HELP = ("build a faiss index (Flat, HNSW, IVF-PQ via a factory string; int8 or binary compressed) over an embeddings "
        "folder, with --hybrid BM25")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, IndexConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(IndexConfig, args)  # first: a wrong option, file or hub name answered before torch
    # numpy, faiss, bm25s or torch: only when the command runs, so --help stays instant
    from retromae.retrieval.run import index

    show(index(config))
    return 0
