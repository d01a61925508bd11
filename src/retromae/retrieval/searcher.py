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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from retromae.data.ranking import Run, ranked
from retromae.models.model_source import tower_folder, tower_side
from retromae.retrieval.config import SearchConfig
from retromae.retrieval.fusion import DEFAULT_METHOD, DEFAULT_WEIGHT, METHODS, candidate_depth, check_fusion, fuse
from retromae.retrieval.lineage import check_inference, check_model, check_prompts, recorded_inference
from retromae.retrieval.texts import document_texts
from retromae.runtime.errors import RetroMAEError
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
    """The texts of a mapping of queries (id → text), checked as `--query` values; anything but a mapping refused
    (a list's texts would be taken for ids)."""
    if not isinstance(queries, Mapping):
        raise ConfigError(f"--query: expected a mapping of query ids to texts, got {quoted(queries)}")
    return list(queries.values())


class Searcher:
    """An index folder loaded once for many searches (`Searcher.load`); the arguments of its methods are checked
    as the options of `retromae search` they stand for (`checked_arguments`)."""

    def __init__(self, folder: Path, index: Any, ids: list[str], info: dict[str, Any], lexical: BM25 | None,
                 texts: list[str] | None, fusion: Fusion, encoding: QueryEncoding) -> None:
        self.folder, self.index, self.ids, self.info = folder, index, ids, info
        self.lexical, self.texts, self.fusion, self.encoding = lexical, texts, fusion, encoding
        self._encoder: Encoder | None = None
        self._rows: dict[str, int] | None = None

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

    def hits(self, scores: Mapping[str, float]) -> list[Hit]:
        """A query's run entry as ranked `Hit`s with the documents' texts."""
        if self._rows is None:
            self._rows = {doc_id: n for n, doc_id in enumerate(self.ids)}
        row = self._rows
        ordered = ranked(scores)
        return [Hit(rank, doc_id, scores[doc_id], self.texts[row[doc_id]] if self.texts is not None else None)
                for rank, doc_id in enumerate(ordered, start=1)]

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

    @checked_arguments(SearchConfig, unchecked=("query_ids", "vectors", "show_progress"), queries=("query", _texts),
                       k="top_k")
    def run_vectors(self, query_ids: Sequence[str], vectors: np.ndarray, k: int = 10,
                    queries: Mapping[str, str] | None = None, show_progress: bool = False) -> Run:
        """The top-k run of query vectors `(Q, D)`; on a hybrid index fused with BM25 over `queries`' texts."""
        # numpy, faiss and (through retrieval.search) torch: only when a search runs
        from retromae.retrieval.bm25 import empty_results
        from retromae.retrieval.index import search
        from retromae.retrieval.search import results_to_run

        if vectors.shape[1] != self.index.d:
            raise ConfigError(f"--queries: {vectors.shape[1]}-dimensional query vectors for a {self.index.d}-"
                              "dimensional index")
        if self.lexical is not None and queries is None:
            raise ConfigError("--queries: a hybrid index needs the query texts for BM25; give a queries file, or "
                              "--dense-only")
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
    `lineage.check_model`) and, where its query prompt would be put by default, to have encoded them with its passage
    prompt (`check_prompts`)."""
    # torch and transformers: only when queries are encoded here (a BM25 or vector search loads no model)
    from retromae.models.encoder import Encoder
    from retromae.models.masked_lm import check_max_length

    where = folder / "index.json"
    model = options.model or query_tower(recorded.get("model"))
    if not model:
        raise ConfigError(f"--model: {where} records no model; name the one that encoded the corpus")
    check_model(model, recorded, where, given=options.model is not None)
    pooling = options.pooling or recorded.get("pooling")
    normalize = recorded.get("normalize") if options.normalize is None else options.normalize
    documents = recorded_inference(recorded, where)
    inference = options.backend or documents[0], options.quantize or documents[1]
    check_inference(inference, documents, "--backend: the queries would be", folder)
    try:
        encoder = Encoder.load(model, pooling=pooling, normalize=normalize, device=options.device,
                               dtype=options.dtype, backend=inference[0], quantize=inference[1], side="query")
    except RetroMAEError as error:
        if options.model:
            raise
        raise type(error)(f"{error} (the model path was recorded in {where}; --model overrides it)") from None
    check_max_length(encoder.model.config, options.max_length, "query_max_length", encoder.tokenizer)
    check_prompts(encoder.prompts, options.prefix, recorded, where, model)
    encoder.weights_fixed = True  # only queries, one call each: the weights cast and packed once serve them all
    return encoder
