"""An approximate index's recall against exact search on a user's queries, and its knob set for a target
(`retrieval.recall`, `retromae index --recall-queries --target-recall`).

The figures are checked against what they must be: an IVF-Flat index searching every list is exact (recall 1), one
list of many finds less; a knob chosen for a target is the lowest rung that reaches it on the choosing half and is
left set on the index and stored with it; a target beyond a product quantizer's codes is refused, naming the
recall reached; documents equal to the k-th best count as found whichever of them the index returns.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

from retromae.cli import main
from retromae.retrieval.index import build_index
from retromae.retrieval.recall import LEAST_TUNING_QUERIES, _ladder, _set, measure_recall, tune
from retromae.runtime.errors import DataError

faiss = pytest.importorskip("faiss")


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """2,000 unit vectors in 40 clusters of 16 dimensions, 200 queries near them, and the rows' ids."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(40, 16))
    vectors = centres[rng.integers(0, 40, 2000)] + 0.6 * rng.normal(size=(2000, 16))
    queries = centres[rng.integers(0, 40, 200)] + 0.9 * rng.normal(size=(200, 16))
    unit = [(rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32) for rows in (vectors, queries)]
    return unit[0], unit[1], [f"d{row}" for row in range(2000)]


def test_an_ivf_flat_index_searching_every_list_has_recall_one_and_one_list_less(clustered):
    vectors, queries, ids = clustered
    index = build_index(vectors, "IVF32,Flat", params="nprobe=32")
    assert measure_recall(index, vectors, ids, "ip", queries, "IVF32,Flat").value == 1.0
    index = build_index(vectors, "IVF32,Flat", params="nprobe=1")
    recall = measure_recall(index, vectors, ids, "ip", queries, "IVF32,Flat")
    assert 0 < recall.value < 0.95 and recall.setting == "nprobe=1" and recall.queries == 200


@pytest.mark.parametrize("factory, knob", [("IVF32,Flat", "nprobe"), ("HNSW8", "efSearch"), ("binary", "shortlist")])
def test_the_knob_chosen_is_the_lowest_rung_reaching_the_target_and_stays_set(clustered, factory, knob):
    vectors, queries, ids = clustered
    index = build_index(vectors, factory)
    setting, recall = tune(index, vectors, ids, "ip", queries, factory, 0.97)
    value = int(setting.removeprefix(f"{knob}="))
    chosen_on, count = recall.chosen_on
    assert chosen_on >= 0.97 and count == recall.queries == 100
    again = measure_recall(index, vectors, ids, "ip", queries[1::2], factory)
    assert again.setting == setting and again.value == recall.value  # left set: the held-out figure is the index's
    rungs = list(_ladder(index, knob))
    assert rungs.index(value) > 0  # (the data make the target need more than the cheapest rung)
    _set(index, knob, rungs[rungs.index(value) - 1])  # the rung below falls short on the choosing queries
    assert measure_recall(index, vectors, ids, "ip", queries[0::2], factory).value < 0.97


def test_the_figure_carries_its_interval_and_a_target_above_it_is_said(clustered):
    vectors, queries, ids = clustered
    exact = measure_recall(build_index(vectors, "IVF32,Flat", params="nprobe=32"), vectors, ids, "ip", queries,
                           "IVF32,Flat")
    assert exact.interval == (1.0, 1.0)  # every query finds all ten: no spread
    cheap = measure_recall(build_index(vectors, "IVF32,Flat", params="nprobe=1"), vectors, ids, "ip", queries,
                           "IVF32,Flat")
    per_query_spread = cheap.interval[1] - cheap.interval[0]
    assert cheap.interval[0] < cheap.value < cheap.interval[1] and 0 < per_query_spread < 0.2
    short = dataclasses.replace(cheap, chosen_on=(0.99, 100), target=0.99)
    assert "below the target 0.99 beyond its noise" in short.line()  # its interval lies under the target
    met = dataclasses.replace(exact, chosen_on=(1.0, 100), target=0.99)
    assert "below the target" not in met.line()


def test_a_target_beyond_the_codes_is_refused_naming_the_recall_reached(clustered):
    vectors, queries, ids = clustered
    index = build_index(vectors, "IVF8,PQ2x4")
    with pytest.raises(DataError, match=r"--target-recall 0.99: this IVF8,PQ2x4 index reaches recall@10 0\.\d+ at its "
                                        r"most thorough setting \(nprobe=8\)"):
        tune(index, vectors, ids, "ip", queries, "IVF8,PQ2x4", 0.99)


def test_a_target_needs_enough_queries_to_hold_half_out(clustered):
    vectors, queries, ids = clustered
    index = build_index(vectors, "HNSW8")
    with pytest.raises(DataError, match=f"19 queries; --target-recall needs at least {LEAST_TUNING_QUERIES}"):
        tune(index, vectors, ids, "ip", queries[:19], "HNSW8", 0.9)


def test_no_queries_is_refused_not_a_nan(clustered):
    vectors, queries, ids = clustered
    with pytest.raises(DataError, match="--recall-queries: the folder holds no query vectors"):
        measure_recall(build_index(vectors, "HNSW8"), vectors, ids, "ip", queries[:0], "HNSW8")


