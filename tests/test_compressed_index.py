"""Compressed vector indexes (issue 60): int8 (faiss's scalar quantizer) and binary (sign bits searched by Hamming
distance, the shortlist rescored with the float vectors), declared once in `retrieval.faiss_options.COMPRESSED`.

Generated over the compressed types and the metrics: each finds the exact index's top hits on easy data; binary
rescoring orders its shortlist as the float vectors do; the index folder records the type (and a binary index its
shortlist and float rows, memory-mapped when read) and is searched, hybrid too, through `search` and `Searcher`;
`--shortlist` where no binary index is searched and `--params` on a binary one are refused, and an index.json whose
type or shortlist is not one this writes (or whose faiss file is of another type) is refused naming it; `evaluate`
searches over each type. (`--shortlist` and `--params` given where they do not act are also cases of the generated
`tests/test_option_conditions.py`.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_beir

import retromae
from retromae.cli import main
from retromae.retrieval.config import METRICS
from retromae.retrieval.faiss_options import BINARY, COMPRESSED, INDEX_TYPES, SHORTLIST
from retromae.retrieval.index import BinaryIndex, build_index, load_index, save_index, search, sign_bits
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError

pytest.importorskip("faiss")

CLUSTERS, MEMBERS, DIM = 24, 8, 64
CASES = [(kind, metric) for kind in COMPRESSED for metric in METRICS]


def cli(*args) -> int:
    return main([str(arg) for arg in args])


def easy_data() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Unit vectors in tight clusters (`MEMBERS` each) and a query very near each cluster's first member: a query's
    best hit is that member and its top `MEMBERS` its cluster, far from every other."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((CLUSTERS, DIM)).astype(np.float32)
    corpus = np.repeat(centres, MEMBERS, axis=0) + 0.15 * rng.standard_normal((CLUSTERS * MEMBERS, DIM))
    queries = corpus[::MEMBERS] + 0.01 * rng.standard_normal((CLUSTERS, DIM))
    unit = [(x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32) for x in (corpus, queries)]
    return unit[0], unit[1], [f"d{row:04d}" for row in range(len(corpus))]


@pytest.mark.parametrize(("kind", "metric"), CASES)
def test_a_compressed_index_finds_the_exact_top_hits_on_easy_data(kind, metric):
    corpus, queries, ids = easy_data()
    _, exact = search(build_index(corpus, "Flat", metric), queries, MEMBERS, ids=ids)
    scores, found = search(build_index(corpus, kind, metric), queries, MEMBERS, ids=ids)
    assert [set(row) for row in found] == [set(row) for row in exact]  # each query's cluster
    np.testing.assert_array_equal(found[:, 0], exact[:, 0])
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first, higher is better
    if kind == BINARY:  # rescored with the float vectors: the exact scores and order
        np.testing.assert_array_equal(found, exact)


@pytest.mark.parametrize("metric", METRICS)
def test_binary_rescoring_orders_the_shortlist_as_the_float_vectors_do(metric):
    rng = np.random.default_rng(3)
    corpus = rng.standard_normal((500, DIM)).astype(np.float32)
    queries = rng.standard_normal((6, DIM)).astype(np.float32)
    index = build_index(corpus, BINARY, metric, shortlist=1)  # the k asked for is the whole shortlist
    _, shortlists = index.binary.search(sign_bits(queries), 40)  # (Q, 40) by Hamming distance
    distances, rows = index.search(queries, 40)
    for query, shortlist, got, got_distances in zip(queries, shortlists, rows, distances, strict=True):
        floats = corpus[shortlist] @ query if metric == "ip" else -((corpus[shortlist] - query) ** 2).sum(1)
        assert set(got) == set(shortlist)
        np.testing.assert_array_equal(got, shortlist[np.argsort(-floats, kind="stable")])
        np.testing.assert_allclose(got_distances, np.sort(floats)[::-1] * (1 if metric == "ip" else -1), rtol=1e-5,
                                   atol=1e-5)


def test_a_larger_shortlist_rescores_more_rows():
    corpus, queries, ids = easy_data()
    narrow, wide = (build_index(corpus, BINARY, shortlist=n) for n in (1, 30))
    _, exact = search(build_index(corpus, "Flat"), queries, 20, ids=ids)
    overlap = [np.mean([len(set(e) & set(f)) for e, f in zip(exact, found, strict=True)])
               for found in (search(narrow, queries, 20, ids=ids)[1], search(wide, queries, 20, ids=ids)[1])]
    assert overlap[1] == 20 and overlap[0] <= overlap[1]


@pytest.fixture()
def encoded(tmp_path, tiny_model_dir):
    """The tiny BEIR set and an embeddings folder of its corpus (tiny model, normalised)."""
    tiny_beir(tmp_path / "beir")
    model = ["--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--no-progress"]
    assert cli("encode", *model, "--corpus", tmp_path / "beir" / "corpus.jsonl", "--output", tmp_path / "docs") == 0
    return tmp_path


@pytest.mark.parametrize("kind", ["Flat", *COMPRESSED])
def test_the_index_folder_records_its_type_and_is_searched_hybrid_too(encoded, kind):
    folder = encoded / kind
    assert cli("index", "--embeddings", encoded / "docs", "--output", folder, "--factory", kind, "--hybrid") == 0
    info = json.loads((folder / "index.json").read_text())
    assert info["type"] == ("factory" if kind == "Flat" else kind) and info["type"] in INDEX_TYPES
    assert (info.get("shortlist"), (folder / "vectors.npy").is_file()) == ((SHORTLIST, True) if kind == BINARY
                                                                            else (None, False))
    assert ("vectors.npy" in info["files"]) == (kind == BINARY)
    index, _, _ = load_index(folder)
    if kind == BINARY:
        assert isinstance(index, BinaryIndex) and isinstance(index.vectors, np.memmap)  # read by memory map
    queries = encoded / "beir" / "queries.jsonl"
    for sides in ([], ["--dense-only"]):
        run = encoded / f"{kind}{len(sides)}.trec"
        assert cli("search", "--index", folder, "--queries", queries, "--output", run, "--top-k", 5, *sides) == 0
        assert run.stat().st_size > 0
    searcher = retromae.Searcher.load(folder, **({"shortlist": 3} if kind == BINARY else {}))
    assert searcher.hybrid and len(searcher.search("a query", k=3)) == 3


def test_shortlist_and_params_are_refused_where_they_do_not_act(encoded, capsys):
    docs, queries = encoded / "docs", encoded / "beir" / "queries.jsonl"
    assert cli("index", "--embeddings", docs, "--output", encoded / "flat") == 0
    assert cli("index", "--embeddings", docs, "--output", encoded / "bin", "--factory", BINARY, "--shortlist", 4) == 0
    assert json.loads((encoded / "bin" / "index.json").read_text())["shortlist"] == 4
    capsys.readouterr()
    refused = {("search", "--index", encoded / "flat", "--shortlist", 5): "--shortlist: acts only on an index of "
                                                                          "--factory binary",
               ("search", "--index", encoded / "bin", "--params", "efSearch=16"): "--params: 'efSearch=16': no faiss",
               ("index", "--embeddings", docs, "--output", encoded / "x", "--shortlist", 5): "--shortlist: acts only",
               ("index", "--embeddings", docs, "--output", encoded / "x", "--factory", BINARY, "--params", "nprobe=2"):
                   "--params: acts only",
               ("index", "--embeddings", docs, "--output", encoded / "x", "--factory", BINARY, "--shortlist", 0):
                   "--shortlist: must lie in [1, 1000]"}
    for command, message in refused.items():
        searching = ("--queries", queries, "--output", encoded / "run.trec") if command[0] == "search" else ()
        assert cli(*command, *searching) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    with pytest.raises(ConfigError, match="^--shortlist: acts only on an index of --factory binary"):
        retromae.Searcher.load(encoded / "flat", shortlist=5)
    with pytest.raises(ConfigError, match="^--shortlist: acts only with --factory binary"):
        build_index(np.ones((4, 8), dtype=np.float32), "int8", shortlist=5)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("type", "pq", "type 'pq': not one of factory, int8, binary"),
    ("shortlist", 0, "shortlist 0: must lie in"), ("shortlist", 1.5, "shortlist 1.5: must lie in"),
    ("shortlist", True, "shortlist True: must lie in"), ("shortlist", None, "shortlist None: must lie in")])
def test_an_index_json_of_a_type_or_shortlist_not_ours_is_refused_naming_it(tmp_path, field, value, message):
    corpus, _, ids = easy_data()
    save_index(build_index(corpus, BINARY), tmp_path, ids, {"factory": BINARY})
    info = json.loads((tmp_path / "index.json").read_text())
    (tmp_path / "index.json").write_text(json.dumps({**info, field: value}))
    with pytest.raises(DataError, match=f"index.json: {message}"):
        load_index(tmp_path)


def test_binary_float_rows_that_are_not_float_rows_are_refused_naming_the_file(tmp_path):
    corpus, _, ids = easy_data()
    save_index(build_index(corpus, BINARY), tmp_path, ids, {"factory": BINARY})
    np.save(tmp_path / "vectors.npy", np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(DataError, match="vectors.npy: was replaced after the index was written"):
        load_index(tmp_path)


@pytest.mark.parametrize("recorded", [kind for kind in INDEX_TYPES if kind != BINARY])
def test_a_binary_index_recorded_as_another_type_is_refused_naming_the_file(tmp_path, recorded):
    corpus, _, ids = easy_data()
    save_index(build_index(corpus, BINARY), tmp_path, ids, {"factory": BINARY})
    info = json.loads((tmp_path / "index.json").read_text())
    (tmp_path / "index.json").write_text(json.dumps({**info, "type": recorded}))
    with pytest.raises(DataError, match="index.faiss: not a faiss index"):
        load_index(tmp_path)


@pytest.mark.parametrize("kind", COMPRESSED)
def test_evaluate_searches_over_a_compressed_index(encoded, tiny_model_dir, kind):
    """`evaluate --factory int8|binary`: on a corpus smaller than the binary shortlist the same figures as Flat; int8
    rounds each dimension to 256 levels, which may reorder the near-identical vectors of a random tiny model, so its
    figures are close to Flat's, not equal."""
    options = {"model": str(tiny_model_dir), "data": [str(encoded / "beir")], "pooling": "mean", "normalize": True,
               "k_values": [3]}
    flat = retromae.evaluate(**options)
    compressed = retromae.evaluate(**options, factory=kind, **({"shortlist": 50} if kind == BINARY else {}))
    if kind == BINARY:
        assert compressed == flat
    else:
        assert compressed.keys() == flat.keys() and all(abs(compressed[m] - flat[m]) <= 0.1 for m in flat)


