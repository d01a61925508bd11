"""Hybrid retrieval: fusing a dense run with a lexical (BM25) run into one run, per query.

Owns the two fusion rules the field deploys and their defaults:
- `convex`: each run's scores min-max normalised per query over its own list, then `w·dense + (1 − w)·lexical`; a
  document missing from one list gets 0 from that side (it scored at most that list's minimum). A list whose scores
  are all equal normalises to 1 for each of its documents.
- `rrf`: reciprocal rank fusion (Cormack et al. 2009), `Σ 1 / (k + rank)` over the lists that hold the document,
  rank counted from 1 in `data.ranking`'s order (ties by document id), `k` = 60 as in the paper.

Owns the fusion's depth: the candidates are the union of each side's best DEPTH documents (100, the depth `evaluate`
has always fused at), or of its best k when more than DEPTH hits are asked for (`candidate_depth`). The depth is a
property of the fusion, not of the number of hits shown: `search --top-k 10` returns the first 10 of `--top-k 100`,
with the same scores (before, each side contributed only its top k, and a convex score, normalised over k
documents, moved with k). Every caller that fuses (`Searcher`, `search`, `evaluate --hybrid`, `adapt`'s hybrid
teacher) searches each side `candidate_depth(k)` deep and lets `fuse` cut. Does not own producing either run
(`retrieval.search`, `retrieval.bm25`) nor choosing the default weight's evidence (docs/RESULTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from retromae.data.ranking import Run, ranked
from retromae.runtime.errors import RetroMAEError

METHODS = ("convex", "rrf")
DEFAULT_METHOD = "convex"
DEFAULT_WEIGHT = 0.7  # the dense side's share under `convex`: docs/RESULTS.md section 11 (SciFact, NPL, Debian)
RRF_K = 60
DEPTH = 100  # each side's candidates: its best DEPTH documents (its best k when k is larger)


def candidate_depth(k: int | None) -> int:
    """How many documents each side contributes to a fusion cut at `k` hits: DEPTH, or k when it is larger."""
    return max(DEPTH, k or 0)


def _normalised(hits: Mapping[str, float]) -> dict[str, float]:
    """Min-max normalised scores of one query's list: 0 for its lowest, 1 for its highest (1 for all when equal)."""
    if not hits:
        return {}
    low, high = min(hits.values()), max(hits.values())
    if high == low:
        return dict.fromkeys(hits, 1.0)
    return {doc_id: (score - low) / (high - low) for doc_id, score in hits.items()}


def _ranks(hits: Mapping[str, float]) -> dict[str, int]:
    """Rank of each document of one list (1 = best), in `data.ranking`'s order."""
    return {doc_id: rank for rank, doc_id in enumerate(ranked(hits), start=1)}


def _best(hits: Mapping[str, float], depth: int) -> dict[str, float]:
    """One side's best `depth` documents (`data.ranking`'s order)."""
    return {doc_id: hits[doc_id] for doc_id in ranked(hits, depth)}


def fuse_query(dense: Mapping[str, float], lexical: Mapping[str, float], method: str = DEFAULT_METHOD,
               weight: float = DEFAULT_WEIGHT, rrf_k: int = RRF_K, depth: int = DEPTH) -> dict[str, float]:
    """One query's fused scores over the union of its dense and lexical lists' best `depth` (doc id → score)."""
    dense, lexical = _best(dense, depth), _best(lexical, depth)
    if method == "convex":
        left, right = _normalised(dense), _normalised(lexical)
        return {doc_id: weight * left.get(doc_id, 0.0) + (1 - weight) * right.get(doc_id, 0.0)
                for doc_id in {**left, **right}}
    if method == "rrf":
        fused: dict[str, float] = {}
        for ranks in (_ranks(dense), _ranks(lexical)):
            for doc_id, rank in ranks.items():
                fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (rrf_k + rank)
        return fused
    raise RetroMAEError(f"fusion method {method!r}: expected one of {', '.join(METHODS)}")


def check_fusion(method: str, weight: float, rrf_k: int = RRF_K) -> None:
    """Refuse an unknown method, a weight outside [0, 1] (or not finite) and a non-positive RRF k."""
    if method not in METHODS:
        raise RetroMAEError(f"fusion method {method!r}: expected one of {', '.join(METHODS)}")
    if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
        raise RetroMAEError(f"hybrid weight {weight}: must lie in [0, 1] (the dense side's share)")
    if rrf_k <= 0:
        raise RetroMAEError(f"RRF k {rrf_k}: must be positive")


def fuse(dense: Run, lexical: Run, method: str = DEFAULT_METHOD, weight: float = DEFAULT_WEIGHT,
         k: int | None = None, rrf_k: int = RRF_K) -> Run:
    """The fused run of every query of either run, each side's best `candidate_depth(k)` documents fused and cut
    to the best `k` (all when None), in `data.ranking`'s order. Each side must hold that many documents (when the
    corpus has them): `Searcher` and `evaluate` search them that deep."""
    check_fusion(method, weight, rrf_k)
    depth = candidate_depth(k)
    fused: Run = {}
    for query_id in {**dense, **lexical}:
        scores = fuse_query(dense.get(query_id, {}), lexical.get(query_id, {}), method, weight, rrf_k, depth)
        fused[query_id] = {doc_id: scores[doc_id] for doc_id in ranked(scores, k)}
    return fused
