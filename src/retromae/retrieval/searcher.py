"""Searching an index folder by text: `Searcher.load(IDX)` reads the index (and its lexical side, and its corpus's
texts) and loads the query encoder once; `.search("text", k=10)` returns `Hit`s (rank, id, score, text).

An index built with `retromae index --hybrid` is searched on both sides and fused (`retrieval.fusion`: the
candidates are the union of each side's best `fusion.DEPTH` documents, or best k when more hits are asked for, so
that the first n hits never depend on k); one without its lexical side, by the model alone. Owns the query
encoder's choice (the model, pooling and normalisation index.json records, unless overridden; every error about a
recorded path names index.json and the option that overrides it), the check that query vectors come from the
index's encoder, and `run`/`run_vectors` (runs for `retromae search`). Does not own the index folder
(`retrieval.index`), BM25 (`retrieval.bm25`) or the fusion rules.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from retromae.data.fields import UniqueIds, check_id
from retromae.data.ranking import Run, ranked
from retromae.models.model_source import tower_folder, tower_side
from retromae.retrieval.config import SearchConfig
from retromae.retrieval.fusion import DEFAULT_METHOD, DEFAULT_WEIGHT, METHODS, candidate_depth, check_fusion, fuse
from retromae.retrieval.lineage import (
    check_inference,
    check_model,
    check_prompts,
    check_query_options,
    recorded_inference,
)
from retromae.retrieval.texts import document_texts
from retromae.runtime.errors import DataError, FileSystemError, RetroMAEError
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError, checked_arguments, require

if TYPE_CHECKING:
    import numpy as np

    from retromae.models.encoder import Encoder
    from retromae.retrieval.bm25 import BM25



@dataclasses.dataclass(frozen=True)
class Hit:
    """One retrieved document: its rank (1 = best), id, score (the fused score on a hybrid index, else the
    model's similarity) and text (None when the corpus the index records moved or changed)."""

    rank: int
    id: str
    score: float
    text: str | None


@dataclasses.dataclass
class Fusion:
    """How the two sides of a hybrid index are fused; `dense_only` searches with the model alone."""

    method: str = DEFAULT_METHOD
    weight: float = DEFAULT_WEIGHT
    dense_only: bool = False

    def __post_init__(self) -> None:
        require(self.method in METHODS, "fusion", f"must be one of {', '.join(METHODS)}")
        check_fusion(self.method, self.weight)


@dataclasses.dataclass
class QueryEncoding:
    """The query side's options; None: what index.json records (the prefix: the model's query prompt, `side_prefix`)."""

    model: str | None = None
    pooling: str | None = None
    normalize: bool | None = None
    prefix: str | None = None
    max_length: int | None = None
    device: str | None = None
    dtype: str = "auto"
    batch_size: int = 64
    backend: str | None = None
    quantize: str | None = None


def _texts(queries: Any) -> Any:
    """The texts of a mapping of queries (id → text), checked as `--query` values, its keys as query ids
    (`_checked_ids`); anything but a mapping refused (a list's texts would be taken for ids)."""
    if not isinstance(queries, Mapping):
        raise ConfigError(f"--query: expected a mapping of query ids to texts, got {quoted(queries)}")
    _checked_ids("queries", list(queries), "key")
    return list(queries.values())


def _checked_ids(argument: str, ids: list[Any], item: str = "position") -> list[str]:
    """`ids` as plain str, each an id by the files' rule (`data.fields.check_id`: text without whitespace, of at most
    1,000 characters) and given once (`UniqueIds`: a repeated id's results would replace the other's); DataError naming
    `argument` and the `item` (position, or key) otherwise. A number is refused, not converted: 1 and "1" would be two
    queries of one run here, and one in the TREC run file that holds an id as its text."""
    unique = UniqueIds("query id")
    for number, value in enumerate(ids):
        where = f"{argument} ({item} {number})"
        unique.add(check_id(value, where, "query id"), where)
    return [str(value) for value in ids]


def _query_ids(argument: str, ids: Any, arguments: Mapping[str, Any]) -> list[str]:
    """`run_vectors`' query ids: a list (tuple, or one-dimensional numpy array) of ids (`_checked_ids`)."""
    if isinstance(ids, str | bytes | Mapping) or not (isinstance(ids, Sequence) or (
            type(ids).__module__ == "numpy" and getattr(ids, "ndim", None) == 1)):
        raise DataError(f"{argument}: expected a list of query ids, got {quoted(ids)}")
    return _checked_ids(argument, list(ids))


def _query_vectors(argument: str, vectors: Any, arguments: Mapping[str, Any]) -> np.ndarray:
    """`run_vectors`' vectors as float32 `(len(query_ids), D)`: a numpy array of floating-point numbers (float16, 32
    or 64: integers are no model's vectors), one row per query id, the index's width D, each value finite and small
    enough that its products with the index's vectors stay finite (`models.finite.check_vectors`, `VECTOR_LIMIT`)."""
    import numpy as np  # only when vectors are searched, so `retromae.Searcher` imports light

    from retromae.models.finite import VECTOR_LIMIT, check_vectors  # torch: only when vectors are searched

    if not isinstance(vectors, np.ndarray) or vectors.dtype.kind != "f":
        kind = f"an array of {vectors.dtype}" if isinstance(vectors, np.ndarray) else f"a {type(vectors).__name__}"
        raise DataError(f"{argument}: expected a numpy array of floating-point numbers, got {kind}")
    ids, searcher = arguments["query_ids"], arguments["self"]
    if vectors.shape != (len(ids), searcher.index.d):
        raise DataError(f"{argument}: holds shape {vectors.shape}, not ({len(ids)}, {searcher.index.d}): one row per "
                        f"query id, as wide as the vectors of {searcher.folder}")
    check_vectors(vectors, argument, ids, VECTOR_LIMIT)
    return np.asarray(vectors, dtype=np.float32)


def _query_texts(argument: str, queries: Mapping[str, str] | None, arguments: Mapping[str, Any]) -> Any:
    """`run_vectors`' query texts: on a hybrid index, a text for each query id (BM25 searches them)."""
    if arguments["self"].lexical is None:
        return queries
    if queries is None:
        raise ConfigError(f"{argument}: a hybrid index needs the query texts for BM25 (--queries as a queries file); "
                          "or --dense-only")
    missing = next((query_id for query_id in arguments["query_ids"] if query_id not in queries), None)
    if missing is not None:
        raise DataError(f"{argument}: holds no text for query {quoted(missing)}, which a hybrid index needs for BM25")
    return queries


def _scores(argument: str, scores: Any, arguments: Mapping[str, Any]) -> dict[str, float]:
    """`hits`' scores: a mapping of the index's document ids to finite numbers (a query's entry of a run)."""
    if not isinstance(scores, Mapping):
        raise DataError(f"{argument}: expected a mapping of document ids to scores, got {quoted(scores)}")
    searcher = arguments["self"]
    for doc_id, score in scores.items():
        if doc_id not in searcher.rows:
            raise DataError(f"{argument}: document {quoted(doc_id)} is not in the index {searcher.folder} (of "
                            f"{len(searcher.ids):,} documents)")
        if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score):
            raise DataError(f"{argument}: the score of document {quoted(doc_id)} is {quoted(score)}, not a finite "
                            "number")
    return {doc_id: float(score) for doc_id, score in scores.items()}


