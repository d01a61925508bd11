"""`retromae search`: an index folder + queries → the top-k documents. Texts given with `--query` are printed (rank,
score, id, the start of the document); a queries file (or an embeddings folder of query vectors) becomes a TREC run.

Thin: parse → `SearchConfig` (`retromae.retrieval.config`) → `retromae.retrieval.run.search`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.retrieval.config import SearchConfig
from retromae.runtime.options import add_config_arguments

HELP = "search an index by text (--query, printed) or with a queries file / query vectors (a TREC run file)"
SHOWN_K, RUN_K = 10, 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, SearchConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(SearchConfig, args)  # first: a wrong option, file or hub name answered before torch
    # numpy, faiss, bm25s or torch: only when the command runs, so --help stays instant
    from retromae.retrieval.run import search

    show(search(config))
    return 0
