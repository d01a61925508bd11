"""`retromae search`: an index folder + queries → the top-k documents. Texts given with `--query` are printed (rank,
score, id, the start of the document); a queries file (or an embeddings folder of query vectors) becomes a TREC run.

Thin: parse → `SearchConfig` → `retrieval.searcher.Searcher` (the index, its lexical side when built with
`index --hybrid`, the query encoder recorded in index.json unless options override it) → `write_trec_run`, or the
hits printed. An index with both sides is searched on both and fused unless `--dense-only`.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retromae.config import (
    POSITIVE,
    PROBABILITY,
    TOP_K,
    ConfigError,
    add_config_arguments,
    build_config,
    option,
    require,
)
from retromae.console import quiet_by_default
from retromae.encoder_config import EncoderOptions
from retromae.retrieval.fusion import METHODS
from retromae.run_folder import OutputOptions, claim_file, input_paths

if TYPE_CHECKING:
    from retromae.retrieval.searcher import Hit, Run, Searcher

HELP = "search an index by text (--query, printed) or with a queries file / query vectors (a TREC run file)"
SHOWN_K, RUN_K = 10, 100


@dataclasses.dataclass(kw_only=True)
class SearchConfig(OutputOptions, EncoderOptions):
    model: str | None = option(None, "model that encodes the queries; default: the one recorded in index.json")
    index: Path = option(help="index folder written by `retromae index` (with --hybrid: searched with BM25 too)")
    query: list[str] | None = option(None, "text to search for (one or more, each quoted): rank, score, id and the "
                                           "start of each document are printed", required_unless="--queries")
    queries: Path | None = option(None, "queries: a queries file (queries.jsonl, queries.tsv) to encode here, or an "
                                        "embeddings folder of query vectors from `retromae encode`",
                                  required_unless="--query")
    output: Path | None = option(None, "TREC run file to write (required with --queries; optional with --query)")
    corpus: Path | None = option(None, "corpus file whose texts --query shows; default: the one index.json records")
    top_k: int | None = option(None, f"documents per query; default {SHOWN_K} with --query, {RUN_K} with --queries",
                               TOP_K, aliases=("--k",))
    hybrid: bool = option(False, "require the index's BM25 side (refused on an index built without --hybrid); an "
                                 "index with both sides is fused without it")
    dense_only: bool = option(False, "search with the model alone, even on an index with a BM25 side")
    fusion: str | None = option(None, "how the two sides of a hybrid index are fused: convex (min-max normalised "
                                      "scores, weighted) or rrf (reciprocal ranks); default convex", choices=METHODS)
    hybrid_weight: float | None = option(None, "the model's share under convex fusion, in [0, 1] (BM25 gets the "
                                               "rest); default 0.7", PROBABILITY)
    params: str | None = option(None, "faiss search parameters, e.g. efSearch=256; default: those saved in the index")
    query_prefix: str = option("", "text put before every query when encoding, e.g. 'query: '")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    tag: str = option("retromae", "run tag written in the last column")

    def __post_init__(self) -> None:
        super().__post_init__()
        require((self.query is None) != (self.queries is None), "query", "give either --query TEXT or --queries")
        require(self.queries is None or self.output is not None, "output", "is required with --queries")
        require(self.query is None or all(text.strip() for text in self.query), "query", "must not be empty")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, SearchConfig)


def run(args: argparse.Namespace) -> int:
    search(build_config(SearchConfig, args))
    return 0


@quiet_by_default
def search(config: SearchConfig | None = None, /, **options: Any) -> Path | list[list[Hit]]:
    """Search an index as `config` (or `SearchConfig(**options)`) says; returns the TREC run file, or with `query`
    the hits of each query (`retromae.search(...)`)."""
    # numpy, faiss and torch: only when the command runs, so --help stays instant
    from retromae.data.retrieval_sets import write_trec_run
    from retromae.retrieval.top_k import capped_top_k

    config = config if config is not None else SearchConfig(**options)
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    searcher = load_searcher(config)
    k = capped_top_k(config.top_k or (SHOWN_K if config.query is not None else RUN_K), len(searcher.ids))
    if config.query is not None:
        queries = {str(n): text for n, text in enumerate(config.query, start=1)}
        run = searcher.run(queries, k)
        hits = [searcher.hits(run[query_id]) for query_id in queries]
        print_hits(searcher, list(queries.values()), hits)
    else:
        run = queries_run(config, searcher, k)
    if config.output is not None:
        write_trec_run(run, config.output, tag=config.tag)
    if config.query is not None:
        return hits
    sides = "the model and BM25, fused" if searcher.hybrid else "the model"
    print(f"searched {len(run)} queries over {len(searcher.ids)} documents with {sides}; top-{k} run in "
          f"{config.output}")
    return Path(config.output)


def load_searcher(config: SearchConfig) -> Searcher:
    from retromae.retrieval.searcher import QueryEncoding, Searcher

    encoding = QueryEncoding(config.model, config.pooling, config.normalize, config.query_prefix,
                             config.query_max_length, config.device, config.dtype, config.batch_size)
    return Searcher.load(config.index, model=config.model, corpus=config.corpus, fusion=config.fusion,
                         hybrid_weight=config.hybrid_weight, dense_only=config.dense_only, hybrid=config.hybrid,
                         params=config.params, texts=config.query is not None, encoding=encoding)


def queries_run(config: SearchConfig, searcher: Searcher, k: int) -> Run:
    """The run of a queries file (encoded here) or of an embeddings folder's query vectors."""
    from retromae.data.retrieval_sets import load_queries

    if not Path(config.queries).is_dir():
        return searcher.run(load_queries(config.queries), k, show_progress=True)
    ids, vectors, texts = query_vectors(config, searcher)
    return searcher.run_vectors(ids, vectors, k, texts, show_progress=True)