class Searcher:
    """An index folder loaded once for many searches (`Searcher.load`); the arguments of its methods are checked
    (`checked_arguments`) as the options of `retromae search` they stand for, and its data (query ids, vectors, a
    run entry's scores) by their own checks, each refused in one line naming the argument."""

    def __init__(self, folder: Path, index: Any, ids: list[str], info: dict[str, Any], lexical: BM25 | None,
                 texts: list[str] | None, fusion: Fusion, encoding: QueryEncoding) -> None:
        self.folder, self.index, self.ids, self.info = folder, index, ids, info
        self.lexical, self.texts, self.fusion, self.encoding = lexical, texts, fusion, encoding
        self._encoder: Encoder | None = None
        self._rows: dict[str, int] | None = None

    @property
    def rows(self) -> dict[str, int]:
        """Each document id's row in the index."""
        if self._rows is None:
            self._rows = {doc_id: n for n, doc_id in enumerate(self.ids)}
        return self._rows

    @classmethod
    @checked_arguments(SearchConfig, unchecked=("texts", "encoding"), index="index", model="model", corpus="corpus",
                       fusion="fusion", hybrid_weight="hybrid_weight", dense_only="dense_only", hybrid="hybrid",
                       params="params", shortlist="shortlist")
    def load(cls, index: str | Path, *, model: str | None = None, corpus: str | Path | None = None,
             fusion: str | None = None, hybrid_weight: float | None = None, dense_only: bool = False,
             hybrid: bool = False, params: str | None = None, shortlist: int | None = None, texts: bool = True,
             encoding: QueryEncoding | None = None) -> Searcher:
        """Load the index folder `index` (under its shared lock), its lexical side unless `dense_only`, and its
        documents' texts (from `corpus`, else the recorded corpus) when `texts`. `hybrid` (or `fusion` or
        `hybrid_weight`) requires the lexical side; `model` overrides the recorded model; `params` the recorded
        faiss search parameters, `shortlist` a binary index's recorded shortlist (refused on another index)."""
        # numpy (and faiss for a faiss index): only when an index is loaded, so `retromae.Searcher` imports light
        from retromae.retrieval.index import BinaryIndex, load_index, load_lexical, reading, set_search_params

        folder = Path(index)
        asked = hybrid or fusion is not None or hybrid_weight is not None
        require(not (asked and dense_only), "dense_only", "searches with the model alone: drop --hybrid, --fusion "
                                                          "and --hybrid-weight, or --dense-only")
        chosen = fusion_of(fusion, hybrid_weight, dense_only)
        with reading(folder):
            built, ids, info = load_index(folder)
            lexical = None if dense_only else load_lexical(folder, ids, info)
        if asked and lexical is None:
            raise ConfigError(f"--hybrid: {folder} has no lexical (BM25) side; build it with `retromae index "
                              "--hybrid ...`, or search without --hybrid, --fusion and --hybrid-weight")
        where = f"{folder / 'index.json'}"
        set_search_params(built, *((info.get("params", ""), f"{where}: params") if params is None else (params,)))
        if shortlist is not None:
            require(isinstance(built, BinaryIndex), "shortlist", f"acts only on an index of --factory binary; {folder} "
                                                                 f"is of type {info.get('type', 'factory')!r}")
            built.shortlist = shortlist
        recorded = info.get("corpus"), info.get("encoder")
        shown = document_texts(ids, recorded[0], where, "--corpus", corpus, recorded[1]) if texts else None
        query_side = encoding or QueryEncoding()
        if model is not None:
            query_side = dataclasses.replace(query_side, model=model)
        return cls(folder, built, ids, info, lexical, shown, chosen, query_side)

    @property
    def hybrid(self) -> bool:
        """Whether searches fuse BM25 with the model."""
        return self.lexical is not None

    @property
    def encoder(self) -> Encoder:
        """The query encoder, loaded on first use."""
        if self._encoder is None:
            self._encoder = load_query_encoder(self.encoding, self.info.get("encoder", {}), self.folder)
        return self._encoder

    @overload
    def search(self, query: str, k: int = 10) -> list[Hit]: ...

    @overload
    def search(self, query: Sequence[str], k: int = 10) -> list[list[Hit]]: ...

    @checked_arguments(SearchConfig, query="query", k="top_k")
    def search(self, query: str | Sequence[str], k: int = 10) -> list[Hit] | list[list[Hit]]:
        """The top-k hits of one query (a list of `Hit`), or of each of several (a list of such lists)."""
        texts = [query] if isinstance(query, str) else list(query)
        run = self.run({str(n): text for n, text in enumerate(texts)}, k)
        hits = [self.hits(run[str(n)]) for n in range(len(texts))]
        return hits[0] if isinstance(query, str) else hits

    @checked_arguments(SearchConfig, checks={"scores": _scores})
    def hits(self, scores: Mapping[str, float]) -> list[Hit]:
        """A query's run entry (the index's document ids → finite scores) as ranked `Hit`s with the documents'
        texts."""
        return [Hit(rank, doc_id, scores[doc_id], self.texts[self.rows[doc_id]] if self.texts is not None else None)
                for rank, doc_id in enumerate(ranked(scores), start=1)]

    @checked_arguments(SearchConfig, unchecked=("show_progress",), queries=("query", _texts), k="top_k")
    def run(self, queries: Mapping[str, str], k: int = 10, show_progress: bool = False) -> Run:
        """The top-k run of `queries` (id → text): encoded with the index's model, fused with BM25 on a hybrid
        index."""
        from retromae.models.encoder import side_prefix  # torch: only when texts are encoded
        from retromae.retrieval.search import TextOptions, encode_texts

        query_ids = list(queries)
        options = TextOptions(side_prefix(self.encoder, "query", self.encoding.prefix), self.encoding.max_length)
        vectors = encode_texts(self.encoder, [queries[q] for q in query_ids], options, self.encoding.batch_size,
                               show_progress, f"encoding queries ({len(query_ids):,} texts)")  # (Q, D)
        return self.run_vectors(query_ids, vectors, k, queries, show_progress)

    @checked_arguments(SearchConfig, unchecked=("show_progress",), queries=("query", _texts), k="top_k",
                       checks={"query_ids": _query_ids, "vectors": _query_vectors, "queries": _query_texts})
    def run_vectors(self, query_ids: Sequence[str], vectors: np.ndarray, k: int = 10,
                    queries: Mapping[str, str] | None = None, show_progress: bool = False) -> Run:
        """The top-k run of query vectors `(Q, D)`, a row per query id (each once, text); on a hybrid index fused with
        BM25 over `queries`' texts."""
        # numpy, faiss and (through retrieval.search) torch: only when a search runs
        from retromae.retrieval.bm25 import empty_results
        from retromae.retrieval.index import search
        from retromae.retrieval.search import results_to_run

        k = min(k, len(self.ids))
        depth = k if self.lexical is None else candidate_depth(k)  # each side's candidates: the fusion's depth
        scores, rows = search(self.index, vectors, depth, ids=self.ids, show_progress=show_progress)  # (Q, depth)
        dense = results_to_run(query_ids, self.ids, scores, rows)
        if self.lexical is None:
            return dense
        lexical = self.lexical.search({q: queries[q] for q in query_ids}, depth, show_progress=False)
        empty_results(lexical, "BM25 (the lexical side)")
        return fuse(dense, lexical, self.fusion.method, self.fusion.weight, k=k)


