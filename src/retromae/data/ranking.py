"""The one order of a ranking: score descending, ties broken by document id descending (code-point order).

It is the order trec_eval (and pytrec_eval, and so BEIR) ranks a run's documents in, so a metric computed here on a
run equals theirs on the run file written from it. Every place that cuts a ranking at k or writes one asks this
module: faiss and numpy top-k, BM25 (both through `retrieval.top_k`, on arrays: `ranked_rows`), fusion, the hits
of `Searcher`, TREC run files, the metrics, mining and `adapt`'s teacher lists. With one fixed rule a document's
rank does not depend on how many results were kept (`evaluate --metrics ndcg@10` equals the default run's NDCG@10)
nor on a backend's order of equal scores. Also owns which hit is the query itself (`is_the_query`), the one the
metrics and mining leave out. Does not own producing scores (`retromae.retrieval`) nor reading or writing run files
(`data.retrieval_sets`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

Key = TypeVar("Key", bound=Hashable)
Run = dict[str, dict[str, float]]  # query id → document id → score: a ranking per query, in no order until `ranked`


def ranked(scores: Mapping[Key, float], k: int | None = None,
           ids: Mapping[Key, str] | Sequence[str] | None = None) -> list[Key]:
    """The documents of `scores` (id → score) best first, ties by id descending, cut at `k` (all when None). Keys
    that are not the ids themselves (rows of an index) are ordered by their ids, `ids[key]`."""
    name = (lambda key: ids[key]) if ids is not None else (lambda key: key)
    return sorted(scores, key=lambda key: (scores[key], name(key)), reverse=True)[:k]


def ranked_rows(scores: np.ndarray, rows: np.ndarray, k: int,
                ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """`ranked` on a block of results, each query's `(scores, rows)` `(W, n)`, rows -1 where none: each query's
    first k `(W, min(k, n))` best first, ties by `ids[row]` descending, then in the given order (as `ranked`); the
    missing last. A query's rows must be distinct and its scores numbers (NaN is not ordered). Memory: a few (W, n)
    arrays; time: a sort of them and one of the ids of their distinct rows."""
    import numpy as np  # numpy: only where a backend's block is ranked (the CLI's light checks read this module)

    order = np.lexsort((-_id_places(rows, ids), -scores), axis=1)[:, :k]  # (W, k): scores, then ids, descending
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def _id_places(rows: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """Each of `rows`' `(W, n)` place among their distinct rows' ids in code-point order, equal ids at one place;
    -1 where no row."""
    import numpy as np  # numpy: only where a backend's block is ranked

    seen = np.zeros(len(ids) + 1, dtype=bool)  # (N + 1,): a row's flag, row -1's the last
    seen[rows] = True
    distinct = np.flatnonzero(seen[:-1])  # (U,)
    names = [ids[row] for row in distinct.tolist()]
    by_id = sorted(range(len(names)), key=names.__getitem__)
    steps = [names[before] != names[after] for before, after in zip(by_id, by_id[1:], strict=False)]
    places = np.full(len(ids) + 1, -1, dtype=np.int64)  # (N + 1,): a row's place, row -1's -1
    places[distinct[by_id]] = np.cumsum([0, *steps])
    return places[rows]


def cut_run(run: Mapping[str, Mapping[str, float]], k: int) -> dict[str, dict[str, float]]:
    """Each query's best `k` documents of `run`, by `ranked`'s order."""
    return {query_id: {doc_id: hits[doc_id] for doc_id in ranked(hits, k)} for query_id, hits in run.items()}


def is_the_query(query_id: str, doc_id: str, judged: Mapping[str, int] | None = None) -> bool:
    """Whether the hit `doc_id` of query `query_id` is the query itself, found in the corpus rather than answering it:
    its id is the query's (ArguAna, Quora and CQADupStack hold each query as a document under its own id), unless the
    query's judgments `judged` grade it relevant (a set where a query and its answer share an id, as debian's
    package descriptions do). BEIR's EvaluateRetrieval leaves out every hit under its query's id (ignore_identical_ids,
    its default), a relevant one too, which would score such a set 0; the metrics (`evaluation.metrics.scored_run`)
    and mining (`retrieval.mining.choose_negatives`) leave out these."""
    return doc_id == query_id and not (judged is not None and judged.get(doc_id, 0) > 0)
