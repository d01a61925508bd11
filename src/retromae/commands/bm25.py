"""`retromae bm25`: a BM25 run (bm25s) of a retrieval set's queries over its corpus, as a TREC run file.

Thin: parse → `BM25Config` → `retrieval.bm25.BM25` → `write_trec_run`. The lexical baseline, and the source
of BM25 hard negatives for fine-tuning.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import TOP_K, ConfigError, add_config_arguments, build_config, option
from retromae.console import quiet_by_default
from retromae.data.retrieval_sets import load_corpus, load_queries, load_retrieval_set, write_trec_run
from retromae.retrieval.bm25 import BM25Params, bm25_search
from retromae.run_folder import OutputOptions, claim_file, input_paths

HELP = "BM25 retrieval with bm25s over a BEIR/MS MARCO folder (or corpus + queries files) → TREC run"


@dataclasses.dataclass(kw_only=True)
class BM25Config(OutputOptions, BM25Params):
    data: Path | None = option(None, "BEIR or MS MARCO folder; its --split queries are searched",
                               required_unless="--corpus and --queries")
    split: str = option("test", "split whose judged queries are searched (with --data)")
    corpus: Path | None = option(None, "corpus file (with --queries): corpus.jsonl or collection.tsv",
                                 required_unless="--data")
    queries: Path | None = option(None, "queries file (with --corpus): queries.jsonl or queries.tsv",
                                  required_unless="--data")
    output: Path = option(help="TREC run file to write")
    top_k: int = option(100, "documents retrieved per query", TOP_K, aliases=("--k",))
    tag: str = option("bm25", "run tag written in the last column")

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.data is None) == (self.corpus is None or self.queries is None):
            raise ConfigError("--data: give either --data (with --split) or both --corpus and --queries")


def read_inputs(config: BM25Config) -> tuple[dict[str, str], dict[str, str]]:
    """Corpus (id → title and text) and queries (id → text) to search."""
    if config.data is not None:
        data = load_retrieval_set(config.data, config.split)
        corpus, queries = data.corpus, data.queries
    else:
        corpus, queries = load_corpus(config.corpus), load_queries(config.queries)
    return {doc_id: passage.joined() for doc_id, passage in corpus.items()}, queries


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, BM25Config)


def run(args: argparse.Namespace) -> int:
    bm25(build_config(BM25Config, args))
    return 0


@quiet_by_default
def bm25(config: BM25Config | None = None, /, **options: Any) -> Path:
    """A BM25 run as `config` (or `BM25Config(**options)`) says; returns the TREC run file (`retromae.bm25(...)`)."""
    config = config if config is not None else BM25Config(**options)
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    corpus, queries = read_inputs(config)
    write_trec_run(bm25_search(corpus, queries, config.top_k, config), config.output, tag=config.tag)
    print(f"BM25: {len(queries)} queries over {len(corpus)} documents; top-{config.top_k} run in {config.output}")
    return Path(config.output)
