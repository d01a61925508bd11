"""BM25 lexical retrieval with bm25s: the baseline of every retrieval table and the source of BM25 negatives.

Owns tokenisation for BM25 (lower-casing, English stopwords, optional Snowball stemming through PyStemmer, as
BEIR-style baselines do), building the index over a corpus and returning runs `{query_id: {doc_id: score}}`.
Does not own reading data files or evaluating runs.

bm25s is imported only when an index is built (`_bm25s`): it imports jax when jax is installed, and jax would
otherwise take most of a GPU's memory at import, for every process that merely loaded this module.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from retromae.config import NON_NEGATIVE, PROBABILITY, ConfigError, Options, option, require
from retromae.console import step, verbose
from retromae.retrieval.top_k import capped_top_k

VARIANTS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
STEMMERS = ("none", "english")


@dataclasses.dataclass
class BM25Params(Options):
    """BM25 scoring (k1, b, variant) and tokenisation (stopwords, stemmer) settings."""

    OPTION_GROUP = "BM25 scoring"
    k1: float = option(1.2, "BM25 term-frequency saturation", NON_NEGATIVE)
    b: float = option(0.75, "BM25 length normalisation", PROBABILITY)
    variant: str = option("lucene", "BM25 variant (bm25s)", choices=VARIANTS, aliases=("--method",))
    stopwords: str = option("en", "stopword list passed to bm25s (en, or none)")
    stemmer: str = option("none", "stemmer: none, or english (Snowball, needs PyStemmer)", choices=STEMMERS)


def _stemmer(name: str) -> Any:
    """A PyStemmer stemmer (bm25s calls its `stemWords`), or None for no stemming."""
    if name == "none":
        return None
    try:
        # PyStemmer, optional: only for --stemmer english
        import Stemmer
    except ImportError as error:
        raise ConfigError("--stemmer: english stemming needs PyStemmer (pip install PyStemmer)") from error
    return Stemmer.Stemmer(name)


def _bm25s() -> ModuleType:
    """bm25s, imported with jax (if installed) kept on the CPU unless the user chose jax's platform themselves."""
    if "JAX_PLATFORMS" not in os.environ and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"
    # bm25s imports jax when installed: only after its platform is set
    import bm25s

    return bm25s


class BM25:
    """A bm25s index over a corpus; `search` returns the top-k documents of each query with positive scores."""

    def __init__(self, params: BM25Params | None = None) -> None:
        self.params = params or BM25Params()
        self.stem = _stemmer(self.params.stemmer)
        self.ids: list[str] = []
        self.searchable = False
        self.retriever = _bm25s().BM25(k1=self.params.k1, b=self.params.b, method=self.params.variant)

    def _tokens(self, texts: Sequence[str], show_progress: bool | None) -> list[list[str]]:
        stopwords = self.params.stopwords if self.params.stopwords != "none" else None
        return _bm25s().tokenize(list(texts), stopwords=stopwords, stemmer=self.stem, return_ids=False,
                              show_progress=_bars(show_progress))

    def index(self, ids: Sequence[str], texts: Sequence[str], show_progress: bool | None = None) -> BM25:
        """Index `texts` under `ids`; returns self. bm25s's bars show when `show_progress` (default: --verbose)."""
        require(len(ids) == len(texts) and len(ids) > 0, "corpus", "needs one text per id and at least one text")
        self.ids = list(ids)
        tokens = self._tokens(texts, show_progress)
        self.searchable = any(tokens)  # bm25s cannot index a corpus without a term (empty or stopwords only)
        if self.searchable:
            self.retriever.index(tokens, show_progress=_bars(show_progress))
        return self

    def search(self, queries: Mapping[str, str], k: int = 100, show_progress: bool | None = None,
               threads: int = 0) -> dict[str, dict[str, float]]:
        """Run `{query_id: {doc_id: score}}` of the top-k documents that share a term with each query."""
        k = capped_top_k(k, len(self.ids))
        query_ids = list(queries)
        if not self.searchable:  # no document has a term a query could share
            return {query_id: {} for query_id in query_ids}
        tokens = self._tokens([queries[query_id] for query_id in query_ids], show_progress)
        rows, scores = self.retriever.retrieve(tokens, k=k, show_progress=_bars(show_progress),
                                               n_threads=threads)  # (Q, k) each
        return {query_id: _hits(self.ids, rows[n], scores[n]) for n, query_id in enumerate(query_ids)}


def _bars(show_progress: bool | None) -> bool:
    """bm25s draws several anonymous bars per call: off inside a quiet command unless asked for."""
    return verbose() if show_progress is None else show_progress


def _hits(ids: list[str], rows: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    return {ids[row]: float(score) for row, score in zip(rows, scores, strict=True) if score > 0}


def bm25_search(corpus: Mapping[str, str], queries: Mapping[str, str], k: int = 100,
                params: BM25Params | None = None, show_progress: bool = True) -> dict[str, dict[str, float]]:
    """BM25 run of `queries` over `corpus` (both id → text), announced by one status line."""
    with step(f"BM25 over {len(corpus):,} documents for {len(queries):,} queries", show_progress):
        engine = BM25(params).index(list(corpus), list(corpus.values()))
        return engine.search(queries, k)
