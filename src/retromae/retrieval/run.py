"""The library side of the retrieval commands: what `retromae encode`, `index`, `search`, `bm25` and `mine` do, each
from its config (`retromae.retrieval.config`), for the command line and the Python API (`retromae.api`) alike.

Owns running each command: claiming its output, reading its inputs, calling the retrieval modules (`encode`,
`index`, `searcher`, `bm25`, `mining`), returning the result and the lines that say what was written (or,
for `search --query`, the hits), which the command prints. Does not own parsing or printing (`retromae.commands`)
or how any of it is computed.
Each command imports its own libraries when it runs (torch for a model, faiss for an index, bm25s for BM25), so
that `retromae bm25` loads no torch.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from retromae.data.corpus import corpus_files
from retromae.data.inputs import EMBEDDINGS_INFO
from retromae.data.retrieval_sets import load_corpus, load_queries, load_retrieval_set, queries_file, write_trec_run
from retromae.data.training_groups import load_training_data, write_training_file
from retromae.retrieval.bm25 import BM25, BM25Params, bm25_search
from retromae.retrieval.bm25 import FILES as LEXICAL_FILES
from retromae.retrieval.config import RUN_K, SHOWN_K, BM25Config, EncodeConfig, IndexConfig, MineConfig, SearchConfig
from retromae.retrieval.fusion import candidate_depth
from retromae.retrieval.index import (
    FAISS_FILE,
    IDS_FILE,
    INDEX_INFO,
    LEXICAL_DIR,
    NUMPY_FILE,
    VECTORS_FILE,
    BinaryIndex,
    build_index,
    reading,
    save_index,
)
from retromae.retrieval.lineage import check_query_vectors, check_side, check_texts
from retromae.retrieval.recall import Recall, measure_recall, tune
from retromae.retrieval.searcher import Hit, QueryEncoding, Run, Searcher
from retromae.retrieval.texts import corpus_path
from retromae.retrieval.top_k import capped_top_k
from retromae.runtime.console import Result, given
from retromae.runtime.errors import DataError
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError
from retromae.runtime.processes import process_state
from retromae.runtime.run_folder import claim_file, claim_folder, input_paths, mark_started, run_identity

if TYPE_CHECKING:
    from retromae.retrieval.encode import Encoded


def read_texts(config: EncodeConfig) -> tuple[list[str], list[str]]:
    """Ids and texts of the corpus (title and text joined) or of the queries file."""
    if config.queries is not None:
        queries = load_queries(config.queries)
        return list(queries), list(queries.values())
    corpus = load_corpus(config.corpus)
    return list(corpus), [passage.joined() for passage in corpus.values()]


def encode(config: EncodeConfig) -> Encoded:
    """Encode a corpus or queries file into an embeddings folder as `config` says; returns the folder
    (`retrieval.encode` describes its layout) and how many of the texts an earlier run had encoded."""
    from retromae.models.encoder import side_prefix  # torch: only when the command runs
    from retromae.retrieval.encode import encode_into

    ids, texts = read_texts(config)
    side, given, max_length = config.text_options
    encoder = config.load_encoder(process_state().device, side)
    prefix = side_prefix(encoder, side, given)
    return encode_into(encoder, ids, texts, config.output, model_name=encoder.source, shard_size=config.shard_size,
                       batch_size=config.batch_size, max_length=max_length, prefix=prefix,
                       show_progress=config.progress, overwrite=config.overwrite,
                       description=f"encoding {Path(config.corpus or config.queries).name} ({len(ids):,} texts)",
                       source=read_from(config), side=side)


def read_from(config: EncodeConfig) -> Path:
    """The file the texts are read from (a folder stands for its corpus or queries file, by the rules of
    `data.corpus.corpus_files` and `data.retrieval_sets.queries_file`), or the folder of several corpus files."""
    if config.queries is not None:
        return queries_file(config.queries)
    files = corpus_files(config.corpus)
    return files[0] if len(files) == 1 else Path(config.corpus)


def index(config: IndexConfig) -> Result:
    """Index an embeddings folder as `config` says; returns the index folder (`retromae.index(...)`) and the line
    saying so."""
    # torch (through retrieval.encode): only when the command runs, so --help stays instant
    from retromae.retrieval.encode import load_embeddings

    lexical_files = (f"{LEXICAL_DIR}/{name}" for name in LEXICAL_FILES)  # bm25/ may hold a user's files too
    check_index_inputs(config)
    claim_folder(config.output, "index", run_identity(config),
                 (FAISS_FILE, NUMPY_FILE, VECTORS_FILE, IDS_FILE, INDEX_INFO, *lexical_files),
                 overwrite=config.overwrite, resumable=False, inputs=input_paths(config),
                 started=False)  # kept only whole (mark_started)
    with reading(config.embeddings):  # the vectors are read (memory-mapped) while the index is built
        ids, vectors, encoding = load_embeddings(config.embeddings)
        built = build_index(vectors, factory=config.factory, metric=config.metric, params=config.params,
                            seed=config.seed, shortlist=config.shortlist)
        params, recall = searched_as(config, built, vectors, ids)
    corpus = corpus_record(config, encoding)
    lexical = lexical_index(config, ids, corpus, encoding) if config.hybrid else None
    info = {"factory": config.factory, "params": params, "encoder": encoding,
            "embeddings_generation": encoding.get("generation"), "corpus": corpus,
            "recall": recall.record() if recall is not None else None}
    save_index(built, config.output, ids, info, lexical)
    mark_started(config.output)
    sides = f"{config.factory}, {config.metric}" + (", with BM25" if lexical is not None else "")
    lines = (f"indexed {len(ids)} vectors into {given(config.output)} ({sides})",)
    if recall is not None:
        lines += (recall.line(),)
    elif config.factory != "Flat":
        lines += (f"{config.factory} searches approximately: --recall-queries FOLDER (your queries, encoded by "
                  "`retromae encode --queries`) measures how much of exact search it finds",)
    return Result(Path(config.output), lines)


def check_index_inputs(config: IndexConfig) -> None:
    """Before anything is claimed or built: --embeddings holds documents, and --recall-queries query vectors that
    may be searched against them (`lineage.check_query_vectors`), as their records (encode.json) say."""
    from retromae.retrieval.encode import read_record  # torch: only when the command runs

    documents = read_record(config.embeddings)
    check_side(documents, "passage", Path(config.embeddings), "--embeddings")
    if config.recall_queries is not None:
        check_query_vectors(read_record(config.recall_queries), documents, Path(config.recall_queries),
                            Path(config.embeddings), "--recall-queries")


def searched_as(config: IndexConfig, built: Any, vectors: np.ndarray, ids: list[str]) -> tuple[str, Recall | None]:
    """The search parameters stored with an index (--params, with the knob `--target-recall` chose) and its recall
    against exact search on --recall-queries (`retrieval.recall`; None without them), checked before the claim
    (`check_index_inputs`)."""
    from retromae.retrieval.encode import load_embeddings  # torch: only when the command runs

    if config.recall_queries is None:
        return config.params, None
    with reading(config.recall_queries):
        _, queries, _ = load_embeddings(config.recall_queries)
        if config.target_recall is None:
            return config.params, measure_recall(built, vectors, ids, config.metric, queries, config.factory)
        setting, recall = tune(built, vectors, ids, config.metric, queries, config.factory, config.target_recall)
    shortlist = isinstance(built, BinaryIndex)  # kept by the index itself, not in its faiss parameters
    return (config.params if shortlist else ",".join(filter(None, (config.params, setting)))), recall


def corpus_record(config: IndexConfig, encoding: dict[str, Any]) -> dict[str, Any] | None:
    """The corpus the index's texts come from (absolute path and fingerprint): --corpus, else encode.json's."""
    from retromae.retrieval.encode import source_info  # torch (through the encoder): only when the command runs

    if config.corpus is not None:
        return source_info(config.corpus)["source"]
    source = encoding.get("source")
    return source if isinstance(source, dict) else None


def lexical_index(config: IndexConfig, ids: list[str], corpus: dict[str, Any] | None,
                  encoding: dict[str, Any]) -> BM25:
    """A BM25 index over the texts of `ids`, read from the corpus file (every id must be there), checked to be the
    texts encoded (`encoding`, encode.json's record)."""
    where = f"{Path(config.embeddings) / 'encode.json'}"
    path = config.corpus or corpus_path(corpus, where, "--corpus")
    passages = load_corpus(path)
    missing = [doc_id for doc_id in ids if doc_id not in passages]
    if missing:
        raise DataError(f"{path}: lacks {len(missing)} of the {len(ids)} ids of {config.embeddings} (e.g. "
                        f"{quoted(missing[0])}); give the corpus they were encoded from with --corpus")
    texts = [passages[doc_id].joined() for doc_id in ids]
    check_texts(ids, texts, encoding, path, where, "give the corpus they were encoded from with --corpus")
    params = BM25Params(**{f.name: getattr(config, f.name) for f in dataclasses.fields(BM25Params)})
    return BM25(params).index(ids, texts)


def search(config: SearchConfig) -> Result:
    """Search an index as `config` says; returns the TREC run file, or with `query` the hits of each query
    (`retromae.search(...)`), and the lines to show (the hits, or what was written)."""
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    searcher = load_searcher(config)
    k = capped_top_k(config.top_k or (SHOWN_K if config.query is not None else RUN_K), len(searcher.ids))
    if config.query is not None:
        queries = {str(n): text for n, text in enumerate(config.query, start=1)}
        run = searcher.run(queries, k)
        hits = [searcher.hits(run[query_id]) for query_id in queries]
    else:
        run = queries_run(config, searcher, k)
    if config.output is not None:
        write_trec_run(run, config.output, tag=config.tag)
    if config.query is not None:
        return Result(hits, hit_lines(searcher, list(queries.values()), hits, k))
    sides = f"the model and BM25, fused ({fused_depth(searcher, k)})" if searcher.hybrid else "the model"
    return Result(Path(config.output), (f"searched {len(run)} queries over {len(searcher.ids)} documents with {sides}; "
                                        f"top-{k} run in {given(config.output)}",))


def load_searcher(config: SearchConfig) -> Searcher:
    """The `Searcher` of `config`'s index, its queries encoded as `config` says."""

    encoding = QueryEncoding(config.model, config.pooling, config.normalize, config.query_prefix,
                             config.query_max_length, config.device, config.dtype, config.batch_size, config.backend,
                             config.quantize)
    return Searcher.load(config.index, model=config.model, corpus=config.corpus, fusion=config.fusion,
                         hybrid_weight=config.hybrid_weight, dense_only=config.dense_only, hybrid=config.hybrid,
                         params=config.params, shortlist=config.shortlist, texts=config.query is not None,
                         encoding=encoding)


def queries_run(config: SearchConfig, searcher: Searcher, k: int) -> Run:
    """The run of a queries file or folder (encoded here) or of an embeddings folder's query vectors."""

    if not (Path(config.queries) / EMBEDDINGS_INFO).is_file():
        return searcher.run(load_queries(config.queries), k, show_progress=True)
    ids, vectors, texts = query_vectors(config, searcher)
    return searcher.run_vectors(ids, vectors, k, texts, show_progress=True)


def query_vectors(config: SearchConfig, searcher: Searcher) -> tuple[list[str], Any, dict[str, str] | None]:
    """Ids, `(Q, D)` vectors and (for a hybrid index) texts of an embeddings folder of queries, checked to be queries
    encoded as the index's documents were (`lineage.check_query_vectors`); the texts from the queries file its
    encode.json records."""
    from retromae.retrieval.encode import INFO_FILE, load_embeddings  # torch: only when the command runs

    with reading(config.queries):
        ids, vectors, info = load_embeddings(config.queries)
        vectors = np.asarray(vectors, dtype=np.float32)
    recorded = searcher.info.get("encoder", {})
    check_query_vectors(info, recorded, Path(config.queries), searcher.folder)
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
                          f"{quoted(missing)}; encode the queries again")
    return ids, vectors, {query_id: texts[query_id] for query_id in ids}


