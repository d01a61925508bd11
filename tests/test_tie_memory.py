"""A score tie at the k-th place costs what the search returns, not queries × tied documents (audit 7, section 1).

`retrieval.top_k.ranked_top_k` asks a backend deeper until the tie at the cut ends; over duplicate documents that is
every tied document. It asks at most `PAIRS` (query, depth) pairs at once (lowered here so that the data stay small),
and cuts the ties on arrays (`data.ranking.ranked_rows`). Over many identical documents and many queries (BM25, the
exact numpy index, a synthetic backend): the hits are the rule's (score descending, then id descending; a brute-force
reference over every document's score), the first n do not depend on k, no backend call asks for more than `PAIRS`
pairs, and the memory Python allocates stays far below queries × documents.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from retromae.data.ranking import ranked
from retromae.retrieval import top_k
from retromae.retrieval.bm25 import BM25
from retromae.retrieval.index import ExactIndex, search

PAIRS = 4096  # the budget of the tests: the data below ask 50 to 300 times more without it
DOCUMENTS = 2000
ROWS = np.random.default_rng(3).permutation(DOCUMENTS)
IDS = [f"d{row}" for row in ROWS]  # code-point order ("d10" < "d9") is neither the rows' nor the numbers' order
KINDS = ["apple pie", "apple pie", "apple pie", "apple tart", "pear pie", "plum"]  # most documents are one text
TEXTS = [KINDS[row % len(KINDS)] if row % 97 else f"apple pie crust {row}" for row in ROWS]
QUERIES = {f"q{n}": ["apple", "pie", "apple pie", "plum", "crust", "tart pie"][n % 6] for n in range(120)}


@pytest.fixture()
def budget(monkeypatch) -> list[int]:
    """`top_k.PAIRS` lowered to the tests' budget; returns the list to which each backend call appends its pairs."""
    monkeypatch.setattr(top_k, "PAIRS", PAIRS, raising=False)
    asked: list[int] = []
    ranked_top_k = top_k.ranked_top_k

    def counted(backend, queries, k, ids):
        def ask(positions, depth):
            asked.append(len(positions) * depth)
            return backend(positions, depth)
        return ranked_top_k(ask, queries, k, ids)

    for module in ("retromae.retrieval.bm25", "retromae.retrieval.index"):
        monkeypatch.setattr(f"{module}.ranked_top_k", counted)
    return asked


def reference(scores: np.ndarray, k: int, ids: list[str]) -> list[tuple[str, float]]:
    """The rule's first k of one query's scores over every document `(N,)`, those above 0 (a BM25 hit) or all."""
    hits = {ids[row]: float(score) for row, score in enumerate(scores.tolist())}
    return [(doc, hits[doc]) for doc in ranked(hits, k)]


@pytest.mark.parametrize("k", [1, 10, 75])
def test_bm25_over_duplicate_documents_is_the_rules_within_the_budget(budget, k):
    index = BM25().index(IDS, TEXTS, show_progress=False)
    found = index.search(QUERIES, k, show_progress=False)
    assert max(budget) <= PAIRS and len(budget) > 1  # asked in blocks
    past_the_cut = 0
    for query, text in QUERIES.items():
        scores = index.retriever.get_scores(index._tokens([text], False)[0]).astype(np.float32)  # (N,)
        expected = [(doc, score) for doc, score in reference(scores, k, IDS) if score > 0]
        assert list(found[query].items()) == expected, query
        past_the_cut += (scores == expected[-1][1]).sum() > [score for _, score in expected].count(expected[-1][1])
    assert past_the_cut > len(QUERIES) / 2  # the data do tie at the cut, past it


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_exact_dense_search_over_duplicate_vectors_is_the_rules_within_the_budget(budget, metric):
    vectors = np.random.default_rng(0).integers(-2, 3, (4, 8)).astype(np.float32)[ROWS % 4 * (ROWS % 5 > 0)]
    queries = np.random.default_rng(1).integers(-2, 3, (150, 8)).astype(np.float32)  # integers: exact ties
    index = ExactIndex(8, metric)
    index.add(vectors)
    every = index._scores(queries)  # (Q, N): higher is better
    full_scores, full_rows = search(index, queries, 40, ids=IDS)
    assert max(budget) <= PAIRS
    for k in (1, 7, 40):
        scores, rows = search(index, queries, k, ids=IDS)
        assert np.array_equal(rows, full_rows[:, :k]) and np.array_equal(scores, full_scores[:, :k])  # k-free
    for n in range(len(queries)):
        expected = reference(every[n], 40, IDS)
        assert [IDS[row] for row in full_rows[n]] == [doc for doc, _ in expected], n


