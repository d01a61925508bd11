"""What a data file may hold is bounded (audit 6, item 7): a line, an id, and what a message quotes of either.

Before: a 510 KB .gz qrels file holding a 500 MB document id took 2.7 GB of memory and wrote 512 MB to standard
error. Now a line holds at most `lines.LINE_BYTES` bytes where it holds texts and `lines.SHORT_LINE_BYTES` in the
formats of ids and numbers (qrels, TREC runs), read no further than the bound, inside a .gz too; an id holds at most
`fields.MAX_ID_CHARACTERS` characters, by every reader of ids; and a message shows an id or a text from a file
through `lines.quoted`, never whole. Generated over the commands and readers of each format; the texts' bound is made
small here (monkeypatched), so that every test file stays small."""

from __future__ import annotations

import gzip
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs

from retromae.cli import main
from retromae.data import fields
from retromae.data.corpus import iter_documents
from retromae.data.fields import read_id_lines
from retromae.data.inputs import check_format
from retromae.data.retrieval_sets import (
    load_corpus,
    load_qrels,
    load_queries,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.data.training_groups import load_training_file
from retromae.retrieval.index import ExactIndex, save_index
from retromae.runtime import lines
from retromae.runtime.errors import DataError

TEXT_BOUND = 4096  # lines.LINE_BYTES while these tests run: a line a little over it is a small file
LONG_ID = "x" * (fields.MAX_ID_CHARACTERS + 1)
LONGEST_ID = "y" * fields.MAX_ID_CHARACTERS
SHORT_MESSAGE = 600  # characters: a message or warning that quotes an id of 1,000 characters shortened


@pytest.fixture(autouse=True)
def small_text_bound(monkeypatch):
    monkeypatch.setattr(lines, "LINE_BYTES", TEXT_BOUND)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """A model, a BEIR folder, its embeddings and index (`conftest.command_inputs`), and a run of the folder."""
    found = command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)
    (found["B"] / "run.trec").write_text("".join(f"q{i} Q0 d{i} 1 1.0 t\n" for i in range(36, 48)))
    return found