def fused_depth(searcher: Searcher, k: int) -> str:
    """How many documents each side of a hybrid search contributed, in words (`fusion.candidate_depth`)."""
    return f"each side's best {min(candidate_depth(k), len(searcher.ids)):,}"


def hit_lines(searcher: Searcher, queries: list[str], hits: list[list[Hit]], k: int) -> tuple[str, ...]:
    """Each query, then one line per hit: rank, score, id and the start of the document, then an empty line."""
    width = max(60, shutil.get_terminal_size((100, 20)).columns)
    method = searcher.fusion.method + (f", weight {searcher.fusion.weight:g}" if searcher.fusion.method == "convex"
                                       else "")
    how = f"hybrid: model + BM25, {method}, {fused_depth(searcher, k)}" if searcher.hybrid else "model"
    lines: list[str] = []
    for text, query_hits in zip(queries, hits, strict=True):
        lines.append(f"query: {given(text)}  ({how}; {len(query_hits)} hits)")
        id_width = max((len(given(hit.id)) for hit in query_hits), default=2)
        for hit in query_hits:
            line = f"{hit.rank:>4}  {hit.score:8.4f}  {given(hit.id)}"
            if hit.text is not None:
                line = f"{line:<{id_width + 16}}"
                room = max(20, width - len(line) - 2)
                start = " ".join(hit.text.split())
                line += "  " + (given(start) if len(start) <= room else given(start[:room - 1]) + "…")
            lines.append(line)
        lines.append("")
    return tuple(lines)