# A factory's size weighed against the vectors before faiss allocates (audit 7, section 6): more lists or codewords
# than training vectors, an LSQ table past the free memory; faiss's errors from `add` and `train` as one line.
TOO_BIG_FOR_20 = {"IVF16777216,Flat": "IVF16777216 asks for 16777216 lists, but there are 20 vectors",
                  "IVF21,Flat": "give at most 20 lists, e.g. IVF4 ",
                  "IVF4(IVF64,Flat),Flat": "IVF64 asks for 64 lists",
                  "IMI2x5,Flat": "IMI2x5 asks for 32 centroids in each of its 2 parts",
                  "PQ4": "PQ4 has 256 codewords a codebook (8 bits), but there are 20 vectors",
                  "IVF4,PQ8x5": "PQ8x5 has 32 codewords",
                  "LSQ4x12": "LSQ4x12 has 4096 codewords", "IVF4,LSQ4x12": "LSQ4x12 has 4096 codewords",
                  "LSQ4x16": "LSQ4x16 has 65536 codewords", "RQ4x12": "RQ4x12 has 4096 codewords",
                  "PRQ2x2x6": "PRQ2x2x6 has 64 codewords", "PLSQ2x2x5": "PLSQ2x2x5 has 32 codewords",
                  "IDMap,Flat": "cannot add 20 vectors to this index: ",
                  "NSG64,Flat": "cannot add 20 vectors to this index: "}


