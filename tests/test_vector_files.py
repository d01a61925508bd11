"""Every vector file and record the project reads back is read as a hostile file (the audit's sections 2, 7 and 8).

One reader (`retrieval.vector_files`) takes every .npy file: embeddings.npy (`index --embeddings`, `search --queries
FOLDER`, evaluate's cached corpus vectors), an exact index's index.npy, a binary index's vectors.npy and a hybrid
index's bm25/*.npy. Before, a garbage or truncated file gave a ValueError traceback, float64, float16, int64, bool,
complex or big-endian arrays were indexed without a word, a FIFO hung the command, and encode.json's or index.json's
fields were never checked (`encoder.model: 5` gave a TypeError traceback; `dim 3`, `count 99`, `max_length -1` were
accepted). Generated over the files and the commands that read them, each case in the folder's legacy form (no
fingerprints in its record, so that nothing but the file's own check can stop it): the command exits 2 with one line
naming the file (and the field), no traceback, and writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

from retromae.cli import main


def _npz(path: Path, rows: np.ndarray) -> None:
    """A .npz archive under the .npy file's name."""
    with path.open("wb") as handle:
        np.savez(handle, rows=rows)


WRITERS: dict[str, Callable[[Path, np.ndarray], None]] = {
    "garbage": lambda path, rows: path.write_bytes(b"hello world\n" * 10),
    "truncated": lambda path, rows: (np.save(path, rows), os.truncate(path, path.stat().st_size // 2)),
    "a FIFO": lambda path, rows: os.mkfifo(path),
    "a folder": lambda path, rows: path.mkdir(),
    "float64": lambda path, rows: np.save(path, rows.astype(np.float64)),
    "float16": lambda path, rows: np.save(path, rows.astype(np.float16)),
    "int64": lambda path, rows: np.save(path, rows.astype(np.int64)),
    "bool": lambda path, rows: np.save(path, rows > 0),
    "complex64": lambda path, rows: np.save(path, rows.astype(np.complex64)),
    "big-endian": lambda path, rows: np.save(path, rows.astype(">f4")),
    "no columns": lambda path, rows: np.save(path, np.zeros((len(rows), 0), np.float32)),
    "one dimension": lambda path, rows: np.save(path, rows.reshape(-1)),
    "a row short": lambda path, rows: np.save(path, rows[:-1]),
    "a column short": lambda path, rows: np.save(path, np.ascontiguousarray(rows[:, :-1])),
    "an npz archive": lambda path, rows: _npz(path, rows),
    "pickled objects": lambda path, rows: np.save(path, np.array([{}, {}], dtype=object), allow_pickle=True),
    "a NaN row": lambda path, rows: np.save(path, np.where(np.arange(len(rows))[:, None] == 1, np.nan, rows)),
}
# What each writer leaves, said by the refusal (the file's name is always said too).
SAID = {"garbage": "not a numpy array file", "truncated": "not a numpy array file", "a FIFO": "named pipe",
        "a folder": "not a regular", "an npz archive": "not a numpy array file", "pickled objects": "not a numpy array",
        "a NaN row": "NaN", "big-endian": "big-endian"}


@contextlib.contextmanager
def deadline(seconds: int = 60) -> Iterator[None]:
    """Fail (not hang) a command that blocks, e.g. on a FIFO."""
    def expire(*_):
        raise TimeoutError(f"the command ran past {seconds} s (blocked on a FIFO?)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run(*args) -> int:
    with deadline():
        return main([str(arg) for arg in args])


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model_dir) -> Path:
    """Embeddings of a corpus and of its queries, and a Flat, a binary, an exact (numpy) and a hybrid index."""
    base = tmp_path_factory.mktemp("vectors")
    tiny_beir(base / "beir")
    model = ["--model", tiny_model_dir, "--no-progress"]
    assert run("encode", *model, "--corpus", base / "beir" / "corpus.jsonl", "--output", base / "docs") == 0
    assert run("encode", *model, "--queries", base / "beir" / "queries.jsonl", "--output", base / "queries") == 0
    for name, extra in (("flat", ()), ("binary", ("--factory", "binary")), ("hybrid", ("--hybrid",))):
        assert run("index", "--embeddings", base / "docs", "--output", base / name, *extra) == 0
    from retromae.retrieval.index import ExactIndex, load_index, save_index

    flat, ids, info = load_index(base / "flat")
    exact = ExactIndex(flat.d, "ip")
    exact.add(flat.reconstruct_n(0, flat.ntotal))
    save_index(exact, base / "numpy", ids, {key: info[key] for key in ("factory", "encoder", "corpus")})
    return base


def legacy_copy(folders: Path, name: str, tmp_path: Path) -> Path:
    """A copy of folder `name` whose record (encode.json or index.json) keeps no fingerprints of its files."""
    folder = tmp_path / name
    shutil.copytree(folders / name, folder)
    record = folder / ("index.json" if (folder / "index.json").exists() else "encode.json")
    (record).write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "files"}))
    return folder


