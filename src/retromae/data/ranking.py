"""The one order of a ranking: score descending, ties broken by document id descending (code-point order).

It is the order trec_eval (and pytrec_eval, and so BEIR) ranks a run's documents in, so a metric computed here on a
run equals theirs on the run file written from it. Every place that cuts a ranking at k or writes one asks this
module: faiss and numpy top-k, BM25 (both through `retrieval.top_k`), fusion, the hits of `Searcher`, TREC run
files, the metrics, mining and `adapt`'s teacher lists. With one fixed rule a document's rank does not depend on how
many results were kept (`evaluate --metrics ndcg@10` equals the default run's NDCG@10) nor on a backend's order of
equal scores. Does not own producing scores (`retromae.retrieval`) nor reading or writing run files
(`data.retrieval_sets`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
Run = dict[str, dict[str, float]]  # query id → document id → score: a ranking per query, in no order until `ranked`


def ranked(scores: Mapping[Key, float], k: int | None = None,
           ids: Mapping[Key, str] | Sequence[str] | None = None) -> list[Key]:
    """The documents of `scores` (id → score) best first, ties by id descending, cut at `k` (all when None). Keys
    that are not the ids themselves (rows of an index) are ordered by their ids, `ids[key]`."""
    name = (lambda key: ids[key]) if ids is not None else (lambda key: key)
    return sorted(scores, key=lambda key: (scores[key], name(key)), reverse=True)[:k]


def cut_run(run: Mapping[str, Mapping[str, float]], k: int) -> dict[str, dict[str, float]]:
    """Each query's best `k` documents of `run`, by `ranked`'s order."""
    return {query_id: {doc_id: hits[doc_id] for doc_id in ranked(hits, k)} for query_id, hits in run.items()}