@pytest.mark.parametrize(("factory", "message"), list(TOO_BIG_FOR_20.items()))
def test_a_factory_too_big_for_its_vectors_is_one_line_naming_factory(factory, message):
    vectors = np.random.default_rng(0).standard_normal((20, 16)).astype(np.float32)
    with pytest.raises(ConfigError, match=r"^--factory: ") as refused:
        build_index(vectors, factory)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_an_lsq_whose_table_passes_the_free_memory_is_refused_before_faiss(monkeypatch):
    from retromae.retrieval import faiss_options

    monkeypatch.setattr(faiss_options, "available_memory", lambda: (1 << 20) - 1)
    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    with pytest.raises(ConfigError, match=r"LSQ2x8 trains with a table of 2² x 256² numbers, 1,048,576 bytes, more "
                                          r"than the 1,048,575 bytes"):
        build_index(vectors, "LSQ2x8")


def test_the_index_command_refuses_a_factory_too_big_for_its_vectors_in_one_line(encoded, capsys):
    count = sum(1 for _ in open(encoded / "docs" / "ids.txt", encoding="utf-8"))
    for factory in (f"IVF{count + 1},Flat", "LSQ4x12", "IDMap,Flat", "NSG64,Flat"):
        capsys.readouterr()
        assert cli("index", "--embeddings", encoded / "docs", "--output", encoded / "x", "--factory", factory) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("retromae: error: --factory: ") and len(err.splitlines()) == 1, err
        assert not (encoded / "x" / "index.json").exists()
