"""Semantic textual similarity: correlation of embedding cosine similarity with gold scores.

Owns: scoring STS pairs: the cosine similarities of their embeddings against the gold scores, by every registered
correlation metric (Pearson and Spearman, as in the STS Benchmark literature; `evaluation.metric_registry`). Does
not own: encoding sentences (the caller passes embeddings) or reading STS files
(see `retromae.data.retrieval_sets.load_sts_pairs`). No torch.
"""

from __future__ import annotations

import numpy as np

from retromae.evaluation.metric_registry import CORRELATION, metrics


def cosine_similarities(embeddings_1: np.ndarray, embeddings_2: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, D) arrays, shape (N,); a zero vector has similarity 0."""
    a = np.asarray(embeddings_1, dtype=np.float64)  # (N, D)
    b = np.asarray(embeddings_2, dtype=np.float64)  # (N, D)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"expected two (N, D) arrays of the same shape, got {a.shape} and {b.shape}")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)  # (N,)
    return np.einsum("nd,nd->n", a, b) / np.maximum(norms, np.finfo(np.float64).tiny)


def sts_correlations(embeddings_1: np.ndarray, embeddings_2: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """{"pearson", "spearman", ...}: every correlation metric of the pairs' cosine similarities with the gold scores,
    shape (N,)."""
    similarities = cosine_similarities(embeddings_1, embeddings_2)  # (N,)
    gold = np.asarray(gold, dtype=np.float64).reshape(-1)  # (N,)
    if gold.shape != similarities.shape:
        raise ValueError(f"{len(gold)} gold scores for {len(similarities)} sentence pairs")
    if len(gold) < 2:
        raise ValueError("correlations need at least 2 sentence pairs")
    return {metric.name: metric.compute(similarities, gold) for metric in metrics(CORRELATION)}