# (the folder copied, the file replaced in it, the command reading it: arguments given the copy and tmp_path)
READERS = {
    "index --embeddings": ("docs", "embeddings.npy",
                           lambda copy, tmp, base: ("index", "--embeddings", copy, "--output", tmp / "out")),
    "search --queries FOLDER": ("queries", "embeddings.npy",
                                lambda copy, tmp, base: ("search", "--index", base / "flat", "--queries", copy,
                                                         "--output", tmp / "out.trec")),
    "search an exact index": ("numpy", "index.npy",
                              lambda copy, tmp, base: ("search", "--index", copy, "--queries", base / "queries",
                                                       "--output", tmp / "out.trec")),
    "search a binary index": ("binary", "vectors.npy",
                              lambda copy, tmp, base: ("search", "--index", copy, "--queries", base / "queries",
                                                       "--output", tmp / "out.trec")),
}


def refused(capsys, code: int, *words: str) -> str:
    """The one-line refusal, checked to say `words`."""
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("retromae: error:") and all(word in line for word in words), line
    return line


def nothing_written(tmp_path: Path) -> bool:
    return not (tmp_path / "out.trec").exists() and not (tmp_path / "out" / "index.json").exists()


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("kind", list(WRITERS))
def test_every_vector_file_is_read_checked_by_every_command(folders, tmp_path, capsys, reader, kind):
    name, file, command = READERS[reader]
    copy = legacy_copy(folders, name, tmp_path)
    rows = np.load(folders / name / file)
    (copy / file).unlink()
    WRITERS[kind](copy / file, rows)
    code = run(*command(copy, tmp_path, folders))
    refused(capsys, code, str(copy / file), SAID.get(kind, "not float32 of shape"))
    assert nothing_written(tmp_path)


@pytest.mark.parametrize("file", ["data.npy", "indices.npy", "indptr.npy"])
@pytest.mark.parametrize("kind", ["a FIFO", "garbage", "pickled objects"])
def test_the_arrays_of_a_hybrid_index_go_through_the_same_reader(folders, tmp_path, capsys, file, kind):
    copy = legacy_copy(folders, "hybrid", tmp_path)
    (copy / "bm25" / file).unlink()
    WRITERS[kind](copy / "bm25" / file, np.zeros(3))
    code = run("search", "--index", copy, "--queries", folders / "queries", "--output", tmp_path / "out.trec")
    refused(capsys, code, str(copy / "bm25" / file), SAID[kind])
    assert nothing_written(tmp_path)


@pytest.mark.parametrize("fingerprints", [True, False], ids=["recorded", "legacy"])
@pytest.mark.parametrize("file", ["index.faiss", "ids.txt", "index.json"])
def test_a_fifo_in_an_index_folder_is_refused_before_it_is_opened(folders, tmp_path, capsys, file, fingerprints):
    copy = legacy_copy(folders, "flat", tmp_path)
    if fingerprints:
        shutil.copy(folders / "flat" / "index.json", copy / "index.json")
    (copy / file).unlink()
    os.mkfifo(copy / file)
    code = run("search", "--index", copy, "--queries", folders / "queries", "--output", tmp_path / "out.trec")
    refused(capsys, code, str(copy / file), "named pipe")
    assert nothing_written(tmp_path)


def _poison_rows(faiss, index, rows) -> None:
    """A NaN in the row of document 3 (a Flat, HNSW or IVF-Flat index's stored vectors)."""
    rows[3] = np.nan
    index.add(rows)


def _poison_inverted_list(faiss, index, rows) -> None:
    """A NaN written into the first non-empty inverted list of an IVF-Flat index after the clean rows were added."""
    index.add(rows)
    lists = faiss.extract_index_ivf(index).invlists
    number = next(n for n in range(lists.nlist) if lists.list_size(n))
    faiss.rev_swig_ptr(lists.get_codes(number), lists.code_size).view(np.float32)[0] = np.nan


def _poison_transform(faiss, index, rows) -> None:
    """A NaN in the matrix a PCA pre-transform applies to every vector."""
    index.add(rows)
    transform = faiss.downcast_VectorTransform(faiss.downcast_index(index).chain.at(0))
    matrix = faiss.vector_to_array(transform.A)
    matrix[0] = np.nan
    faiss.copy_array_to_vector(matrix, transform.A)


def _poison_quantizer(faiss, index, rows) -> None:
    """A NaN in the coarse quantizer's centroids of an IVF index."""
    index.add(rows)
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    faiss.rev_swig_ptr(quantizer.get_xb(), quantizer.d)[0] = np.nan


