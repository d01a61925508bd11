"""Hybrid indexes and search by text: the lexical side saved and loaded with its ids, fused search end to end on a
tiny model, `search --query` and `retromae.Searcher`, recorded paths used from another folder, and readers that
refuse files of another generation (issues 49, 54 and 50)."""

import json
import os
import shutil

import numpy as np
import pytest
from conftest import make_sentences, tiny_beir

import retromae
from retromae.cli import main
from retromae.data.ranking import ranked
from retromae.data.retrieval_sets import load_queries, read_trec_run
from retromae.retrieval.bm25 import BM25, BM25Params
from retromae.retrieval.fusion import fuse
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import LOCK_FILE, hold, release

DOCS = make_sentences(12, seed=3)


def cli(*args) -> int:
    return main([str(arg) for arg in args])


@pytest.fixture()
def beir(tmp_path):
    tiny_beir(tmp_path / "beir")
    return tmp_path / "beir"


@pytest.fixture()
def hybrid_index(tmp_path, beir, tiny_model_dir):
    """An embeddings folder of the tiny BEIR corpus and a hybrid index of it (Flat, with BM25)."""
    model = ["--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--no-progress"]
    assert cli("encode", *model, "--corpus", beir / "corpus.jsonl", "--output", tmp_path / "docs") == 0
    assert cli("index", "--embeddings", tmp_path / "docs", "--output", tmp_path / "index", "--hybrid") == 0
    return tmp_path / "index"


@pytest.mark.parametrize("variant", ["lucene", "bm25+"])
def test_lexical_index_saved_and_loaded_with_its_ids(tmp_path, variant):
    ids = [f"d{i}" for i in range(len(DOCS))]
    engine = BM25(BM25Params(variant=variant)).index(ids, DOCS, show_progress=False)
    queries = {"q0": " ".join(DOCS[0].split()[:3]), "q1": " ".join(DOCS[7].split()[-4:-1]), "none": "zzz"}
    expected = engine.search(queries, 5, show_progress=False)
    engine.save(tmp_path / "bm25")
    loaded = BM25.load(tmp_path / "bm25", ids)
    assert loaded.ids == ids and loaded.params == engine.params
    assert loaded.search(queries, 5, show_progress=False) == expected
    assert expected["none"] == {} and "d0" in expected["q0"]
    with pytest.raises(DataError, match="other ids"):
        BM25.load(tmp_path / "bm25", ids[::-1])


def test_lexical_files_are_checked_and_never_unpickled(tmp_path):
    ids = [f"d{i}" for i in range(len(DOCS))]
    BM25().index(ids, DOCS, show_progress=False).save(tmp_path / "bm25")
    data = np.load(tmp_path / "bm25" / "data.npy")
    np.save(tmp_path / "bm25" / "data.npy", np.where(np.arange(len(data)) == 1, np.nan, data).astype(np.float32))
    with pytest.raises(DataError, match="data.npy: holds negative, NaN or infinite"):
        BM25.load(tmp_path / "bm25", ids)
    np.save(tmp_path / "bm25" / "data.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match="data.npy: not a numpy array file"):
        BM25.load(tmp_path / "bm25", ids)
    params = json.loads((tmp_path / "bm25" / "params.json").read_text())
    (tmp_path / "bm25" / "params.json").write_text(json.dumps(params).replace('"k1": 1.2', '"k1": NaN'))
    with pytest.raises(DataError, match="params.json: the number NaN is not finite"):
        BM25.load(tmp_path / "bm25", ids)


def test_hybrid_search_fuses_both_sides(tmp_path, beir, hybrid_index):
    info = json.loads((hybrid_index / "index.json").read_text())
    assert info["lexical"] == "bm25" and "bm25/params.json" in info["files"] and len(info["generation"]) == 32
    queries = beir / "queries.jsonl"
    assert cli("search", "--index", hybrid_index, "--queries", queries, "--output", tmp_path / "fused.trec",
               "--top-k", 5) == 0
    assert cli("search", "--index", hybrid_index, "--queries", queries, "--output", tmp_path / "dense.trec",
               "--top-k", 100, "--dense-only") == 0  # each side's candidates: the fusion's depth, not the 5 shown
    assert cli("search", "--index", hybrid_index, "--queries", queries, "--output", tmp_path / "rrf.trec",
               "--top-k", 5, "--fusion", "rrf") == 0
    texts = load_queries(queries)
    corpus = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    lexical = BM25().index([d["_id"] for d in corpus], [d["text"] for d in corpus], show_progress=False)
    bm25_run = lexical.search(texts, 100, show_progress=False)
    dense = read_trec_run(tmp_path / "dense.trec")
    for name, method in (("fused", "convex"), ("rrf", "rrf")):
        expected = fuse(dense, bm25_run, method, k=5)
        got = read_trec_run(tmp_path / f"{name}.trec")
        assert {q: set(d) for q, d in got.items()} == {q: set(d) for q, d in expected.items()}  # run files round
        assert all(got[q][d] == pytest.approx(expected[q][d], abs=1e-4) for q in got for d in got[q])


def test_search_by_text_prints_documents_and_searcher_returns_hits(tmp_path, beir, hybrid_index, capsys):
    document = json.loads((beir / "corpus.jsonl").read_text().splitlines()[40])
    capsys.readouterr()
    assert cli("search", "--index", hybrid_index, "--query", document["text"], "--query", "model", "--top-k", 3) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"query: {document['text']}") and "hybrid" in out[0]
    rank, _, doc_id, *start = out[1].split()
    assert (rank, doc_id) == ("1", "d40") and " ".join(start)[:20] == document["text"][:20]
    searcher = retromae.Searcher.load(hybrid_index)
    hits = searcher.search(document["text"], k=3)
    assert searcher.hybrid and [hit.rank for hit in hits] == [1, 2, 3]
    assert hits[0].id == "d40" and hits[0].text == document["text"] and hits[0].score >= hits[1].score
    assert [[hit.id for hit in found] for found in searcher.search([document["text"]] * 2, k=3)] == \
        [[hit.id for hit in hits]] * 2


