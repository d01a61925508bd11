import json
import os
import sys

import numpy as np
import pytest
from conftest import make_sentences

from retromae.models.encoder import Encoder
from retromae.retrieval import index as index_module
from retromae.retrieval.bm25 import BM25Params, bm25_search
from retromae.retrieval.encode import SHARDS_DIR, encode_to_dir, load_embeddings
from retromae.retrieval.index import ExactIndex, build_index, load_index, save_index, search
from retromae.retrieval.search import dense_search, results_to_run
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError

TEXTS = make_sentences(23, seed=5)
IDS = [f"d{i}" for i in range(len(TEXTS))]


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return Encoder.load(tiny_model_dir, pooling="mean", normalize=True, device="cpu")


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((3000, 32)).astype(np.float32)
    queries = rng.standard_normal((50, 32)).astype(np.float32)
    return corpus, queries


class Killed(Exception):
    """Stands for the process being killed in the middle of a run."""


def recall_against(exact: np.ndarray, approximate: np.ndarray) -> float:
    return float(np.mean([len(set(e) & set(a)) / len(e) for e, a in zip(exact, approximate, strict=True)]))


def test_encode_to_dir_writes_float32_vectors_and_ids(tmp_path, encoder):
    folder = encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", model_name="tiny", shard_size=5,
                           batch_size=4, show_progress=False)
    ids, vectors, info = load_embeddings(folder, mmap=False)
    assert ids == IDS and vectors.dtype == np.float32 and vectors.shape == (23, 32)
    np.testing.assert_allclose(vectors, encoder.encode(TEXTS, show_progress=False), atol=1e-5)
    assert (info["model"], info["pooling"], info["normalize"], info["count"]) == ("tiny", "mean", True, 23)
    assert not (folder / SHARDS_DIR).exists()


def test_killed_run_resumes_by_shard(tmp_path, encoder, monkeypatch):
    calls, die_on_call = [], [3]
    real_encode = Encoder.encode

    def dies_on_third_shard(self, texts, **kwargs):
        calls.append(len(texts))
        if len(calls) == die_on_call[0]:
            raise Killed
        return real_encode(self, texts, **kwargs)

    monkeypatch.setattr(Encoder, "encode", dies_on_third_shard)
    with pytest.raises(Killed):
        encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", shard_size=5, show_progress=False)
    assert sorted(p.name for p in (tmp_path / "emb" / SHARDS_DIR).glob("shard-*.npy")) == \
        ["shard-00000.npy", "shard-00001.npy"]
    calls.clear()
    die_on_call[0] = 0
    encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", shard_size=5, show_progress=False)
    assert calls == [5, 5, 3]  # only shards 2, 3, 4 are encoded again
    _, vectors, _ = load_embeddings(tmp_path / "emb")
    np.testing.assert_allclose(vectors, real_encode(encoder, TEXTS, show_progress=False), atol=1e-5)
    calls.clear()
    encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", shard_size=5, show_progress=False)
    assert calls == []  # finished output is left as it is


def test_resume_refuses_shards_of_other_input(tmp_path, encoder, monkeypatch):
    monkeypatch.setattr(Encoder, "encode", lambda self, texts, **kwargs: (_ for _ in ()).throw(Killed))
    with pytest.raises(Killed):
        encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", shard_size=5, show_progress=False)
    with pytest.raises(ConfigError, match="fingerprint"):
        encode_to_dir(encoder, IDS, TEXTS[::-1], tmp_path / "emb", shard_size=5, show_progress=False)


