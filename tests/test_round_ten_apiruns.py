"""Round ten: what the Searcher API searches, and cut-offs deeper than a given run (audit 10, sections C and E).

C: `Searcher.run_vectors` took its query ids and vectors unchecked (3 ids for 2 rows: IndexError; 2 ids for 3 rows:
the third dropped; a repeated id: one result; NaN or 1e38: empty results; int64 searched as floats), `Searcher.run`
kept 1 and "1" as two queries, and `Searcher.hits` raised KeyError for an unknown document and ranked a NaN score.
Each is now the method's own data, checked through `checked_arguments(checks=...)`, refused in one line naming the
argument; vectors whose products overflow float32 are refused wherever vectors are searched (`VECTOR_LIMIT`).
E: `evaluate --run` of a run shallower than --k-values asks printed recall@100 of a 10-deep run as if measured: the
rule of --top-k's refusal (`cut_offs_beyond`) now warns once for a given run (a run file cannot tell a cut from a
system that found no more), and says nothing where the run ranks the whole corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

import retromae
from retromae.cli import main
from retromae.evaluation.config import EvaluateConfig, cut_offs_beyond
from retromae.models.finite import VECTOR_LIMIT
from retromae.retrieval.index import ExactIndex
from retromae.retrieval.searcher import Fusion, QueryEncoding, Searcher
from retromae.retrieval.vector_files import read_vectors
from retromae.runtime.errors import ConfigError, RetroMAEError

DIM = 4
IDS = [f"d{n}" for n in range(6)]


def searcher(hybrid: bool = False) -> Searcher:
    """A Searcher over an exact index of six 4-dimensional documents (no model: vectors are searched); `hybrid`:
    with a stand-in lexical side, for the checks of the query texts it needs."""
    index = ExactIndex(DIM)
    index.add(np.random.default_rng(0).standard_normal((len(IDS), DIM)).astype(np.float32))
    return Searcher(Path("idx"), index, IDS, {}, object() if hybrid else None, None, Fusion(), QueryEncoding())


def rows(count: int, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(1).standard_normal((count, DIM)).astype(dtype)


def with_value(value: float, dtype: str = "float32") -> np.ndarray:
    vectors = rows(2, dtype)
    vectors[1, 2] = value
    return vectors


# (method, argument) → case → (the call's arguments, the start of the refusal)
REFUSED = {
    ("run_vectors", "query_ids"): {
        "one text": (("ab", rows(2)), "query_ids: expected a list of query ids"),
        "a number": (([1, 2], rows(2)), "query_ids (position 0): query id must be a string"),
        "repeated": ((["a", "a"], rows(2)), "query_ids (position 1): query id 'a' was given before"),
        "a space": ((["a", "a b"], rows(2)), "query_ids (position 1): query id 'a b' holds a space"),
        "empty": ((["a", ""], rows(2)), "query_ids (position 1): empty query id"),
        "a mapping": (({"a": 1}, rows(1)), "query_ids: expected a list of query ids"),
    },
    ("run_vectors", "vectors"): {
        "3 ids, 2 rows": ((["a", "b", "c"], rows(2)), "vectors: holds shape (2, 4), not (3, 4)"),
        "2 ids, 3 rows": ((["a", "b"], rows(3)), "vectors: holds shape (3, 4), not (2, 4)"),
        "one-dimensional": ((["a"], rows(1)[0]), "vectors: holds shape (4,), not (1, 4)"),
        "another width": ((["a"], np.zeros((1, 3), np.float32)), "vectors: holds shape (1, 3), not (1, 4)"),
        "int64": ((["a"], np.ones((1, DIM), np.int64)), "vectors: expected a numpy array of floating-point numbers"),
        "complex": ((["a"], np.ones((1, DIM), complex)), "vectors: expected a numpy array of floating-point"),
        "a list": ((["a"], rows(1).tolist()), "vectors: expected a numpy array of floating-point numbers, got a list"),
        "NaN": ((["a", "b"], with_value(np.nan)), "vectors: 1 of 2 vectors hold NaN or infinite values"),
        "infinity": ((["a", "b"], with_value(-np.inf)), "vectors: 1 of 2 vectors hold NaN or infinite values"),
        "1e38": ((["a", "b"], with_value(1e38)), "vectors: 1 of 2 vectors hold NaN or infinite values, or values of"),
        "float64 1e300": ((["a", "b"], with_value(1e300, "float64")), "vectors: 1 of 2 vectors hold NaN"),
    },
    ("run_vectors", "queries"): {
        "not a mapping": ((["a"], rows(1), 10, ["text"]), "queries: expected a mapping of query ids to texts"),
        "a number key": ((["a"], rows(1), 10, {1: "text"}), "queries (key 0): query id must be a string"),
    },
    ("run", "queries"): {
        "1 and '1'": (({1: "cell", "1": "tumor"},), "queries (key 0): query id must be a string, got a number 1"),
        "a key with a tab": (({"a\tb": "cell"},), "queries (key 0): query id 'a\\tb' holds a tab"),
        "an empty text": (({"a": " "},), "queries: must not be empty"),
    },
    ("hits", "scores"): {
        "an unknown document": (({"nope": 1.0},), "scores: document 'nope' is not in the index idx (of 6 documents)"),
        "a NaN score": (({"d1": float("nan"), "d2": 1.0},), "scores: the score of document 'd1' is nan, not a finite"),
        "an infinite score": (({"d1": float("inf")},), "scores: the score of document 'd1' is inf, not a finite"),
        "a text score": (({"d1": "1.0"},), "scores: the score of document 'd1' is '1.0', not a finite number"),
        "a boolean score": (({"d1": True},), "scores: the score of document 'd1' is True, not a finite number"),
        "not a mapping": ((["d1"],), "scores: expected a mapping of document ids to scores"),
    },
}
CASES = [(method, argument, case) for (method, argument), cases in REFUSED.items() for case in cases]


def test_every_data_argument_of_the_searcher_is_checked_and_tried_here():
    """Generated: each argument a Searcher method checks as its own data (`checks`) has refusals above."""
    checked = {(name, argument) for name in ("load", "search", "run", "run_vectors", "hits")
               for argument in getattr(getattr(Searcher, name), "checks", {})}
    assert checked == {("run_vectors", "query_ids"), ("run_vectors", "vectors"), ("run_vectors", "queries"),
                       ("hits", "scores")}
    assert checked <= set(REFUSED)


@pytest.mark.parametrize(("method", "argument", "case"), CASES, ids=[f"{m}-{a}-{c}" for m, a, c in CASES])
def test_a_searcher_refuses_what_it_cannot_search_in_one_line_naming_the_argument(method, argument, case):
    call, said = REFUSED[(method, argument)][case]
    with pytest.raises(RetroMAEError) as refused:
        getattr(searcher(), method)(*call)
    message = str(refused.value)
    assert message.startswith(said) and "\n" not in message and len(message) < 400, message


def test_a_hybrid_index_s_query_texts_cover_every_query_id():
    """Before: `queries` lacking an id was a KeyError from the BM25 side; no `queries` was refused in the body."""
    hybrid = searcher(hybrid=True)
    with pytest.raises(ConfigError, match="^queries: a hybrid index needs the query texts for BM25"):
        hybrid.run_vectors(["a"], rows(1))
    with pytest.raises(RetroMAEError, match="^queries: holds no text for query 'b', which a hybrid index needs"):
        hybrid.run_vectors(["a", "b"], rows(2), 3, {"a": "cell"})


def test_what_is_searched_is_what_was_checked():
    """Float64, float16, Fortran-ordered and strided vectors give float32's results; numpy text ids and a tuple are
    plain str ids; an empty query list an empty run; scores given as ints rank as floats."""
    search = searcher()
    vectors = rows(4)
    expected = search.run_vectors(["a", "b"], vectors[:2], 3)
    assert list(expected) == ["a", "b"] and all(len(found) == 3 for found in expected.values())
    assert search.run_vectors(("a", "b"), vectors[:2].astype(np.float64), 3) == expected
    assert search.run_vectors(np.array(["a", "b"]), np.asfortranarray(vectors[:2]), 3) == expected
    assert all(type(query) is str for query in search.run_vectors(np.array(["a", "b"]), vectors[:2], 3))
    strided = search.run_vectors(["a", "b"], vectors[::2], 3)
    assert list(strided["b"]) == list(search.run_vectors(["b"], vectors[2:3], 3)["b"])
    assert strided["b"] == pytest.approx(search.run_vectors(["b"], vectors[2:3], 3)["b"])
    assert list(search.run_vectors(["a"], vectors[:1].astype(np.float16), 3)["a"]) == list(expected["a"])
    assert search.run_vectors([], np.zeros((0, DIM), np.float32), 3) == {}
    hits = search.hits({"d1": 2, "d2": 3.5})
    assert [(hit.rank, hit.id, hit.score, type(hit.score)) for hit in hits] == [(1, "d2", 3.5, float),
                                                                               (2, "d1", 2.0, float)]


def test_vectors_whose_products_overflow_float32_are_refused_where_vectors_are_read(tmp_path):
    """The same bound holds for the vector files every command reads (`read_vectors`): 1e20 components' products
    overflow float32 (before: their documents vanished from results); just below the bound is read."""
    path = tmp_path / "embeddings.npy"
    vectors = rows(3)
    vectors[2, 0] = 1e20
    np.save(path, vectors)
    with pytest.raises(RetroMAEError, match=r"embeddings\.npy: 1 of 3 vectors hold NaN or infinite values, or values "
                                            r"of magnitude 2\*\*54 or more \(products overflow float32\)"):
        read_vectors(path, 3)
    vectors[2, 0] = np.nextafter(np.float32(VECTOR_LIMIT), np.float32(0))
    np.save(path, vectors)
    assert read_vectors(path, 3).shape == (3, DIM)
    products = np.float32(VECTOR_LIMIT) ** 2 * 2 ** 16 * 4  # the bound's reason: D * limit² with room for l2
    assert np.isfinite(products)


def test_the_cut_off_rule_is_one_for_top_k_and_a_given_run():
    assert cut_offs_beyond(10, [10, 100]) == [100]
    assert cut_offs_beyond(100, [10, 100]) == []
    assert cut_offs_beyond(10, [1, 10, 20, 100], documents=48) == [20, 100]
    assert cut_offs_beyond(48, [10, 100], documents=48) == []  # a whole corpus ranked: every cut-off measured
    config = EvaluateConfig(model="m", data=["d"], top_k=10)
    with pytest.raises(ConfigError, match=r"^--top-k 10 retrieves fewer documents than --k-values asks for \(@100\)"):
        config.check_top_k(config.k_values, "--k-values")


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("apiruns") / "beir"
    tiny_beir(folder)
    return folder


def write_run(path: Path, depth: int) -> Path:
    """A run of the 12 test queries, each with its document first and then `depth - 1` others."""
    lines = []
    for query in range(36, 48):
        others = [n for n in range(48) if n != query][:depth - 1]
        lines += [f"q{query} Q0 d{doc} {rank} {100 - rank} x\n"
                  for rank, doc in enumerate([query, *others], start=1)]
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize(("depth", "k_values", "warned"), [(10, [], "@100"), (5, ["10", "100"], "@10, @100"),
                                                           (10, ["1", "10"], None), (48, [], None)],
                         ids=["10-deep-default", "5-deep", "within", "whole-corpus"])
def test_evaluate_run_warns_once_of_cut_offs_deeper_than_the_run(beir, tmp_path, capsys, depth, k_values, warned):
    """`search --top-k 10` then `evaluate --run` at the default --k-values 10 100: the @100 metrics, equal to @10's,
    come with one warning naming the run, its depth and the cut-offs beyond; none within the depth or where the
    run ranks the whole corpus (48 documents). The figures are unchanged."""
    run = write_run(tmp_path / "run.trec", depth)
    output = tmp_path / "r.json"
    k_args = ["--k-values", *k_values] if k_values else []
    assert main(["evaluate", "--run", str(run), "--data", str(beir), *k_args, "--output", str(output)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if warned is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and err.startswith(f"retromae: warning: --run {run} holds at most {depth} "
                                                       f"documents a query, fewer than --k-values asks for ({warned})")
    assert json.loads(output.read_text())["ndcg@10"] == pytest.approx(1.0)


def test_the_api_evaluating_a_run_warns_as_the_command_does(beir, tmp_path, capsys):
    run = write_run(tmp_path / "run.trec", 10)
    results = retromae.evaluate(run=run, data=[beir])
    assert results["recall@100"] == results["recall@10"]
    assert "holds at most 10 documents a query, fewer than --k-values asks for (@100)" in capsys.readouterr().err
