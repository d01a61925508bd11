"""STS correlations of cosine similarity, checked against scipy on explicit cosines."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from retromae.evaluation.sts import cosine_similarities, sts_correlations


def test_correlations_match_scipy_on_explicit_cosines():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40, 8)), rng.normal(size=(40, 8))
    gold = rng.uniform(0, 5, size=40)
    cosines = np.array([x @ y / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b, strict=True)])
    result = sts_correlations(a, b, gold)
    assert result["pearson"] == pytest.approx(stats.pearsonr(cosines, gold)[0], abs=1e-12)
    assert result["spearman"] == pytest.approx(stats.spearmanr(cosines, gold)[0], abs=1e-12)
    assert set(result) == {"pearson", "spearman"} and all(isinstance(v, float) for v in result.values())


def test_scale_invariant_float32_input_and_perfect_ranking():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(20, 4)), rng.normal(size=(20, 4))
    gold = cosine_similarities(a, b) * 2.5 + 2.5  # gold is a monotone function of the cosine
    result = sts_correlations((a * 7).astype(np.float32), (b * 0.1).astype(np.float32), gold)
    assert result["pearson"] == pytest.approx(1.0, abs=1e-6)
    assert result["spearman"] == pytest.approx(1.0)


def test_zero_vector_has_cosine_zero_and_shapes_are_checked():
    assert cosine_similarities(np.zeros((1, 3)), np.ones((1, 3))).tolist() == [0.0]
    with pytest.raises(ValueError, match="same shape"):
        sts_correlations(np.ones((3, 2)), np.ones((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="2 gold scores for 3 sentence pairs"):
        sts_correlations(np.eye(3), np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match="at least 2"):
        sts_correlations(np.ones((1, 2)), np.ones((1, 2)), np.ones(1))
