"""A paired comparison of two systems on the same queries: is the difference in a metric larger than chance?

Owns: `paired_comparison` over two systems' per-query scores (the same queries, one value each): the per-query
differences (second − first), their mean, a seeded percentile bootstrap interval of that mean (queries resampled
with replacement), and the exact two-sided sign test (ties left out). Does not own computing the per-query scores
(`evaluation.metrics.evaluate_run(..., per_query=True)`) nor choosing which systems to compare (`evaluation.run`).
"""

from __future__ import annotations

import math

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 0
CHUNK = 500  # resamples drawn at once: bounded memory for large query sets


def sign_test(wins: int, losses: int) -> float:
    """The exact two-sided sign test's p-value: the probability, under a fair coin over the `wins + losses` queries
    that differ, of a split at least as uneven as the one seen (1.0 when none differ)."""
    trials = wins + losses
    if trials == 0:
        return 1.0
    tail = math.fsum(math.comb(trials, i) for i in range(min(wins, losses) + 1)) / 2**trials
    return min(1.0, 2 * tail)


def bootstrap_interval(differences: np.ndarray, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                       seed: int = SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of `differences` (Q,), seeded: the same inputs, the same
    interval."""
    rng = np.random.default_rng(seed)
    count = len(differences)
    means = []
    for start in range(0, resamples, CHUNK):
        picks = rng.integers(0, count, size=(min(CHUNK, resamples - start), count))  # (R, Q)
        means.append(differences[picks].mean(axis=1))
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.concatenate(means), [tail, 1 - tail])
    return float(low), float(high)


def paired_comparison(first: dict[str, float], second: dict[str, float], resamples: int = RESAMPLES,
                      confidence: float = CONFIDENCE, seed: int = SEED) -> dict[str, float | int]:
    """Compare two systems' per-query scores (query id → value, the same queries): the mean difference second −
    first, its bootstrap interval, wins/losses/ties of the second and the sign test's p-value."""
    if set(first) != set(second) or not first:
        raise ValueError("a paired comparison needs both systems' scores on the same, non-empty set of queries")
    queries = sorted(first)
    differences = np.array([second[q] - first[q] for q in queries], dtype=np.float64)  # (Q,)
    wins, losses = int((differences > 0).sum()), int((differences < 0).sum())
    low, high = bootstrap_interval(differences, resamples, confidence, seed)
    return {"queries": len(queries), "mean_difference": math.fsum(differences) / len(queries),
            "ci_low": low, "ci_high": high, "confidence": confidence, "resamples": resamples, "seed": seed,
            "wins": wins, "losses": losses, "ties": len(queries) - wins - losses,
            "sign_test_p": sign_test(wins, losses)}
