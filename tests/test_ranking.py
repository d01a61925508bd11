"""One order for every ranking (issue 63, item 6): score descending, ties by document id descending (`data.ranking`).

Generated over the producers of rankings (exact numpy and faiss top-k under both metrics, BM25, both fusions, BM25
mining, a TREC run written and read back, the metrics) on data built to tie (repeated vectors and texts, ids in
another order than the rows): for every k, the first k of a producer are the first k of its full ranking, with the
same scores, and the full ranking is in the rule's order. A source scan keeps the rule in its one home: any other
ordering by score in the package fails it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from retromae.data.ranking import cut_run, ranked
from retromae.data.retrieval_sets import read_trec_run, write_trec_run
from retromae.data.training_groups import TrainingExample, TrainingSet
from retromae.evaluation.metrics import evaluate_run
from retromae.retrieval.bm25 import BM25
from retromae.retrieval.fusion import fuse
from retromae.retrieval.index import ExactIndex, build_index, search
from retromae.retrieval.mining import bm25_rankings
from retromae.retrieval.search import results_to_run

SRC = Path(__file__).resolve().parents[1] / "src" / "retromae"
ROWS = np.random.default_rng(5).permutation(32)
IDS = [f"d{row:02d}" for row in ROWS]  # row order is not id order: a backend's order of ties is not the rule's
VECTORS = np.repeat(np.random.default_rng(1).integers(0, 3, (8, 4)), 4, axis=0)[ROWS].astype(np.float32)  # 8 x 4
QUERIES = np.random.default_rng(2).integers(0, 3, (5, 4)).astype(np.float32)  # integers: exact, tied products
WORDS = ["apple pie", "apple tart", "pear pie", "plum", "apple apple pie", "pie crust pie"]
TEXTS = [WORDS[row % len(WORDS)] for row in ROWS]  # each text 5 or 6 times
TEXT_QUERIES = {"q0": "apple pie", "q1": "pie", "q2": "apple plum"}


def dense(factory: str, metric: str):
    def top(k: int):
        index = build_index(VECTORS, factory, metric) if factory == "Flat" else ExactIndex(4, metric)
        if factory != "Flat":
            index.add(VECTORS)
        scores, rows = search(index, QUERIES, k, ids=IDS)
        return results_to_run([f"q{n}" for n in range(len(QUERIES))], IDS, scores, rows)
    return top


def bm25(k: int):
    return BM25().index(IDS, TEXTS).search(TEXT_QUERIES, k)


def fused(method: str):
    def top(k: int):
        text_queries = {f"q{n}": text for n, text in enumerate(["apple pie", "pie", "apple plum", "plum", "tart"])}
        return fuse(dense("Flat", "ip")(100), BM25().index(IDS, TEXTS).search(text_queries, 100), method, k=k)
    return top


def mined(k: int):
    data = TrainingSet(TEXTS, IDS, [TrainingExample(text, [0]) for text in TEXT_QUERIES.values()])
    scores = bm25(32)  # the rankings hold rows: each shown with its BM25 score, in the mining's order
    return {query: {IDS[row]: scores[query][IDS[row]] for row in ranking}
            for query, ranking in zip(TEXT_QUERIES, bm25_rankings(data, k, show_progress=False), strict=True)}


def written(k: int, tmp_path: Path):
    write_trec_run(cut_run(dense("exact", "ip")(100), k), tmp_path / f"{k}.trec")
    return read_trec_run(tmp_path / f"{k}.trec")


PRODUCERS = {"numpy ip": dense("exact", "ip"), "numpy l2": dense("exact", "l2"), "faiss ip": dense("Flat", "ip"),
             "faiss l2": dense("Flat", "l2"), "bm25": bm25, "convex": fused("convex"), "rrf": fused("rrf"),
             "bm25 mining": mined, "trec run": written}


def hits(run: dict[str, dict[str, float]], in_order: bool = False) -> dict[str, list[tuple[str, float]]]:
    """Each query's (id, score) list, best first: in the order the producer gave (`in_order`) or by the rule."""
    return {query: [(doc, docs[doc]) for doc in (docs if in_order else ranked(docs))] for query, docs in run.items()}