def synthetic(queries: int, documents: int, seed: int = 0):
    """An exact backend over integer scores `(Q, N)` that tie a lot, giving equal scores in an arbitrary row order
    (not the ids'), with the scores; each call's (W, depth) answers are its only arrays."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, (queries, documents)).astype(np.float32)  # (Q, N)
    scores[rng.random((queries, documents)) < 0.1] = -np.inf  # not found: fewer than asked for
    shuffle = rng.permutation(documents)

    def backend(positions: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        found_scores = np.full((len(positions), depth), -np.inf, dtype=np.float32)
        found_rows = np.full((len(positions), depth), -1, dtype=np.int64)
        for place, query in enumerate(positions.tolist()):
            found = shuffle[np.isfinite(scores[query, shuffle])]
            best = found[np.argsort(-scores[query, found], kind="stable")][:depth]
            found_scores[place, :len(best)], found_rows[place, :len(best)] = scores[query, best], best
        return found_scores, found_rows

    return backend, scores


@pytest.mark.parametrize("pairs", [1, 37, 4096, 1 << 20])
def test_the_cut_is_the_rules_for_any_budget_and_any_k(monkeypatch, pairs):
    monkeypatch.setattr(top_k, "PAIRS", pairs, raising=False)
    backend, scores = synthetic(12, 90)
    ids = [f"{'dD'[row % 2]}{row * 7919 % 60}" for row in range(90)]  # some ids twice: the backend's order decides
    for k in (1, 2, 5, 30, 90, 200):
        found_scores, found_rows = top_k.ranked_top_k(backend, 12, k, ids)
        for n in range(12):
            given = backend(np.array([n]), 90)[1][0].tolist()  # (90,): the backend's order, -1 where none
            hits = {row: float(scores[n, row]) for row in given if row >= 0}  # in the backend's order
            best = ranked(hits, k, ids)  # equal scores and ids: in the order given (a stable sort)
            kept = found_rows[n][found_rows[n] >= 0].tolist()
            assert kept == best and found_scores[n][:len(kept)].tolist() == [hits[row] for row in best], (k, n)
            assert len(kept) == len(found_rows[n]) or (found_rows[n][len(kept):] == -1).all()


def test_memory_stays_within_the_budget_not_queries_times_tied_documents(monkeypatch):
    monkeypatch.setattr(top_k, "PAIRS", 4 * PAIRS, raising=False)  # 16,384 pairs: 5 queries a call at the end
    queries, documents = 300, 3000  # all tied: queries x documents x 12 bytes = 11 MB of answers at once before
    order = np.random.default_rng(2).permutation(documents)
    ids = [f"d{row}" for row in range(documents)]

    def backend(positions: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.ones((len(positions), depth), dtype=np.float32),
                np.broadcast_to(order[:depth], (len(positions), depth)).copy())

    tracemalloc.start()
    try:
        scores, rows = top_k.ranked_top_k(backend, queries, 3, ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    expected = sorted(range(documents), key=ids.__getitem__)[::-1][:3]
    assert (rows == expected).all() and (scores == 1).all()
    assert peak < 4_000_000, peak  # the budget's arrays and a few of one corpus size, not 300 x 3,000 pairs
