"""Dense search end to end (encode passages and queries, index, top-k) and turning hits into runs.

A run is `{query_id: {doc_id: score}}`, the shape `evaluation.metrics` and TREC run files use.
Owns `TextOptions` (prefix and max length of one side), `results_to_run`, `vector_search` and `dense_search`.
Does not own the model (`retromae.models.encoder`), the index (`retrieval.index`) or file formats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from retromae.data.ranking import Run
from retromae.models.encoder import Encoder
from retromae.retrieval.index import build_index, search


@dataclasses.dataclass
class TextOptions:
    """How one side (queries or passages) is encoded: a prefix such as "query: " and a max length."""

    prefix: str = ""
    max_length: int | None = None


def results_to_run(query_ids: Sequence[str], doc_ids: Sequence[str], scores: np.ndarray,
                   indices: np.ndarray) -> Run:
    """A run from top-k `scores` and row `indices` `(Q, k)`; rows of -1 (fewer than k hits) are dropped."""
    return {query_id: {doc_ids[row]: float(score) for row, score in zip(indices[n], scores[n], strict=True)
                       if row >= 0}
            for n, query_id in enumerate(query_ids)}


def encode_texts(encoder: Encoder, texts: Sequence[str], options: TextOptions, batch_size: int = 64,
                 show_progress: bool = True, description: str | None = None) -> np.ndarray:
    """Float32 `(N, D)` vectors of `texts` encoded with one side's options, under a bar named `description`."""
    return encoder.encode(texts, batch_size=batch_size, max_length=options.max_length, prefix=options.prefix,
                          show_progress=show_progress, description=description)


def dense_search(encoder: Encoder, corpus: Mapping[str, str], queries: Mapping[str, str], k: int = 100, *,
                 passages: TextOptions | None = None, questions: TextOptions | None = None,
                 batch_size: int = 64, factory: str = "Flat", params: str = "", shortlist: int | None = None,
                 show_progress: bool = True) -> Run:
    """Encode `corpus` and `queries` (id → text), index the passages and return the top-k run."""
    doc_ids, query_ids = list(corpus), list(queries)
    doc_vectors = encode_texts(encoder, [corpus[i] for i in doc_ids], passages or TextOptions(), batch_size,
                               show_progress, f"encoding corpus ({len(doc_ids):,} texts)")  # (N, D)
    query_vectors = encode_texts(encoder, [queries[i] for i in query_ids], questions or TextOptions(), batch_size,
                                 show_progress, f"encoding queries ({len(query_ids):,} texts)")  # (Q, D)
    return vector_search(doc_ids, doc_vectors, query_ids, query_vectors, k, factory=factory, params=params,
                         shortlist=shortlist)


def vector_search(doc_ids: Sequence[str], doc_vectors: np.ndarray, query_ids: Sequence[str],
                  query_vectors: np.ndarray, k: int = 100, *, factory: str = "Flat", params: str = "",
                  shortlist: int | None = None) -> Run:
    """Index passage vectors `(N, D)` (`factory`, `params`, a binary index's `shortlist`: `build_index`), search
    query vectors `(Q, D)` and return the top-k run."""
    index = build_index(doc_vectors, factory=factory, params=params, shortlist=shortlist)
    scores, indices = search(index, query_vectors, k, ids=doc_ids)  # (Q, k) each
    return results_to_run(query_ids, doc_ids, scores, indices)