def test_a_document_equal_to_the_kth_best_counts_whichever_copy_is_returned():
    """Every document twice: the index may return either copy of a tie at the k-th place, and is exact either way."""
    rng = np.random.default_rng(0)
    once = rng.normal(size=(300, 8)).astype(np.float32)
    vectors = np.concatenate([once, once])
    ids = [f"d{row}" for row in range(600)]
    for factory, params in (("IVF4,Flat", "nprobe=4"), ("HNSW8", "efSearch=600")):
        index = build_index(vectors, factory, params=params)
        assert measure_recall(index, vectors, ids, "ip", once[:50], factory).value == 1.0
    index = build_index(vectors, "IVF4,Flat", metric="l2", params="nprobe=4")
    assert measure_recall(index, vectors, ids, "l2", once[:50], "IVF4,Flat").value == 1.0


def test_ladders_end_at_the_most_thorough_setting(clustered):
    vectors, _, _ = clustered
    assert list(_ladder(build_index(vectors, "IVF32,Flat"), "nprobe")) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert list(_ladder(build_index(vectors, "IVF1,Flat"), "nprobe")) == [1]
    rungs = list(_ladder(build_index(vectors, "HNSW8"), "efSearch"))
    assert rungs[:3] == [16, 24, 32] and rungs[-1] == 4096
    assert list(_ladder(build_index(vectors, "binary"), "shortlist"))[-2:] == [768, 1000]


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, tiny_model_dir) -> Path:
    """A tiny BEIR folder's corpus and queries encoded by the tiny model."""
    base = tmp_path_factory.mktemp("recall")
    tiny_beir(base / "beir")
    for side, name in (("--corpus", "corpus"), ("--queries", "queries")):
        assert main(["encode", "--model", str(tiny_model_dir), side, str(base / "beir" / f"{name}.jsonl"),
                     "--output", str(base / name), "--no-progress"]) == 0
    return base


def test_index_measures_chooses_stores_and_search_uses_the_setting(encoded, tmp_path, capsys):
    output = tmp_path / "index"
    assert main(["index", "--embeddings", str(encoded / "corpus"), "--output", str(output), "--factory", "IVF4,Flat",
                 "--recall-queries", str(encoded / "queries"), "--target-recall", "0.9"]) == 0
    said = capsys.readouterr().out
    info = json.loads((output / "index.json").read_text())
    recall = info["recall"]
    assert info["params"] == recall["setting"] and recall["setting"].startswith("nprobe=")
    assert recall["chosen_on"]["value"] >= 0.9 and recall["queries"] == recall["chosen_on"]["queries"] == 24
    low, high = recall["interval"]
    assert low <= recall["value"] <= high
    printed = re.search(r"recall@10 against exact search: ([\d.]+) \(95% interval ([\d.]+)-([\d.]+)\) with "
                        rf"{re.escape(recall['setting'])} on 24 queries held out", said)
    assert printed, said
    for shown, stored in zip(map(float, printed.groups()), (recall["value"], low, high), strict=True):
        assert abs(shown - stored) <= 0.0005 + 1e-9  # stored to 4 decimals, printed to 3 (two roundings of one value)
    from retromae.retrieval.searcher import Searcher

    searcher = Searcher.load(output, texts=False)  # as `retromae search` loads it: the stored setting applied
    assert faiss.extract_index_ivf(searcher.index).nprobe == int(recall["setting"].split("=")[1])


def test_index_without_queries_says_how_to_measure_an_approximate_index(encoded, tmp_path, capsys):
    assert main(["index", "--embeddings", str(encoded / "corpus"), "--output", str(tmp_path / "hnsw"),
                 "--factory", "HNSW8"]) == 0
    assert "HNSW8 searches approximately: --recall-queries FOLDER" in capsys.readouterr().out
    assert json.loads((tmp_path / "hnsw" / "index.json").read_text())["recall"] is None
    assert main(["index", "--embeddings", str(encoded / "corpus"), "--output", str(tmp_path / "flat")]) == 0
    assert "approximately" not in capsys.readouterr().out


@pytest.mark.parametrize("extra, said", [
    (["--factory", "IVF4,Flat", "--params", "nprobe=2"], "sets nprobe itself; give --params nprobe=... or "
                                                         "--target-recall, not both"),
    (["--factory", "binary", "--shortlist", "5"], "sets shortlist itself; give --shortlist or --target-recall, "
                                                  "not both"),
])
def test_a_target_with_the_knob_given_too_is_refused(encoded, tmp_path, capsys, extra, said):
    code = main(["index", "--embeddings", str(encoded / "corpus"), "--output", str(tmp_path / "out"), *extra,
                 "--recall-queries", str(encoded / "queries"), "--target-recall", "0.9"])
    err = capsys.readouterr().err
    assert code == 2 and f"--target-recall: {said}" in err, err
    assert not (tmp_path / "out" / "index.json").exists()


def test_query_vectors_of_another_model_are_refused_naming_the_option(encoded, tmp_path, capsys):
    other = tmp_path / "queries"
    shutil.copytree(encoded / "queries", other)
    record = json.loads((other / "encode.json").read_text())
    record.update(pooling="cls" if record.get("pooling") != "cls" else "mean")
    (other / "encode.json").write_text(json.dumps(record))
    code = main(["index", "--embeddings", str(encoded / "corpus"), "--output", str(tmp_path / "out"),
                 "--factory", "HNSW8", "--recall-queries", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and f"--recall-queries: {other} was encoded otherwise than the documents of" in err, err
