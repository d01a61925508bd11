"""How many hits a top-k search returns: never more than the documents it searches.

Owns `capped_top_k`, the one place where a requested top-k meets the size of a corpus. Every search asks it (dense
search over an index or vectors: `search`, `evaluate`, `adapt`'s validation, the probe; BM25: `bm25`, `evaluate
--bm25`, `mine --negatives bm25`; dense mining), so that `--top-k 3000000` over 150 documents allocates and ranks
what `--top-k 150` does (before: 5.4 GB and 76 s, arrays of 3,000,000 columns per query). Does not own searching
(`retrieval.index`, `retrieval.bm25`) or the options' ranges (`--top-k` must be positive: the commands' configs).
"""

from __future__ import annotations

from retromae.runtime.options import require


def capped_top_k(k: int, documents: int) -> int:
    """`k` (positive) capped at `documents`, the number of documents searched: the hits a top-k search can give."""
    require(k > 0, "k", "must be positive")
    return min(k, documents)