def test_encode_to_dir_rejects_bad_ids(tmp_path, encoder):
    with pytest.raises(DataError, match="ids"):
        encode_to_dir(encoder, IDS[:3], TEXTS, tmp_path / "emb", show_progress=False)
    with pytest.raises(DataError, match="one per line"):
        encode_to_dir(encoder, ["a\nb"], ["x"], tmp_path / "emb", show_progress=False)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_flat_index_equals_exact_numpy_search(vectors, metric):
    corpus, queries = vectors
    ids = _ids(corpus)
    flat_scores, flat_rows = search(build_index(corpus, "Flat", metric), queries, 10, ids=ids)
    exact_scores, exact_rows = search(_exact(corpus, metric), queries, 10, ids=ids)
    np.testing.assert_array_equal(flat_rows, exact_rows)
    np.testing.assert_allclose(flat_scores, exact_scores, rtol=1e-4, atol=1e-3)
    assert np.all(np.diff(flat_scores, axis=1) <= 1e-6)  # best first, higher is better for both metrics
    brute = queries @ corpus.T if metric == "ip" else -((queries[:, None] - corpus[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(exact_rows, np.argsort(-brute, axis=1)[:, :10])


def _ids(corpus: np.ndarray) -> list[str]:
    return [f"d{row:05d}" for row in range(len(corpus))]


def _exact(corpus: np.ndarray, metric: str) -> ExactIndex:
    index = ExactIndex(corpus.shape[1], metric)
    index.add(corpus)
    return index


@pytest.mark.parametrize(("factory", "params", "floor"), [("HNSW32", "efSearch=64", 0.8),
                                                         ("IVF16,PQ4x4", "nprobe=4", 0.1)])
def test_approximate_index_recall_against_flat(vectors, factory, params, floor):
    corpus, queries = vectors
    _, exact = search(build_index(corpus, "Flat"), queries, 10, ids=_ids(corpus))
    _, approximate = search(build_index(corpus, factory, params=params), queries, 10, ids=_ids(corpus))
    recall = recall_against(exact, approximate)
    print(f"{factory} ({params}) recall@10 against Flat on 3000 random 32-d vectors: {recall:.3f}")
    assert recall >= floor


def test_save_load_round_trip_and_short_results(tmp_path, vectors):
    corpus, queries = vectors
    index = build_index(corpus[:5], "HNSW32")
    ids = [f"doc{i}" for i in range(5)]
    save_index(index, tmp_path / "idx", ids, {"factory": "HNSW32"})
    loaded, loaded_ids, info = load_index(tmp_path / "idx")
    assert loaded_ids == ids and info["factory"] == "HNSW32" and info["backend"] == "faiss"
    scores, rows = search(loaded, queries[:2], 8, ids=ids)
    np.testing.assert_array_equal(rows[:, 5:], -1)
    run = results_to_run(["q0", "q1"], ids, scores, rows)
    assert all(len(docs) == 5 for docs in run.values())


def test_numpy_fallback_without_faiss(tmp_path, vectors, monkeypatch):
    corpus, queries = vectors
    save_index(build_index(corpus, "Flat"), tmp_path / "faiss-index", [str(i) for i in range(len(corpus))])
    expected = search(build_index(corpus, "Flat"), queries, 10, ids=_ids(corpus))
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` now raises ImportError
    assert index_module.import_faiss() is None
    index = build_index(corpus, "Flat")
    assert isinstance(index, ExactIndex)
    np.testing.assert_array_equal(search(index, queries, 10, ids=_ids(corpus))[1], expected[1])
    save_index(index, tmp_path / "numpy-index", [str(i) for i in range(len(corpus))])
    loaded, _, info = load_index(tmp_path / "numpy-index")
    assert info["backend"] == "numpy"
    np.testing.assert_array_equal(search(loaded, queries, 10, ids=_ids(corpus))[1], expected[1])
    with pytest.raises(ConfigError, match="needs faiss"):
        build_index(corpus, "HNSW32")
    with pytest.raises(ConfigError, match="install faiss"):
        load_index(tmp_path / "faiss-index")


def test_index_errors(tmp_path, vectors):
    corpus, _ = vectors
    with pytest.raises(ConfigError, match="--factory"):
        build_index(corpus, "NoSuchIndex")
    with pytest.raises(ConfigError, match="--factory"):
        build_index(corpus[:10], "IVF64,Flat")
    with pytest.raises(ConfigError, match="--params"):
        build_index(corpus, "Flat", params="nprobe=x")
    with pytest.raises(ConfigError, match="--metric"):
        build_index(corpus, "Flat", metric="cosine")
    with pytest.raises(DataError, match="not an index folder"):
        load_index(tmp_path)
    (tmp_path / "emb").mkdir()
    with pytest.raises(DataError, match="not an embeddings folder"):
        load_embeddings(tmp_path / "emb")


def test_dense_search_finds_the_identical_passage(encoder):
    corpus = dict(zip(IDS, TEXTS, strict=True))
    queries = {"q3": TEXTS[3], "q7": TEXTS[7]}
    run = dense_search(encoder, corpus, queries, k=5, show_progress=False)
    assert [max(run[q], key=run[q].get) for q in queries] == ["d3", "d7"]
    assert all(len(docs) == 5 for docs in run.values())


def test_bm25_ranks_the_obvious_document_first():
    corpus = {"cats": "the cat sat on the mat and the cat purred", "dogs": "dogs run in the park",
              "fish": "a fish swims in the sea", "mixed": "a dog and a cat"}
    queries = {"q1": "cat on a mat", "q2": "running dogs park", "q3": "the of and"}
    run = bm25_search(corpus, queries, k=10, show_progress=False)
    assert max(run["q1"], key=run["q1"].get) == "cats"
    assert max(run["q2"], key=run["q2"].get) == "dogs"
    assert run["q3"] == {}  # stopwords only: nothing matches
    assert set(run["q1"]) == {"cats", "mixed"}  # only documents sharing a term are returned


@pytest.mark.parametrize("corpus", [{"empty": ""}, {"stop": "the of and", "blank": "   "}])
def test_bm25_over_documents_without_a_term_finds_nothing(corpus):
    run = bm25_search(corpus, {"q1": "cat", "q2": "the"}, k=10, show_progress=False)
    assert run == {"q1": {}, "q2": {}}  # before: bm25s's "ValueError: max() arg is an empty sequence"
    mixed = bm25_search({**corpus, "cats": "a cat sat"}, {"q1": "cat"}, k=10, show_progress=False)
    assert list(mixed["q1"]) == ["cats"]


def test_bm25_options_are_checked():
    with pytest.raises(ConfigError, match="--b"):
        BM25Params(b=2.0)
    with pytest.raises(ConfigError, match="--variant"):
        BM25Params(variant="tfidf")


def test_encode_info_is_json(tmp_path, encoder):
    folder = encode_to_dir(encoder, IDS[:3], TEXTS[:3], tmp_path / "emb", prefix="passage: ", show_progress=False)
    info = json.loads((folder / "encode.json").read_text())
    assert info["prefix"] == "passage: " and info["max_length"] == 128 and info["dim"] == 32


def test_bm25_english_stemming_or_a_clear_error():
    corpus, queries = {"a": "the runner was running", "b": "a quiet lake"}, {"q": "runs"}
    try:
        import Stemmer  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="PyStemmer"):
            bm25_search(corpus, queries, params=BM25Params(stemmer="english"), show_progress=False)
        return
    assert list(bm25_search(corpus, queries, params=BM25Params(stemmer="english"), show_progress=False)["q"]) == ["a"]


def test_bm25s_keeps_jax_off_the_gpu_unless_the_user_chose(monkeypatch):
    from retromae.retrieval import bm25

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    bm25._bm25s()
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    bm25._bm25s()
    assert os.environ["JAX_PLATFORMS"] == "cuda"



def test_the_gpu_memory_check_child_searches_and_exits_cleanly():
    """The child of test_gpu's BM25 memory check must finish its search: run here on CPU, exit code checked."""
    import subprocess

    from test_gpu import BM25_CHILD

    done = subprocess.run([sys.executable, "-c", BM25_CHILD], input="", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["searched"]