# Every float table a faiss index may keep, poisoned in an index of the factory that keeps it (before, only a Flat
# index's vectors, a scalar or product quantizer's tables were checked: an IVF-Flat list or a PCA matrix with a NaN
# was searched, the document lost from every result or every score NaN).
POISONED_TABLES = {"Flat rows": ("Flat", _poison_rows), "HNSW storage": ("HNSW8", _poison_rows),
                   "IVF-Flat inverted list": ("IVF2,Flat", _poison_inverted_list),
                   "IVF coarse quantizer": ("IVF2,Flat", _poison_quantizer),
                   "PCA matrix": ("PCA8,Flat", _poison_transform)}


@pytest.mark.parametrize("table", list(POISONED_TABLES))
def test_a_faiss_index_with_a_nan_in_any_float_table_is_refused_not_searched(folders, tmp_path, capsys, table):
    import faiss

    factory, poison = POISONED_TABLES[table]
    copy = legacy_copy(folders, "flat", tmp_path)
    rows = faiss.read_index(str(copy / "index.faiss")).reconstruct_n(0, len((copy / "ids.txt").read_text().split()))
    index = faiss.index_factory(rows.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(rows)
    poison(faiss, index, rows)
    faiss.write_index(index, str(copy / "index.faiss"))
    code = run("search", "--index", copy, "--queries", folders / "queries", "--output", tmp_path / "out.trec")
    refused(capsys, code, str(copy / "index.faiss"), "NaN")
    assert nothing_written(tmp_path)


ENCODE_FIELDS = [("model", 5), ("pooling", "max"), ("normalize", "false"), ("prefix", 5), ("dim", "x"), ("dim", 0),
                 ("dim", 999), ("count", -1), ("count", 5), ("max_length", -1), ("max_length", 10**8),
                 ("source", 5), ("generation", 7)]


@pytest.mark.parametrize("reader", ["index --embeddings", "search --queries FOLDER"])
@pytest.mark.parametrize("field, value", ENCODE_FIELDS)
def test_every_field_of_encode_json_is_checked_by_every_command(folders, tmp_path, capsys, reader, field, value):
    name, _, command = READERS[reader]
    copy = legacy_copy(folders, name, tmp_path)
    record = json.loads((copy / "encode.json").read_text())
    (copy / "encode.json").write_text(json.dumps({**record, field: value}))
    code = run(*command(copy, tmp_path, folders))
    line = refused(capsys, code, str(copy))
    assert field in line or "float32 of shape" in line  # a width or count that disagrees names the array
    assert nothing_written(tmp_path)


INDEX_FIELDS = [("encoder.model", 5), ("encoder.max_length", -1), ("encoder.max_length", 10**8),
                ("encoder.prefix", 5), ("encoder.normalize", "false"), ("encoder.pooling", "max"), ("dim", 3),
                ("count", 99), ("factory", 5), ("params", 5), ("generation", 5), ("corpus", 5),
                ("encoder", "x"), ("encoder.dim", 16), ("dim+encoder.dim", 16)]


def _set(record: dict, path: str, value) -> None:
    for key in path.split("+"):
        *parents, last = key.split(".")
        target = record
        for parent in parents:
            target = target[parent]
        target[last] = value


@pytest.mark.parametrize("index", ["flat", "numpy", "binary"])
@pytest.mark.parametrize("field, value", INDEX_FIELDS)
def test_every_field_of_index_json_is_checked_against_the_files(folders, tmp_path, capsys, index, field, value):
    """A field of the wrong type, out of its domain, or disagreeing with the index it describes (its dim, its count,
    its encoder's) is refused naming index.json (or, for a width both records agree on, the array or index)."""
    copy = legacy_copy(folders, index, tmp_path)
    record = json.loads((copy / "index.json").read_text())
    _set(record, field, value)
    (copy / "index.json").write_text(json.dumps(record))
    code = run("search", "--index", copy, "--queries", folders / "queries", "--output", tmp_path / "out.trec")
    refused(capsys, code, str(copy))
    assert nothing_written(tmp_path)


@pytest.mark.parametrize("kind", ["garbage", "float64", "a NaN row"])
def test_evaluate_reads_its_cached_corpus_vectors_checked(tiny_model_dir, tmp_path, capsys, kind):
    tiny_beir(tmp_path / "beir")
    args = ("evaluate", "--model", tiny_model_dir, "--data", tmp_path / "beir", "--cache-dir", tmp_path / "cache")
    assert run(*args, "--output", tmp_path / "first") == 0  # a table (an --output folder) keeps its vectors
    [cached] = (tmp_path / "cache").rglob("embeddings.npy")
    record = json.loads((cached.parent / "encode.json").read_text())
    (cached.parent / "encode.json").write_text(json.dumps({k: v for k, v in record.items() if k != "files"}))
    rows = np.load(cached)
    cached.unlink()
    WRITERS[kind](cached, rows)
    capsys.readouterr()
    code = run(*args, "--output", tmp_path / "second")
    refused(capsys, code, str(cached), SAID.get(kind, "not float32 of shape"))
    assert not (tmp_path / "second" / "results.json").exists()