def read_inputs(config: BM25Config) -> tuple[dict[str, str], dict[str, str]]:
    """Corpus (id → title and text) and queries (id → text) to search."""
    if config.data is not None:
        data = load_retrieval_set(config.data, config.split)
        corpus, queries = data.corpus, data.queries
    else:
        corpus, queries = load_corpus(config.corpus), load_queries(config.queries)
    return {doc_id: passage.joined() for doc_id, passage in corpus.items()}, queries


def bm25(config: BM25Config) -> Result:
    """A BM25 run as `config` says; returns the TREC run file (`retromae.bm25(...)`) and the line saying so."""
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    corpus, queries = read_inputs(config)
    write_trec_run(bm25_search(corpus, queries, config.top_k, config), config.output, tag=config.tag)
    return Result(Path(config.output), (f"BM25: {len(queries)} queries over {len(corpus)} documents; "
                                        f"top-{config.top_k} run in {given(config.output)}",))


def mine(config: MineConfig) -> Result:
    """Mine hard negatives as `config` says; returns the training file written (`retromae.mine(...)`) and the line
    saying so."""
    # torch and faiss: only when the command runs, so --help stays instant
    from retromae.retrieval.mining import bm25_rankings, choose_negatives, dense_rankings

    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    data = load_training_data(config.data, config.split)
    config.check_window(len(data.texts), data.source)
    if config.negatives == "bm25":
        rankings = bm25_rankings(data, config.rank_end)
    else:
        towers = config.load_towers()
        rankings = dense_rankings(towers.passage, data, config.rank_end, config.batch_size, config.query_max_length,
                                  config.passage_max_length, query_encoder=towers.query,
                                  query_prefix=config.query_prefix, passage_prefix=config.passage_prefix)
    for example, negatives in zip(data.examples, choose_negatives(data, rankings, config, config.seed), strict=True):
        example.negatives = negatives
    write_training_file(data, config.output)
    return Result(Path(config.output), (f"mined {sum(len(e.negatives) for e in data.examples)} negatives for "
                                        f"{len(data.examples)} queries into {given(config.output)}",))
