"""Hybrid fusion on hand-computed cases: convex (min-max per query) and RRF, ties, one-sided documents."""

import ast
import math
from pathlib import Path

import pytest

from retromae.retrieval.fusion import DEPTH, candidate_depth, fuse, fuse_query
from retromae.runtime.errors import RetroMAEError

SRC = Path(__file__).resolve().parents[1] / "src" / "retromae"
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


def test_the_depth_is_the_fusions_and_grows_to_k():
    assert candidate_depth(None) == candidate_depth(1) == candidate_depth(100) == DEPTH == 100
    assert candidate_depth(250) == 250
    deep = {"q": {f"d{n:03d}": float(n) for n in range(300)}}  # each side's best 100 are fused, not all 300
    assert set(fuse(deep, {}, "convex", weight=1.0, k=10)["q"]) == {f"d{n:03d}" for n in range(290, 300)}
    assert fuse(deep, {}, "convex", weight=1.0, k=10)["q"]["d299"] == 1.0
    assert fuse(deep, {}, "convex", weight=1.0, k=10)["q"]["d298"] == pytest.approx(98 / 99)  # normalised over 100


def test_every_module_that_fuses_searches_each_side_at_the_fusions_depth():
    """Generated over the package: a module calling `fuse` or `fuse_query` also asks `candidate_depth` how deep to
    search each side (before issue 61, `search` fused each side's top k, k the hits shown)."""
    fusing = [path for path in sorted(SRC.rglob("*.py")) if path.name != "fusion.py"
              and any(isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("fuse", "fuse_query")
                      for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))]
    assert len(fusing) >= 3  # the Searcher, evaluate, adapt's teacher
    assert [path.name for path in fusing if "candidate_depth(" not in path.read_text(encoding="utf-8")] == []


def test_adapts_hybrid_teacher_scores_at_the_fusions_depth_whatever_its_candidates():
    """`adapt --objective distill`: the teacher's score of a candidate is the one `search` gives it, the same for
    every --distill-candidates up to the depth (before, each side's top --distill-candidates were fused)."""
    from types import SimpleNamespace

    from retromae.adaptation.distill import teacher_scores

    dense = [{row: 1.0 - row / 300 for row in range(150)}]
    lexical = [{row: float((row * 7) % 150) for row in range(150)}]
    options = {count: SimpleNamespace(distill_candidates=count, teacher=None) for count in (5, 30, 100)}
    scored = {count: teacher_scores(config, ["q"], [], lexical, dense)[0] for count, config in options.items()}
    expected = fuse({"q": {str(r): s for r, s in dense[0].items()}},
                    {"q": {str(r): s for r, s in lexical[0].items()}})["q"]  # each side's best 100, all kept
    for count, scores in scored.items():
        assert count <= len(scores) <= 2 * count and all(scores[row] == expected[str(row)] for row in scores)
    assert set(scored[5]) <= set(scored[30]) <= set(scored[100])