def query_vectors(config: SearchConfig, searcher: Searcher) -> tuple[list[str], Any, dict[str, str] | None]:
    """Ids, `(Q, D)` vectors and (for a hybrid index) texts of an embeddings folder of queries, checked to come
    from the index's encoder; the texts from the queries file its encode.json records."""
    import numpy as np

    from retromae.data.retrieval_sets import load_queries
    from retromae.retrieval.encode import INFO_FILE, load_embeddings
    from retromae.retrieval.index import reading
    from retromae.retrieval.searcher import check_query_vectors
    from retromae.retrieval.texts import corpus_path

    with reading(config.queries):
        ids, vectors, info = load_embeddings(config.queries)
        vectors = np.asarray(vectors, dtype=np.float32)
    check_query_vectors(info, searcher.info.get("encoder", {}), Path(config.queries), searcher.folder)
    if not searcher.hybrid:
        return ids, vectors, None
    try:
        path = corpus_path(info.get("source"), f"{Path(config.queries) / INFO_FILE}", "--queries")
    except ConfigError as error:
        raise ConfigError(f"{error} (a hybrid index needs the query texts for BM25; or --dense-only)") from None
    texts = load_queries(path)
    missing = next((query_id for query_id in ids if query_id not in texts), None)
    if missing is not None:
        raise ConfigError(f"--queries: {path} (recorded in {Path(config.queries) / INFO_FILE}) has no query "
                          f"{missing!r}; encode the queries again")
    return ids, vectors, {query_id: texts[query_id] for query_id in ids}


def print_hits(searcher: Searcher, queries: list[str], hits: list[list[Hit]]) -> None:
    """Each query, then one line per hit: rank, score, id and the start of the document (standard output)."""
    width = max(60, shutil.get_terminal_size((100, 20)).columns)
    method = searcher.fusion.method + (f", weight {searcher.fusion.weight:g}" if searcher.fusion.method == "convex"
                                       else "")
    how = f"hybrid: model + BM25, {method}" if searcher.hybrid else "model"
    for text, query_hits in zip(queries, hits, strict=True):
        print(f"query: {text}  ({how}; {len(query_hits)} hits)")
        id_width = max((len(hit.id) for hit in query_hits), default=2)
        for hit in query_hits:
            line = f"{hit.rank:>4}  {hit.score:8.4f}  {hit.id}"
            if hit.text is not None:
                line = f"{line:<{id_width + 16}}"
                room = max(20, width - len(line) - 2)
                start = " ".join(hit.text.split())
                line += "  " + (start if len(start) <= room else start[:room - 1] + "…")
            print(line)
        print()