def test_hybrid_refused_on_a_dense_only_index(tmp_path, beir, tiny_model_dir, capsys):
    model = ["--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--no-progress"]
    assert cli("encode", *model, "--corpus", beir / "corpus.jsonl", "--output", tmp_path / "docs") == 0
    assert cli("index", "--embeddings", tmp_path / "docs", "--output", tmp_path / "dense") == 0
    for option in (["--hybrid"], ["--fusion", "rrf"], ["--hybrid-weight", "0.5"]):
        assert cli("search", "--index", tmp_path / "dense", "--query", "model", *option) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'dense'} has no lexical (BM25) side" in err and "`retromae index --hybrid" in err
    assert cli("index", "--embeddings", tmp_path / "docs", "--output", tmp_path / "x", "--k1", "2") == 2
    assert "--k1: acts only with --hybrid" in capsys.readouterr().err


def test_an_index_works_from_another_folder_and_names_its_records(tmp_path, beir, tiny_model_dir, monkeypatch,
                                                                   capsys):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(tiny_model_dir, work / "model")
    (work / "corpus.jsonl").write_bytes((beir / "corpus.jsonl").read_bytes())
    monkeypatch.chdir(work)
    assert cli("encode", "--model", "model", "--pooling", "mean", "--no-progress", "--corpus", "corpus.jsonl",
               "--output", "docs") == 0
    assert cli("index", "--embeddings", "docs", "--output", "idx", "--hybrid") == 0
    info = json.loads((work / "idx" / "index.json").read_text())
    assert os.path.isabs(info["encoder"]["model"]) and info["corpus"]["path"] == str((work / "corpus.jsonl").resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli("search", "--index", work / "idx", "--query", "model", "--top-k", 2) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    (work / "corpus.jsonl").rename(work / "moved.jsonl")  # the texts are gone: ids and scores still shown
    assert cli("search", "--index", work / "idx", "--query", "model", "--top-k", 2) == 0
    captured = capsys.readouterr()
    assert "the corpus recorded in" in captured.err and "index.json" in captured.err and "--corpus" in captured.err
    assert len(captured.out.splitlines()) == 4
    shutil.rmtree(work / "model")  # the recorded model is gone: the error names index.json and --model
    assert cli("search", "--index", work / "idx", "--query", "model") == 2
    err = capsys.readouterr().err
    assert str(work / "idx" / "index.json") in err and "--model" in err


def test_search_refuses_files_of_another_generation(tmp_path, beir, tiny_model_dir, hybrid_index, capsys):
    """An index folder whose ids.txt was replaced by another encoding's (as `encode --output IDX --overwrite` did
    before it refused to write over another command's outputs): search refuses it."""
    queries = beir / "queries.jsonl"
    assert cli("encode", "--model", tiny_model_dir, "--pooling", "mean", "--no-progress", "--queries", queries,
               "--output", tmp_path / "q") == 0
    shutil.copyfile(tmp_path / "q" / "ids.txt", hybrid_index / "ids.txt")
    assert cli("search", "--index", hybrid_index, "--query", "model") == 2
    err = capsys.readouterr().err
    assert "ids.txt: was replaced after the index was written" in err and "generation" in err


def test_query_vectors_must_come_from_the_index_encoder(tmp_path, beir, tiny_model_dir, hybrid_index, capsys):
    queries = beir / "queries.jsonl"
    same = ["--model", tiny_model_dir, "--pooling", "mean", "--normalize", "--no-progress", "--queries", queries]
    assert cli("encode", *same, "--output", tmp_path / "q") == 0
    assert cli("search", "--index", hybrid_index, "--queries", tmp_path / "q", "--output", tmp_path / "r.trec") == 0
    assert len(read_trec_run(tmp_path / "r.trec")) == 48
    other = ["--model", tiny_model_dir, "--pooling", "cls", "--no-progress", "--queries", queries]
    assert cli("encode", *other, "--output", tmp_path / "cls") == 0
    assert cli("search", "--index", hybrid_index, "--queries", tmp_path / "cls", "--output", tmp_path / "s.trec") == 2
    assert "was encoded otherwise than the documents" in capsys.readouterr().err


def test_search_refused_while_the_index_is_written(hybrid_index):
    assert hold(hybrid_index, hybrid_index / LOCK_FILE) is None  # as `retromae index` holds it while writing
    try:
        import subprocess
        import sys

        code = f"import retromae; retromae.Searcher.load({str(hybrid_index)!r})"
        ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert ran.returncode != 0 and "being written by another retromae process" in ran.stderr
    finally:
        release()
    with pytest.raises(ConfigError, match="--hybrid-weight: applies to --fusion convex"):
        retromae.Searcher.load(hybrid_index, fusion="rrf", hybrid_weight=0.5)


def test_resumed_encode_checks_every_shard(tmp_path, beir, tiny_model_dir, capsys):
    args = ["encode", "--model", tiny_model_dir, "--pooling", "mean", "--no-progress", "--corpus",
            beir / "corpus.jsonl", "--output", tmp_path / "docs", "--shard-size", 10]
    assert cli(*args) == 0
    width = json.loads((tmp_path / "docs" / "encode.json").read_text())["dim"]
    manifest = json.loads((tmp_path / "docs" / "retromae-run.json").read_text())
    assert manifest["command"] == "encode"
    for name in ("embeddings.npy", "encode.json"):
        (tmp_path / "docs" / name).unlink()
    shards = tmp_path / "docs" / "shards"
    shards.mkdir()
    from retromae.retrieval.lineage import texts_fingerprint  # the manifest a killed run leaves
    info = json.loads(json.dumps(manifest["identity"]))
    corpus = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    assert info["fingerprint"] == texts_fingerprint([d["_id"] for d in corpus], [d["text"] for d in corpus])
    (shards / "manifest.json").write_text(json.dumps({k: v for k, v in info.items() if k != "model content"}))
    for bad, words in ((np.zeros((10, width), dtype=np.int64), "holds int64"),
                       (np.full((10, width), np.nan, dtype=np.float32), "NaN"),
                       (np.zeros((10, width + 1), dtype=np.float32), "not float32 of shape")):
        np.save(shards / "shard-00001.npy", bad)
        assert cli(*args) == 2
        err = capsys.readouterr().err
        assert "shard-00001.npy" in err and words in err


def test_bm25_counts_queries_without_results(tmp_path, beir, capsys):
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q36", "text": "turnips"}) + "\n")
    assert cli("bm25", "--data", beir, "--output", tmp_path / "bm25.trec") == 0
    err = capsys.readouterr().err
    assert "BM25: 1 of 1 queries got no results" in err and "'q36'" in err


SHOWN = (1, 3, 10)  # the n: the first n hits of a search for n equal the first n of a search for 100


def _hits_of(run: dict[str, float]) -> list[tuple[str, float]]:
    return [(doc_id, run[doc_id]) for doc_id in ranked(run)]


def _by_cli_run_file(index, queries, tmp_path, fusion, k):
    output = tmp_path / f"{fusion}-{k}.trec"
    assert cli("search", "--index", index, "--queries", queries, "--output", output, "--top-k", k,
               "--fusion", fusion) == 0
    return {query_id: _hits_of(run) for query_id, run in read_trec_run(output).items()}


def _by_cli_query_vectors(index, queries, tmp_path, fusion, k):
    vectors = tmp_path / "query-vectors"
    if not vectors.is_dir():
        info = json.loads((index / "index.json").read_text())["encoder"]
        assert cli("encode", "--model", info["model"], "--pooling", info["pooling"], "--normalize", "--no-progress",
                   "--queries", queries, "--output", vectors) == 0
    output = tmp_path / f"vectors-{fusion}-{k}.trec"
    assert cli("search", "--index", index, "--queries", vectors, "--output", output, "--top-k", k,
               "--fusion", fusion) == 0
    return {query_id: _hits_of(run) for query_id, run in read_trec_run(output).items()}


def _by_cli_query(index, queries, tmp_path, fusion, k):
    texts = load_queries(queries)
    hits = retromae.search(index=index, query=list(texts.values()), top_k=k, fusion=fusion)
    return {query_id: [(hit.id, hit.score) for hit in found] for query_id, found in zip(texts, hits, strict=True)}


def _by_searcher(index, queries, tmp_path, fusion, k):
    texts = load_queries(queries)
    found = retromae.Searcher.load(index, fusion=fusion).search(list(texts.values()), k=k)
    return {query_id: [(hit.id, hit.score) for hit in hits] for query_id, hits in zip(texts, found, strict=True)}


@pytest.mark.parametrize("fusion", ["convex", "rrf"])
@pytest.mark.parametrize("way", [_by_cli_run_file, _by_cli_query_vectors, _by_cli_query, _by_searcher],
                         ids=lambda way: way.__name__[4:])
def test_the_first_hits_of_a_hybrid_search_do_not_depend_on_how_many_are_asked_for(tmp_path, beir, hybrid_index,
                                                                                      fusion, way):
    """Issue 61: `search` fused each side's top k, k the hits shown, so the hybrid at --top-k 10 was not the first
    10 of the hybrid at 100 (nor evaluate's). Now each side contributes the fusion's depth whatever k is."""
    queries = beir / "queries.jsonl"
    deep = way(hybrid_index, queries, tmp_path, fusion, 100)
    for k in SHOWN:
        shown = way(hybrid_index, queries, tmp_path, fusion, k)
        assert shown.keys() == deep.keys()
        assert all(shown[query_id] == deep[query_id][:k] for query_id in deep)  # same ids, order and scores


def test_evaluate_fuses_at_the_depth_search_fuses_at_whatever_its_metrics(tmp_path, beir, tiny_model_dir):
    """`evaluate --metrics ndcg@10 --hybrid` retrieved and fused only each side's top 10 before."""
    options = {"model": str(tiny_model_dir), "name": ["tiny"], "data": [beir], "hybrid": True, "pooling": "mean",
               "normalize": True}
    default = retromae.evaluate(**options)["sets"]["beir"]["tiny+BM25"]
    shallow = retromae.evaluate(**options, metrics=["ndcg@10", "mrr@10"])["sets"]["beir"]["tiny+BM25"]
    assert shallow["ndcg@10"] == default["ndcg@10"] and shallow["mrr@10"] == default["mrr@10"]


def _other_texts(beir, tmp_path):
    """The corpus with the same ids and one document's text changed."""
    lines = (beir / "corpus.jsonl").read_text().splitlines()
    record = json.loads(lines[5])
    lines[5] = json.dumps({**record, "text": record["text"] + " changed"})
    (tmp_path / "other.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "other.jsonl"


# Every way a corpus is named beside vectors that record the texts they encoded (issue 63, item 4).
DERIVED = {
    "index --hybrid --corpus": lambda docs, index, other, out: cli(
        "index", "--embeddings", docs, "--output", out, "--hybrid", "--corpus", other),
    "retromae.index(corpus=)": lambda docs, index, other, out: retromae.index(
        embeddings=docs, output=out, hybrid=True, corpus=other),
    "search --query --corpus": lambda docs, index, other, out: cli(
        "search", "--index", index, "--query", "model", "--corpus", other),
    "Searcher.load(corpus=)": lambda docs, index, other, out: retromae.Searcher.load(index, corpus=other),
}


@pytest.mark.parametrize("way", DERIVED)
def test_texts_beside_vectors_must_be_the_texts_encoded(tmp_path, beir, hybrid_index, way, capsys):
    other = _other_texts(beir, tmp_path)
    try:
        code = DERIVED[way](tmp_path / "docs", hybrid_index, other, tmp_path / "again")
    except DataError as error:
        code, err = 2, str(error)
    else:
        err = capsys.readouterr().err
    assert code == 2 and f"{other}: its texts of the 48 encoded ids are not the texts that were encoded" in err
    assert "recorded in" in err and "--corpus" in err
    assert not (tmp_path / "again" / "index.json").exists()
    same = tmp_path / "same.jsonl"
    shutil.copyfile(beir / "corpus.jsonl", same)  # another file with the same texts: accepted
    done = DERIVED[way](tmp_path / "docs", hybrid_index, same, tmp_path / "again")
    assert done == 0 or not isinstance(done, int)  # an exit code 0, or the index folder, or the Searcher
