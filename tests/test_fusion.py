"""Hybrid fusion on hand-computed cases: convex (min-max per query) and RRF, ties, one-sided documents."""

import math

import pytest

from retromae.retrieval.fusion import fuse, fuse_query
from retromae.runtime.errors import RetroMAEError

DENSE = {"q": {"a": 0.9, "b": 0.5, "c": 0.1}}  # normalised: a 1, b 0.5, c 0
LEXICAL = {"q": {"b": 12.0, "d": 4.0}}  # normalised: b 1, d 0


def test_convex_fusion_normalises_each_list_and_gives_zero_to_a_missing_side():
    fused = fuse(DENSE, LEXICAL, "convex", weight=0.7)["q"]
    assert fused == pytest.approx({"a": 0.7, "b": 0.7 * 0.5 + 0.3 * 1.0, "c": 0.0, "d": 0.0})
    assert list(fused) == ["a", "b", "d", "c"]  # a (0.7) before b (0.65); c and d tie at 0: by id, descending


def test_rrf_sums_reciprocal_ranks_over_the_lists_holding_the_document():
    fused = fuse(DENSE, LEXICAL, "rrf", rrf_k=60)["q"]
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62})
    assert list(fused) == ["b", "a", "d", "c"]


def test_ties_within_a_list_are_ranked_by_document_id_and_equal_scores_normalise_to_one():
    assert fuse_query({"x": 2.0, "y": 2.0}, {}, "rrf") == pytest.approx({"y": 1 / 61, "x": 1 / 62})  # trec_eval's
    assert fuse_query({"y": 2.0, "x": 2.0}, {}, "convex", weight=0.5) == {"x": 0.5, "y": 0.5}


def test_a_query_in_one_run_only_and_a_cut_to_k():
    fused = fuse({"q": {"a": 1.0, "b": 0.0}}, {"r": {"z": 3.0}}, "convex", weight=1.0, k=1)
    assert fused == {"q": {"a": 1.0}, "r": {"z": 0.0}}


@pytest.mark.parametrize("method, weight", [("mean", 0.5), ("convex", 1.5), ("convex", -0.1), ("convex", math.nan)])
def test_a_wrong_method_or_weight_is_refused(method, weight):
    with pytest.raises(RetroMAEError):
        fuse(DENSE, LEXICAL, method, weight)
