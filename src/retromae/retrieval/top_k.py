"""How many hits a top-k search returns, and which ones when scores tie at the cut.

Owns `capped_top_k`, the one place where a requested top-k meets the size of a corpus. Every search asks it (dense
search over an index or vectors: `search`, `evaluate`, `adapt`'s validation, the probe; BM25: `bm25`, `evaluate
--bm25`, `mine --negatives bm25`; dense mining), so that `--top-k 3000000` over 150 documents allocates and ranks
what `--top-k 150` does (before: 5.4 GB and 76 s, arrays of 3,000,000 columns per query).

Owns `ranked_top_k`, the cut of a backend's top-k (faiss, the exact numpy index, bm25s) by `data.ranking`'s order
(score descending, ties by document id descending): a backend keeps an arbitrary few of the documents whose score
ties at the k-th place, so the backend is asked one place deeper, and a query whose tie reaches past that is asked
again, twice as deep each time, until the tie ends or every document was seen. The first n hits of a search are then
the same for every k ≥ n. The queries are asked in blocks of at most `PAIRS` (query, depth) pairs (one query when
its depth alone is more), and a block's ties are cut on arrays (`data.ranking.ranked_rows`), so memory stays within
the block's arrays and time within numpy's sorts of them, whatever the data: before, a tie over duplicate documents
deepened every query at once to (queries × tied documents) arrays, cut by a Python pass per query (`bm25 --top-k 1`
over 20,000 identical documents and 800 queries: 627 MB, 10.9 s; audit 7, section 1). Does not own searching
(`retrieval.index`, `retrieval.bm25`) or the options' ranges (`--top-k` must be positive: the commands' configs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from retromae.data.ranking import ranked, ranked_rows
from retromae.runtime.options import require

# A backend's top-`depth` of the queries at `positions`: higher-is-better scores and rows, each (W, depth), best
# first, rows -1 (scores -inf) where it found fewer.
Backend = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]

# The most (query, depth) pairs one call asks of a backend (12 bytes each in its answer): a tie at the cut deepens its
# queries' search up to the number of tied documents, so the pending queries are asked this many pairs at a time.
PAIRS = 1 << 20


def capped_top_k(k: int, documents: int) -> int:
    """`k` (positive) capped at `documents`, the number of documents searched: the hits a top-k search can give."""
    require(k > 0, "k", "must be positive")
    return min(k, documents)


def ranked_top_k(backend: Backend, queries: int, k: int, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The top-k `(scores, rows)` of `queries` queries, each `(Q, min(k, len(ids)))`, in `data.ranking`'s order
    (ties by `ids[row]`), from an exact `backend` (see `Backend`); rows -1 and scores -inf where fewer were found.
    The backend is asked for at most `PAIRS` (query, depth) pairs at once, or one query's depth."""
    total = len(ids)
    k = capped_top_k(k, total)
    scores = np.full((queries, k), -np.inf, dtype=np.float32)  # (Q, k)
    rows = np.full((queries, k), -1, dtype=np.int64)  # (Q, k)
    pending, depth = np.arange(queries if k else 0), min(k + 1, total)
    while len(pending):
        width = max(1, PAIRS // depth)  # queries per call
        done = np.concatenate([_cut(backend, pending[start:start + width], depth, k, ids, (scores, rows))
                               for start in range(0, len(pending), width)])  # (P,)
        pending, depth = pending[~done], min(2 * depth, total)
    return scores, rows


def _cut(backend: Backend, block: np.ndarray, depth: int, k: int, ids: Sequence[str],
         into: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Asks `backend` for the top-`depth` of the queries at `block` `(W,)` and writes the rule's first k of each
    whose results hold all its ties at the cut into `into` (scores, rows; `(Q, k)` each); returns which did `(W,)`."""
    scores, rows = into
    found_scores, found_rows = backend(block, depth)  # (W, depth) each
    done = _settled(found_scores, found_rows, k, depth == len(ids))  # (W,)
    plain = done & _untied(found_scores, found_rows, k)  # (W,): the backend's first k are the rule's
    scores[block[plain]], rows[block[plain]] = found_scores[plain, :k], found_rows[plain, :k]
    odd = _odd(found_scores, found_rows)  # (W,): the rule on arrays does not apply
    tied = done & ~plain & ~odd  # (W,)
    if tied.any():
        scores[block[tied]], rows[block[tied]] = ranked_rows(found_scores[tied], found_rows[tied], k, ids)
    for n in np.flatnonzero(done & ~plain & odd):
        scores[block[n]], rows[block[n]] = _first(found_scores[n], found_rows[n], k, ids)
    return done


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


def _odd(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per query `(W,)`: whether its results hold a NaN score or a row twice, which `_first` orders as it always
    did (a row's last score at its first place; NaN as Python's sort leaves it)."""
    ascending = np.sort(rows, axis=1)  # (W, depth)
    twice = ((np.diff(ascending, axis=1) == 0) & (ascending[:, 1:] >= 0)).any(axis=1)
    return twice | np.isnan(scores).any(axis=1)


def _first(scores: np.ndarray, rows: np.ndarray, k: int, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """One query's first k `(scores, rows)` of its results `(depth,)` by `data.ranking`'s order, padded with -inf
    and -1 (a query with a NaN score or a row twice: the others are cut by `ranked_rows`, on arrays)."""
    by_row = {row: score for row, score in zip(rows.tolist(), scores.tolist(), strict=True) if row >= 0}
    best = ranked(by_row, k, ids)
    return (np.pad(np.array([by_row[row] for row in best], dtype=np.float32), (0, k - len(best)),
                   constant_values=-np.inf),
            np.pad(np.array(best, dtype=np.int64), (0, k - len(best)), constant_values=-1))
