"""How many hits a top-k search returns, and which ones when scores tie at the cut.

Owns `capped_top_k`, the one place where a requested top-k meets the size of a corpus. Every search asks it (dense
search over an index or vectors: `search`, `evaluate`, `adapt`'s validation, the probe; BM25: `bm25`, `evaluate
--bm25`, `mine --negatives bm25`; dense mining), so that `--top-k 3000000` over 150 documents allocates and ranks
what `--top-k 150` does (before: 5.4 GB and 76 s, arrays of 3,000,000 columns per query).

Owns `ranked_top_k`, the cut of a backend's top-k (faiss, the exact numpy index, bm25s) by `data.ranking`'s order
(score descending, ties by document id descending): a backend keeps an arbitrary few of the documents whose score
ties at the k-th place, so the backend is asked one place deeper, and a query whose tie reaches past that is asked
again, twice as deep each time, until the tie ends or every document was seen. The first n hits of a search are then
the same for every k ≥ n. Does not own searching (`retrieval.index`, `retrieval.bm25`) or the options' ranges
(`--top-k` must be positive: the commands' configs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from retromae.data.ranking import ranked
from retromae.runtime.options import require

# A backend's top-`depth` of the queries at `positions`: higher-is-better scores and rows, each (W, depth), best
# first, rows -1 (scores -inf) where it found fewer.
Backend = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def capped_top_k(k: int, documents: int) -> int:
    """`k` (positive) capped at `documents`, the number of documents searched: the hits a top-k search can give."""
    require(k > 0, "k", "must be positive")
    return min(k, documents)


def ranked_top_k(backend: Backend, queries: int, k: int, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The top-k `(scores, rows)` of `queries` queries, each `(Q, min(k, len(ids)))`, in `data.ranking`'s order
    (ties by `ids[row]`), from an exact `backend` (see `Backend`); rows -1 and scores -inf where fewer were found."""
    total = len(ids)
    k = capped_top_k(k, total)
    scores = np.full((queries, k), -np.inf, dtype=np.float32)  # (Q, k)
    rows = np.full((queries, k), -1, dtype=np.int64)  # (Q, k)
    pending, depth = np.arange(queries if k else 0), min(k + 1, total)
    while len(pending):
        found_scores, found_rows = backend(pending, depth)  # (W, depth) each
        done = _settled(found_scores, found_rows, k, depth == total)  # (W,)
        plain = done & _untied(found_scores, found_rows, k)  # (W,): the backend's first k are the rule's
        scores[pending[plain]], rows[pending[plain]] = found_scores[plain, :k], found_rows[plain, :k]
        for n in np.flatnonzero(done & ~plain):
            scores[pending[n]], rows[pending[n]] = _first(found_scores[n], found_rows[n], k, ids)
        pending, depth = pending[~done], min(2 * depth, total)
    return scores, rows


def _settled(scores: np.ndarray, rows: np.ndarray, k: int, everything: bool) -> np.ndarray:
    """Per query `(W,)`: whether its results hold every document tied with its k-th (all seen, fewer found than
    asked for, or the last found scoring below the k-th)."""
    if everything:
        return np.ones(len(scores), dtype=bool)
    return (rows[:, -1] < 0) | (scores[:, -1] < scores[:, k - 1])


def _untied(scores: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Per query `(W,)`: whether no two of its first k + 1 results tie (a missing result ties nothing)."""
    with np.errstate(invalid="ignore"):  # -inf - -inf between two missing results: NaN, and no tie
        falls = np.diff(scores[:, :k + 1], axis=1) < 0  # (W, k)
    return (falls | (rows[:, 1:k + 1] < 0)).all(axis=1)


def _first(scores: np.ndarray, rows: np.ndarray, k: int, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """One query's first k `(scores, rows)` of its results `(depth,)` by `data.ranking`'s order, padded with -inf
    and -1."""
    by_row = {row: score for row, score in zip(rows.tolist(), scores.tolist(), strict=True) if row >= 0}
    best = ranked(by_row, k, ids)
    return (np.pad(np.array([by_row[row] for row in best], dtype=np.float32), (0, k - len(best)),
                   constant_values=-np.inf),
            np.pad(np.array(best, dtype=np.int64), (0, k - len(best)), constant_values=-1))
