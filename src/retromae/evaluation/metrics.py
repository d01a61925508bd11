"""Ranking metrics over plain dicts: qrels (qid → docid → grade) and runs (qid → docid → score).

Owns: ranking a run's documents and averaging every registered ranking metric (`evaluation.metric_registry`:
NDCG@k, MRR@k, Recall@k, MAP@k, P@k with trec_eval's definitions) over the queries, and refusing a metric value that
is not a finite number (never a NaN in results): every metric path (evaluate, the pre-training probe, adapt's guard
and validation, quickstart) computes through `evaluate_run`, which scores a query's ranking without the query itself
(`scored_run`, as BEIR does) unless asked to keep it. Ties in score are broken as
trec_eval does, by `data.ranking`'s one rule: the larger document id (in code-point order) ranks first.
Does not own the metrics' definitions (`evaluation.metric_registry`), models, torch, reading files (see
`retromae.data.retrieval_sets`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from retromae.data.ranking import Run, is_the_query, ranked
from retromae.data.retrieval_sets import MAX_GRADE, RetrievalSet
from retromae.evaluation.metric_registry import RANKING, JudgedRanking, metrics
from retromae.runtime.errors import DataError, NonFiniteError
from retromae.runtime.lines import quoted


def rank_documents(scores: dict[str, float], k: int | None = None) -> list[str]:
    """Document ids by score descending, ties by document id descending (trec_eval's order), cut at `k`."""
    return ranked(scores, k)


def query_metrics(judged: dict[str, int], ranking: list[str], k_values: Sequence[int]) -> dict[str, float]:
    """Every ranking metric at every k for one query, given its judgments and its ranked document ids."""
    query = JudgedRanking.of(judged, ranking)
    return {f"{metric.name}@{k}": metric.compute(query, k) for metric in metrics(RANKING) for k in k_values}


def evaluate_run(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    k_values: Sequence[int] = (10, 100),
    per_query: bool = False,
    source: str = "the qrels",
    keep_identical_ids: bool = False,
) -> dict[str, float] | tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean of every metric at every k over the queries of `qrels`; a query absent from `run` (or with no results)
    scores 0 and counts in the mean (BEIR's `EvaluateRetrieval` drops such queries: its means are then higher). A
    query's own document is left out of its ranking (`scored_run`), unless `keep_identical_ids`.

    Keys: `NAME@k` for every registered ranking metric, in registration order (`ndcg@k`, `mrr@k`, `recall@k`,
    `map@k`, `p@k`). With `per_query`, also returns qid → those keys. A value that is not finite is refused
    (`check_finite`, naming `source`: the query set) before anything is averaged or written.
    """
    k_values = sorted(set(k_values))
    if not k_values or any(not isinstance(k, int) or k < 1 for k in k_values):
        raise ValueError(f"k values must be positive integers, got {k_values}")
    if not qrels:
        raise ValueError("qrels hold no queries")
    check_judgments(qrels, run, source)
    run = scored_run(run, qrels, keep_identical_ids)
    scores = {
        qid: query_metrics(judged, rank_documents(run.get(qid, {}), max(k_values)), k_values)
        for qid, judged in qrels.items()
    }
    check_finite(scores, source)
    keys = next(iter(scores.values()))  # every query has the same keys, in the registry's order
    means = {key: math.fsum(query[key] for query in scores.values()) / len(scores) for key in keys}
    return (means, scores) if per_query else means


def scored_run(run: Run, qrels: dict[str, dict[str, int]], keep_identical_ids: bool = False) -> Run:
    """`run` as the metrics score it: each query's ranking without the query itself (`data.ranking.is_the_query`: a
    document under the query's id it is not judged relevant to), as BEIR's EvaluateRetrieval scores a run
    (ignore_identical_ids); `run` as it is with `keep_identical_ids`, each such hit then a hit not relevant."""
    if keep_identical_ids:
        return run
    return {qid: {doc_id: score for doc_id, score in hits.items() if not is_the_query(qid, doc_id, qrels.get(qid))}
            for qid, hits in run.items()}


def found_themselves(run: Run, qrels: dict[str, dict[str, int]]) -> set[str]:
    """The queries of `qrels` whose ranking in `run` holds the query itself (`scored_run` leaves it out)."""
    return {qid for qid in qrels if any(is_the_query(qid, doc_id, qrels[qid]) for doc_id in run.get(qid, {}))}


def retrieval_depth(k: int, data: RetrievalSet, keep_identical_ids: bool = False) -> int:
    """How many documents to retrieve per query of `data` for metrics at `k`: one more where some query is also a
    document under its own id, which `scored_run` leaves out, so that k remain (BEIR's searches fetch k + 1 alike);
    `k` where there is none or it is kept."""
    return k + (not keep_identical_ids and any(is_the_query(qid, qid, data.qrels[qid]) for qid in data.queries
                                               if qid in data.corpus))


def check_judgments(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], source: str) -> None:
    """DataError (a ValueError) naming `source` and the first query whose grade is not a whole number a C int holds
    (trec_eval's grades; the file readers apply the same bound, `data.retrieval_sets.MAX_GRADE`) or whose score is
    not a finite real number: a library caller's dicts are held to what a file's lines are."""
    for qid, judged in qrels.items():
        for docid, grade in judged.items():
            if isinstance(grade, bool) or not isinstance(grade, numbers.Integral) or abs(int(grade)) > MAX_GRADE:
                raise DataError(f"{source}: query {quoted(qid)} grades document {quoted(docid)} {quoted(repr(grade))}"
                                 f": a relevance grade is a whole number from {-MAX_GRADE} to {MAX_GRADE}")
    for qid, ranking in run.items():
        for docid, score in ranking.items():
            if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score):
                raise DataError(f"{source}: the run scores document {quoted(docid)} for query {quoted(qid)} "
                                 f"{quoted(repr(score))}: a score is a finite real number")


def check_finite(scores: dict[str, dict[str, float]], source: str) -> None:
    """NonFiniteError naming `source`, the metric and the first query whose value is NaN or infinite (grades near a
    float's limit sum to infinity, and NDCG's inf/inf is NaN)."""
    for qid, values in scores.items():
        for key, value in values.items():
            if not math.isfinite(value):
                raise NonFiniteError(f"{source}: {key} of query {quoted(qid)} is {value}, not a finite number: its "
                                     "relevance grades are too large for the metric's sums")


def empty_queries(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> int:
    """How many queries of `qrels` have no result in `run` (absent, or an empty list): each scores 0 in every
    metric, where BEIR's `EvaluateRetrieval` leaves them out of its means."""
    return sum(1 for qid in qrels if not run.get(qid))