@pytest.mark.parametrize("name", PRODUCERS)
def test_the_first_k_of_every_producer_are_the_first_k_of_its_full_ranking(name, tmp_path):
    produce = PRODUCERS[name]
    call = (lambda k: produce(k, tmp_path)) if name == "trec run" else produce
    full = call(32)
    assert any(len(set(docs.values())) < len(docs) for docs in full.values())  # the data do tie
    if name != "trec run":
        assert hits(full, in_order=True) == hits(full)  # produced in the rule's order
    for k in range(1, 33):
        assert {query: found[:k] for query, found in hits(full).items()} == hits(call(k)), k


def test_the_order_is_trec_evals_and_a_metric_does_not_depend_on_the_results_kept():
    assert ranked({"a": 1.0, "c": 1.0, "b": 2.0}) == ["b", "c", "a"]  # score, then id descending (trec_eval's)
    assert ranked({0: 1.0, 1: 1.0}, ids=["z", "a"]) == [0, 1]  # rows ordered by their ids
    run = dense("Flat", "ip")(32)
    qrels = {query: {doc: 1 for doc in list(docs)[3:9:2]} for query, docs in run.items()}
    for k in range(1, 33):
        assert evaluate_run(qrels, cut_run(run, k), [k]) == evaluate_run(qrels, run, [k])


# Orderings that rank no documents by score, each with its reason; any other sort by score is the rule's to do.
NOT_RANKINGS = {
    ("data/ranking.py", "ranked"): "the rule itself",
    ("data/ranking.py", "ranked_rows"): "the rule itself, on a block of a backend's results (top_k.ranked_top_k)",
    ("retrieval/index.py", "search"): "ExactIndex.search: a backend, cut by top_k.ranked_top_k like faiss",
    ("evaluation/metric_registry.py", "of"): "judged grades, best first, for the ideal DCG",
    ("adaptation/queries.py", "top_words"): "a document's words by tf-idf",
    ("training/optimizer.py", "build_optimizer"): "parameter groups",
    ("models/tokenizer_training.py", "_unigram"): "a vocabulary's pieces",
    ("reranking/run.py", "score"): "pairs by length, for batching",
    ("models/encoder.py", "longest_first"): "texts by length, for batching (Encoder.encode, encode_cached)",
    ("data/batch_sampler.py", "epoch_order"): "examples by length",
    ("objectives/tsdae.py", "delete_words"): "kept tokens first",
    ("models/masked_lm.py", "labelled_rows"): "labelled tokens first",
    ("data/retrieval_sets.py", "_lookalike"): "dropped ids: the look-alike a warning names is the same each run",
}


def orderings(path: Path) -> set[tuple[str, str]]:
    """(file, enclosing function) of each call that orders by value: argsort, argpartition, lexsort, topk, or sorted
    / sort in reverse or on a negated key."""
    found = set()
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and _orders(call):
                found.add((str(path.relative_to(SRC)), function.name))
    return found


def _orders(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name in ("argsort", "argpartition", "lexsort", "topk"):
        return True
    if name not in ("sorted", "sort"):
        return False
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    reverse = isinstance(keywords.get("reverse"), ast.Constant) and keywords["reverse"].value is True
    negated = any(isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                  for node in ast.walk(keywords.get("key", ast.Constant(None))))
    return reverse or negated


def test_no_module_orders_documents_by_score_but_the_rules_home():
    found = set().union(*(orderings(path) for path in sorted(SRC.rglob("*.py"))))
    assert not found - NOT_RANKINGS.keys(), ("order rankings with retromae.data.ranking (or list a non-ranking "
                                             f"here): {sorted(found - NOT_RANKINGS.keys())}")
    assert not NOT_RANKINGS.keys() - found, f"no longer there: {sorted(NOT_RANKINGS.keys() - found)}"
