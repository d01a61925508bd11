"""Semantic textual similarity: correlation of embedding cosine similarity with gold scores.

Owns: scoring STS pairs: the cosine similarities of their embeddings against the gold scores, by every registered
correlation metric (Pearson and Spearman, as in the STS Benchmark literature; `evaluation.metric_registry`), and
refusing a correlation that is undefined (never a NaN in results): gold scores all equal or fewer than 2 pairs
(`check_gold`, a DataError naming the file, before any model is loaded), similarities all equal (NonFiniteError
naming the file: a collapsed model). Does not own: encoding sentences (the caller passes embeddings) or reading STS
files (see `retromae.data.retrieval_sets.load_sts_pairs`). No torch.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from retromae.evaluation.metric_registry import CORRELATION, metrics
from retromae.runtime.errors import DataError, NonFiniteError


def cosine_similarities(embeddings_1: np.ndarray, embeddings_2: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, D) arrays, shape (N,); a zero vector has similarity 0."""
    a = np.asarray(embeddings_1, dtype=np.float64)  # (N, D)
    b = np.asarray(embeddings_2, dtype=np.float64)  # (N, D)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"expected two (N, D) arrays of the same shape, got {a.shape} and {b.shape}")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)  # (N,)
    return np.einsum("nd,nd->n", a, b) / np.maximum(norms, np.finfo(np.float64).tiny)


def check_gold(gold: np.ndarray, source: str) -> None:
    """DataError naming `source` (the STS file) when no correlation with its gold scores `(N,)` is defined: fewer
    than 2 pairs, or every score the same (Pearson and Spearman divide by the scores' spread)."""
    if len(gold) < 2:
        raise DataError(f"{source}: {len(gold)} sentence pair; correlations need at least 2 sentence pairs")
    if np.ptp(gold) == 0:
        raise DataError(f"{source}: every gold score is {gold[0]:g}; a correlation with constant scores is undefined "
                        "(give sentence pairs of different scores)")


def sts_correlations(embeddings_1: np.ndarray, embeddings_2: np.ndarray, gold: np.ndarray,
                     source: str = "the STS pairs") -> dict[str, float]:
    """{"pearson", "spearman", ...}: every correlation metric of the pairs' cosine similarities with the gold scores,
    shape (N,); an undefined correlation is refused naming `source` (`check_gold`; NonFiniteError when every pair
    has the same similarity)."""
    similarities = cosine_similarities(embeddings_1, embeddings_2)  # (N,)
    gold = np.asarray(gold, dtype=np.float64).reshape(-1)  # (N,)
    if gold.shape != similarities.shape:
        raise ValueError(f"{len(gold)} gold scores for {len(similarities)} sentence pairs")
    check_gold(gold, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's (near-)constant input: refused below, not shown
        results = {metric.name: metric.compute(similarities, gold) for metric in metrics(CORRELATION)}
    if np.ptp(similarities) == 0 or not all(math.isfinite(value) for value in results.values()):
        raise NonFiniteError(f"{source}: the model gives all {len(gold)} sentence pairs (about) the same cosine "
                             f"similarity ({similarities[0]:.4g}); its correlation with the gold scores is undefined "
                             "(a collapsed model, or identical sentences)")
    return results