def write(path: Path, text: str) -> Path:
    """`text` written to `path` (gzip-compressed when it ends in .gz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode("utf-8"), 1))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def broken(source: Path, line: int, text: str, target: Path) -> Path:
    """`source` written to `target` with line `line` replaced by `text`."""
    rows = source.read_text(encoding="utf-8").splitlines()
    rows[line - 1] = text
    return write(target, "\n".join(rows) + "\n")


def json_line(size: int) -> str:
    """A corpus or queries JSON line of `size` bytes, its id `d5`."""
    head = '{"_id": "d5", "text": "'
    return head + "a" * (size - len(head) - 2) + '"}'


def qrels_line(size: int) -> str:
    return "q37\t" + "d" * (size - 6) + "\t1"


def run_line(size: int) -> str:
    return "q40 Q0 " + "d" * (size - 15) + " 1 1.0 t"


# 1. A line beyond the bound: each command reading each format refuses it in one line naming FILE:LINE, .gz too.

SHORT = lines.SHORT_LINE_BYTES + 1
# case: (command with B the BEIR folder, FILE the broken file; the file FILE is made of; its broken line; the line;
# the bound)
LONG_LINE_CASES: dict[str, tuple[list[str], str, int, str, int]] = {
    "bm25 --data: qrels": (["bm25", "--data", "FOLDER", "--output", "o"], "B/qrels/test.tsv", 3, qrels_line(SHORT),
                           lines.SHORT_LINE_BYTES),
    "bm25 --data: corpus": (["bm25", "--data", "FOLDER", "--output", "o"], "B/corpus.jsonl", 5,
                            json_line(TEXT_BOUND + 1), TEXT_BOUND),
    "bm25 --data: queries": (["bm25", "--data", "FOLDER", "--output", "o"], "B/queries.jsonl", 5,
                             json_line(TEXT_BOUND + 1), TEXT_BOUND),
    "bm25 --corpus: a .tsv corpus": (["bm25", "--corpus", "FILE", "--queries", "Q", "--output", "o"],
                                     "collection.tsv", 2, "d1\t" + "a" * TEXT_BOUND, TEXT_BOUND),
    "evaluate --run": (["evaluate", "--data", "B", "--run", "FILE"], "B/run.trec", 2, run_line(SHORT),
                       lines.SHORT_LINE_BYTES),
    "search --queries": (["search", "--index", "I", "--queries", "FILE", "--output", "o"], "B/queries.jsonl", 2,
                         json_line(TEXT_BOUND + 1), TEXT_BOUND),
    "index --corpus": (["index", "--embeddings", "E", "--hybrid", "--corpus", "FILE", "--output", "o"],
                       "B/corpus.jsonl", 2, json_line(TEXT_BOUND + 1), TEXT_BOUND),
    "encode --corpus": (["encode", "--model", "M", "--corpus", "FILE", "--output", "o"], "B/corpus.jsonl", 2,
                        json_line(TEXT_BOUND + 1), TEXT_BOUND),
}


def _target(source: str, inputs: dict[str, Path], tmp_path: Path, gz: bool) -> tuple[Path, Path]:
    """(the broken file to write, the folder standing for it: a copy of the BEIR folder when it is one of its files)."""
    suffix = ".gz" if gz else ""
    if source == "collection.tsv":
        rows = "".join(f"d{i}\tsome text\n" for i in range(3))
        return tmp_path / f"collection.tsv{suffix}", write(tmp_path / "source.tsv", rows)
    folder = shutil.copytree(inputs["B"], tmp_path / "beir")
    relative = source.removeprefix("B/")
    (folder / relative).unlink()
    return folder / f"{relative}{suffix}", inputs["B"] / relative


def _argv(template: list[str], file: Path, folder: Path, inputs: dict[str, Path], tmp_path: Path) -> list[str]:
    names = {"FILE": str(file), "FOLDER": str(folder), "o": str(tmp_path / "out"),
             **{key: str(value) for key, value in inputs.items()}}
    return [names.get(word, word) for word in template]


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("retromae: error:")]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("case", list(LONG_LINE_CASES))
def test_a_line_beyond_the_bound_is_refused_naming_file_and_line(inputs, tmp_path, capsys, case, gz):
    template, source, line, text, bound = LONG_LINE_CASES[case]
    target, original = _target(source, inputs, tmp_path, gz)
    broken(original, line, text, target)
    code = main(_argv(template, target, tmp_path / "beir", inputs, tmp_path))
    errors = _errors(capsys)
    assert code == 2 and errors == [f"retromae: error: {target}:{line}: the line is longer than {bound:,} bytes, the "
                                    "most a line of this file may hold"], errors


def test_a_line_at_the_bound_is_read_and_one_byte_more_is_not(tmp_path):
    for bound, size in ((TEXT_BOUND, TEXT_BOUND), (lines.SHORT_LINE_BYTES, lines.SHORT_LINE_BYTES)):
        path = write(tmp_path / "f.txt", "a" * size + "\n" + "b" * (size + 1) + "\n")
        read = lines.numbered_lines(path, line_bytes=None if bound == TEXT_BOUND else bound)
        assert next(read) == (1, "a" * size)
        with pytest.raises(DataError, match=rf"f.txt:2: the line is longer than {bound:,} bytes"):
            next(read)


READERS: dict[str, tuple[str, Callable[[Path], object], str]] = {  # file, reader, its text with a long line 2
    "STS pairs": ("sts.tsv", load_sts_pairs,
                  "g\tf\t2012\t1\t4.0\ta\tb\ng\tf\t2012\t2\t4.0\t" + "a" * TEXT_BOUND + "\tb"),
    "training file": ("train.jsonl", load_training_file,
                      '{"query": "q", "pos": ["p"]}\n{"query": "q", "pos": ["' + "p" * TEXT_BOUND + '"]}'),
    "pre-training JSON lines": ("c.jsonl", lambda p: list(iter_documents(p)), json_line(20) + "\n" +
                                json_line(TEXT_BOUND + 1)),
    "TREC run": ("run.trec", read_trec_run, "q Q0 d 1 1.0 t\n" + run_line(SHORT)),
}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_and_its_head_check_refuse_a_long_line(tmp_path, reader, gz):
    """The readers the commands above do not reach, and preflight's check of a file's head (`check_format`), which
    reads through the same readers."""
    name, read, text = READERS[reader]
    path = write(tmp_path / f"{name}{'.gz' if gz else ''}", text + "\n")
    with pytest.raises(DataError, match=rf"^{path}:2: the line is longer than"):
        read(path)
    kind = {"STS pairs": "sts", "training file": "training file", "pre-training JSON lines": "documents"}
    with pytest.raises(DataError, match=rf"^{path}:2: the line is longer than"):
        check_format(kind.get(reader, "run"), path)


def test_a_txt_corpus_line_is_bounded_by_the_file_alone(tmp_path):
    """A .txt corpus is never compressed and may be one line (text8): no bound refuses it."""
    path = write(tmp_path / "c.txt", "word " * TEXT_BOUND + "\n")
    assert [len(document.text) for document in iter_documents(path)] == [len("word " * TEXT_BOUND) - 1]


def test_a_small_gz_holding_a_huge_line_is_refused_in_little_memory(tmp_path):
    """The audit's case scaled to a 48 MB line in a 48 KB file (before: read whole, about 5 times its size in memory,
    and the id written whole to standard error); in a child process, to measure its peak memory."""
    folder = tmp_path / "beir"
    write(folder / "corpus.jsonl", json_line(40) + "\n")
    write(folder / "queries.jsonl", '{"_id": "q1", "text": "a"}\n')
    (folder / "qrels").mkdir()
    with gzip.open(folder / "qrels" / "test.tsv.gz", "wb", 1) as handle:
        handle.write(b"query-id\tcorpus-id\tscore\nq1\td5\t1\nq1\t")
        for _ in range(48):
            handle.write(b"d" * (1 << 20))
        handle.write(b"\t1\n")
    script = ("import re, sys; from pathlib import Path; from retromae.cli import main; code = main(sys.argv[1:]); "
              "print(re.search(r'VmHWM:\\s*(\\d+)', Path('/proc/self/status').read_text())[1]); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script, "bm25", "--data", str(folder), "--output",
                           str(tmp_path / "run.trec")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr) < 300, done.stderr[:300]
    assert done.stderr.startswith(f"retromae: error: {folder / 'qrels' / 'test.tsv.gz'}:3: the line is longer")
    assert int(done.stdout) < 150_000, f"{done.stdout.strip()} kB at its peak"  # (its peak since it started)


# 2. An id beyond the length limit, refused by every reader of ids naming FILE:LINE.

ID_READERS: dict[str, tuple[str, Callable[[str], str], Callable[[Path], object]]] = {
    "BEIR corpus": ("corpus.jsonl", lambda v: f'{{"_id": "d1", "text": "t"}}\n{{"_id": "{v}", "text": "t"}}\n',
                    load_corpus),
    "MS MARCO collection": ("collection.tsv", lambda v: f"d1\tt\n{v}\tt\n", load_corpus),
    "queries": ("queries.jsonl", lambda v: f'{{"_id": "q1", "text": "q"}}\n{{"_id": "{v}", "text": "q"}}\n',
                load_queries),
    "qrels query id": ("qrels.tsv", lambda v: f"q1\td1\t1\n{v}\td1\t1\n", load_qrels),
    "qrels document id": ("qrels.tsv", lambda v: f"q1\td1\t1\nq1\t{v}\t1\n", load_qrels),
    "TREC run": ("run.trec", lambda v: f"q Q0 d 1 1.0 t\nq Q0 {v} 2 0.5 t\n", read_trec_run),
    "ids.txt": ("ids.txt", lambda v: f"a\n{v}\n", read_id_lines),
    "training file query_id": ("train.jsonl", lambda v: '{"query": "q", "pos": ["p"]}\n'
                               f'{{"query_id": "{v}", "query": "q", "pos": ["p"]}}\n', load_training_file),
    "training file pos_ids": ("train.jsonl", lambda v: '{"query": "q", "pos": ["p"], "pos_ids": ["p1"]}\n'
                              f'{{"query": "q", "pos": ["p"], "pos_ids": ["{v}"]}}\n', load_training_file),
    "pre-training corpus": ("c.jsonl", lambda v: f'{{"text": "t"}}\n{{"id": "{v}", "text": "t"}}\n',
                            lambda p: list(iter_documents(p))),
}


@pytest.mark.parametrize("reader", list(ID_READERS))
def test_every_reader_of_ids_refuses_an_id_beyond_the_limit_and_takes_one_at_it(tmp_path, reader):
    name, text, read = ID_READERS[reader]
    path = write(tmp_path / name, text(LONG_ID))
    with pytest.raises(DataError) as error:
        read(path)
    message = str(error.value)
    assert message.startswith(f"{path}:2: ") and "is 1,001 characters long (an id holds at most 1,000)" in message
    assert len(message) < SHORT_MESSAGE and "x" * 100 not in message, message
    read(write(tmp_path / "longest" / name, text(LONGEST_ID)))


def test_commands_refuse_a_long_id_in_a_file_and_in_an_index_ids_txt(inputs, tmp_path, capsys):
    folder = shutil.copytree(inputs["B"], tmp_path / "beir")
    broken(inputs["B"] / "qrels" / "test.tsv", 2, f"q36\t{LONG_ID}\t1", folder / "qrels" / "test.tsv")
    assert main(["bm25", "--data", str(folder), "--output", str(tmp_path / "run.trec")]) == 2
    errors = _errors(capsys)
    assert len(errors) == 1 and errors[0].startswith(f"retromae: error: {folder}/qrels/test.tsv:2: document id 'xxx")
    index = ExactIndex(4)
    index.add(np.eye(4, dtype=np.float32)[:2])
    save_index(index, tmp_path / "index", ["a", LONG_ID])  # written by a library user: read back by the one rule
    assert main(["search", "--index", str(tmp_path / "index"), "--queries", str(inputs["Q"]), "--output",
                 str(tmp_path / "s.trec")]) == 2
    errors = _errors(capsys)
    assert len(errors) == 1 and f"{tmp_path / 'index' / 'ids.txt'}:2: id 'xxx" in errors[0], errors
    assert len(errors[0]) < SHORT_MESSAGE
    with pytest.raises(DataError, match="cannot be written to a TREC run: it is 1,001 characters long"):
        write_trec_run({"q": {LONG_ID: 1.0}}, tmp_path / "w.trec")


# 3. A message or warning quotes an id, or a text from a file, shortened (`lines.quoted`).

MESSAGES: dict[str, tuple[str, Callable[[str], str], Callable[[Path], object]]] = {
    "repeated id": ("corpus.jsonl", lambda v: f'{{"_id": "{v}", "text": "t"}}\n' * 2, load_corpus),
    "a query without text": ("queries.jsonl", lambda v: f'{{"_id": "{v}", "text": " "}}\n', load_queries),
    "a judgment given twice": ("qrels.tsv", lambda v: f"{v}\t{v}\t1\n{v}\t{v}\t2\n", load_qrels),
    "a document twice in a run": ("run.trec", lambda v: f"{v} Q0 {v} 1 1.0 t\n{v} Q0 {v} 2 0.5 t\n", read_trec_run),
    "a header naming another column": ("queries.tsv", lambda v: f"id\t{v}\n", load_queries),
    "a field of another type": ("train.jsonl", lambda v: f'{{"query": "q", "pos": ["p"], "query_id": ["{v}"]}}\n',
                                load_training_file),
}


@pytest.mark.parametrize("case", list(MESSAGES))
def test_an_error_quotes_a_long_id_shortened(tmp_path, case):
    name, text, read = MESSAGES[case]
    path = write(tmp_path / name, text(LONGEST_ID))
    with pytest.raises(DataError) as error:
        read(path)
    assert len(str(error.value)) < SHORT_MESSAGE and "y" * 100 not in str(error.value), str(error.value)
    assert " characters)" in str(error.value)


def test_the_warnings_about_dropped_judgments_quote_ids_shortened(inputs, tmp_path, caplog):
    """Before: the audit's 500 MB id went whole into "dropped them: ... (e.g. 'dddd...')" (512 MB of stderr)."""
    folder = shutil.copytree(inputs["B"], tmp_path / "beir")
    qrels = folder / "qrels" / "test.tsv"
    with qrels.open("a") as handle:
        handle.write(f"q36\t{LONGEST_ID}\t1\n{'z' * 1000}\td36\t0\n")
    assert main(["bm25", "--data", str(folder), "--output", str(tmp_path / "run.trec")]) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert [("judge no document above 0" in w, "dropped them" in w) for w in warnings] == [(True, False), (False, True)]
    for warning in warnings:
        assert "y" * 100 not in warning and "z" * 100 not in warning and len(warning) < SHORT_MESSAGE, warning
