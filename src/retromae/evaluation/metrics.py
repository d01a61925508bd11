"""Ranking metrics over plain dicts: qrels (qid → docid → grade) and runs (qid → docid → score).

Owns: NDCG@k, MRR@k, Recall@k, MAP@k and P@k with the definitions of trec_eval (and so pytrec_eval and BEIR):
graded gains with a log2 discount and the ideal ranking taken from the qrels (`ndcg_cut_k`), a document is
relevant when its grade is > 0 (`recall_k`, `P_k`, `map_cut_k`), and MRR@k is the reciprocal rank of the first
relevant document in the top k (`recip_rank` on the run cut at k). Ties in score are broken as trec_eval does:
the larger document id (in code-point order) ranks first.
Does not own: models, torch, reading files (see `retromae.data.retrieval_sets`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

METRICS = ("ndcg", "mrr", "recall", "map", "precision")
KEY_PREFIX = {"ndcg": "ndcg", "mrr": "mrr", "recall": "recall", "map": "map", "precision": "p"}


def rank_documents(scores: dict[str, float], k: int | None = None) -> list[str]:
    """Document ids by score descending, ties by document id descending (trec_eval's order), cut at `k`."""
    return sorted(scores, key=lambda docid: (scores[docid], docid), reverse=True)[:k]


def _dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(position + 2) for position, gain in enumerate(gains))


def query_metrics(judged: dict[str, int], ranking: list[str], k_values: Sequence[int]) -> dict[str, float]:
    """Every metric at every k for one query, given its judgments and its ranked document ids."""
    relevant = sum(1 for grade in judged.values() if grade > 0)
    ideal = sorted((grade for grade in judged.values() if grade > 0), reverse=True)
    gains = [max(judged.get(docid, 0), 0) for docid in ranking]
    hit_ranks = [position + 1 for position, gain in enumerate(gains) if gain > 0]  # 1-based ranks of relevant docs
    result: dict[str, float] = {}
    for k in k_values:
        hits = [hit_rank for hit_rank in hit_ranks if hit_rank <= k]
        ideal_dcg = _dcg(ideal[:k])
        result[f"ndcg@{k}"] = _dcg(gains[:k]) / ideal_dcg if ideal_dcg > 0 else 0.0
        result[f"mrr@{k}"] = 1.0 / hits[0] if hits else 0.0
        result[f"recall@{k}"] = len(hits) / relevant if relevant else 0.0
        average_precision = sum((found + 1) / hit_rank for found, hit_rank in enumerate(hits))
        result[f"map@{k}"] = average_precision / relevant if relevant else 0.0
        result[f"p@{k}"] = len(hits) / k
    return result


def _ordered_keys(k_values: Sequence[int]) -> list[str]:
    return [f"{KEY_PREFIX[metric]}@{k}" for metric in METRICS for k in k_values]


def evaluate_run(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    k_values: Sequence[int] = (10, 100),
    per_query: bool = False,
) -> dict[str, float] | tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean of every metric at every k over the queries of `qrels`; a query absent from `run` scores 0.

    Keys: `ndcg@k`, `mrr@k`, `recall@k`, `map@k`, `p@k`. With `per_query`, also returns qid → those keys.
    """
    k_values = sorted(set(k_values))
    if not k_values or any(not isinstance(k, int) or k < 1 for k in k_values):
        raise ValueError(f"k values must be positive integers, got {k_values}")
    if not qrels:
        raise ValueError("qrels hold no queries")
    keys = _ordered_keys(k_values)
    scores = {
        qid: query_metrics(judged, rank_documents(run.get(qid, {}), max(k_values)), k_values)
        for qid, judged in qrels.items()
    }
    means = {key: math.fsum(query[key] for query in scores.values()) / len(scores) for key in keys}
    if per_query:
        return means, {qid: {key: query[key] for key in keys} for qid, query in scores.items()}
    return means