def fusion_of(method: str | None, weight: float | None, dense_only: bool) -> Fusion:
    """The fusion the options ask for; --hybrid-weight only with convex fusion."""
    if weight is not None and method == "rrf":
        raise ConfigError("--hybrid-weight: applies to --fusion convex (RRF fuses ranks, without weights)")
    try:
        return Fusion(method or DEFAULT_METHOD, DEFAULT_WEIGHT if weight is None else weight, dense_only)
    except RetroMAEError as error:
        raise ConfigError(f"--hybrid-weight: {error}") from None


def query_tower(model: Any) -> Any:
    """The model that encodes the queries of documents a record says `model` encoded: its query tower where it is
    an untied fine-tune's passage tower (`model_source.tower_side`), else itself (a run folder stands for its
    query tower when loaded for the queries)."""
    passage = isinstance(model, str) and bool(model) and tower_side(model) == "passage"
    return str(tower_folder(model, "query")) if passage else model


def load_query_encoder(options: QueryEncoding, recorded: dict[str, Any], folder: Path) -> Encoder:
    """The encoder of the queries: `options.model`, else the model index.json records (its query tower:
    `query_tower`; errors about it name index.json and --model), loaded for the queries (an untied fine-tune's query
    tower: `Encoder.load`'s `side`), checked to be the model the documents were encoded with (its fingerprint:
    `lineage.check_model`), its pooling and normalisation given only as the documents' (`check_query_options`) and,
    where its query prompt would be put by default, to have encoded them with its passage prompt (`check_prompts`)."""
    # torch and transformers: only when queries are encoded here (a BM25 or vector search loads no model)
    from retromae.models.encoder import Encoder
    from retromae.models.masked_lm import check_max_length

    where = folder / "index.json"
    model = options.model or query_tower(recorded.get("model"))
    if not model:
        raise ConfigError(f"--model: {where} records no model; name the one that encoded the corpus")
    check_model(model, recorded, where, given=options.model is not None)
    check_query_options({"pooling": options.pooling, "normalize": options.normalize}, recorded, folder)
    pooling = options.pooling or recorded.get("pooling")
    normalize = recorded.get("normalize") if options.normalize is None else options.normalize
    documents = recorded_inference(recorded, where)
    inference = options.backend or documents[0], options.quantize or documents[1]
    check_inference(inference, documents, "--backend: the queries would be", folder)
    try:
        encoder = Encoder.load(model, pooling=pooling, normalize=normalize, device=options.device,
                               dtype=options.dtype, backend=inference[0], quantize=inference[1], side="query")
    except RetroMAEError as error:
        if options.model or isinstance(error, FileSystemError):  # the file system's (a cache), not the record's
            raise
        raise type(error)(f"{error} (the model path was recorded in {where}; --model overrides it)") from None
    check_max_length(encoder.model.config, options.max_length, "query_max_length", encoder.tokenizer)
    check_prompts(encoder.prompts, options.prefix, recorded, where, model)
    encoder.weights_fixed = True  # only queries, one call each: the weights cast and packed once serve them all
    return encoder
