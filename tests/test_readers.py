"""Data read strictly (issue 50, item 7 and the data cases of item 8): one reader per format, each through one
checked function. Generated over every reader of ids and every bad id, over every command that reads each format,
and over every file-reading option with what is not a regular file; top-k capped at the corpus size.
docs/reliability.md ("Data read strictly") lists each class with the test that shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

from retromae.cli import build_parser, discover_commands, main
from retromae.data.contrastive import iter_pairs
from retromae.data.corpus import iter_documents
from retromae.data.fields import check_id, read_id_lines
from retromae.data.retrieval_sets import (
    load_corpus,
    load_qrels,
    load_queries,
    load_retrieval_set,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.data.training_groups import load_training_file
from retromae.retrieval.bm25 import BM25
from retromae.retrieval.index import ExactIndex, build_index, search
from retromae.retrieval.top_k import capped_top_k
from retromae.runtime.errors import DataError

# Every character str.splitlines splits at, other whitespace, and the edges: each must be refused in an id.
LINE_BREAKS = ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
OTHER_WHITESPACE = [" ", "\t", "\u00a0", "\u3000", "\x1f"]
BAD_STRING_IDS = ([f"a{c}b" for c in LINE_BREAKS + OTHER_WHITESPACE] + ["", " a", "a ", "\u2028a", "a\u2028"])
BAD_JSON_IDS = [4983.0, 4983, -1, 1e20, True, {"a": 1}, ["a"], *BAD_STRING_IDS]
GOOD_IDS = ["4983", "doc-é/1:ß_x", "0004983", "Q0", "\u200bzero-width", "a,b;c|d"]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(records: list) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


# 1. The id rule, over every reader of ids: JSON formats take the value as it is, text formats the field's text.

JSON_READERS: dict[str, tuple[str, Callable[[object], dict], Callable[[Path], object]]] = {
    "BEIR corpus `_id`": ("corpus.jsonl", lambda v: {"_id": v, "title": "", "text": "t"}, load_corpus),
    "BEIR corpus `id`": ("corpus.jsonl", lambda v: {"id": v, "text": "t"}, load_corpus),
    "BEIR queries `_id`": ("queries.jsonl", lambda v: {"_id": v, "text": "q"}, load_queries),
    "pre-training corpus `_id`": ("c.jsonl", lambda v: {"_id": v, "text": "t"}, lambda p: list(iter_documents(p))),
    "pre-training corpus `id`": ("c.json", lambda v: {"id": v, "text": "t"}, lambda p: list(iter_documents(p))),
    "training file `query_id`": ("train.jsonl", lambda v: {"query_id": v, "query": "q", "pos": ["p"]},
                                 load_training_file),
    "training file `pos_ids`": ("train.jsonl", lambda v: {"query": "q", "pos": ["p"], "pos_ids": [v]},
                                load_training_file),
    "training file `neg_ids`": ("train.jsonl", lambda v: {"query": "q", "pos": ["p"], "pos_ids": ["p-id"], "neg": ["n"],
                                                          "neg_ids": [v]}, load_training_file),
}
GOOD_LINE = {"BEIR corpus `_id`": {"_id": "ok", "text": "t"}, "BEIR queries `_id`": {"_id": "ok", "text": "q"}}


def _beir_folder_reader(part: str) -> Callable[[Path], object]:
    """Read a BEIR folder whose `part` file is the one written: the folder reader goes through the same checks."""
    def read(path: Path) -> object:
        folder = path.parent.parent if part == "qrels" else path.parent
        if part != "corpus":
            write(folder / "corpus.jsonl", jsonl([{"_id": "d1", "text": "t"}]))
        if part != "queries":
            write(folder / "queries.jsonl", jsonl([{"_id": "q1", "text": "q"}]))
        if part != "qrels":
            write(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
        return load_retrieval_set(folder)
    return read


JSON_READERS["BEIR folder corpus"] = ("beir/corpus.jsonl", lambda v: {"_id": v, "text": "t"},
                                      _beir_folder_reader("corpus"))
JSON_READERS["BEIR folder queries"] = ("beir/queries.jsonl", lambda v: {"_id": v, "text": "q"},
                                       _beir_folder_reader("queries"))


@pytest.mark.parametrize("value", BAD_JSON_IDS, ids=repr)
@pytest.mark.parametrize("reader", list(JSON_READERS))
def test_every_json_reader_refuses_every_bad_id_naming_file_and_line(tmp_path, reader, value):
    name, record, read = JSON_READERS[reader]
    good = GOOD_LINE.get(reader, record("ok"))
    path = write(tmp_path / name, jsonl([good, record(value)]))
    with pytest.raises(DataError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:2: "), str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("reader", [name for name in JSON_READERS if "folder" not in name])
def test_every_json_reader_takes_every_good_id_as_it_is(tmp_path, reader):
    name, record, read = JSON_READERS[reader]
    result = read(write(tmp_path / name, jsonl([record(value) for value in GOOD_IDS])))
    if isinstance(result, dict):
        assert list(result) == GOOD_IDS
    elif isinstance(result, list):
        assert [document.doc_id for document in result] == GOOD_IDS
    elif reader.endswith("`query_id`"):
        assert [example.query_id for example in result.examples] == GOOD_IDS
    else:  # pos_ids / neg_ids: the passages' ids
        assert set(GOOD_IDS) <= set(result.ids) and len(result.examples) == len(GOOD_IDS)


def test_a_number_id_is_refused_with_its_string_spelling_suggested(tmp_path):
    path = write(tmp_path / "corpus.jsonl", jsonl([{"_id": 4983.0, "text": "t"}]))
    with pytest.raises(DataError, match=r"corpus.jsonl:1: field '_id' must be a string, got a number 4983.0; "
                                        r"ids are strings: write \"4983\", spelled as the qrels"):
        load_corpus(path)


TEXT_READERS: dict[str, tuple[str, Callable[[str], str], Callable[[Path], object], int]] = {
    # name: (file, the text of a file whose line `bad_line` holds the id, reader, bad_line)
    "MS MARCO collection": ("collection.tsv", lambda v: f"ok\tt\n{v}\tt\n", load_corpus, 2),
    "MS MARCO queries": ("queries.tsv", lambda v: f"ok\tq\n{v}\tq\n", load_queries, 2),
    "BEIR qrels query id": ("qrels.tsv", lambda v: f"query-id\tcorpus-id\tscore\nq\td\t1\n{v}\td\t1\n", load_qrels, 3),
    "BEIR qrels document id": ("qrels.tsv", lambda v: f"query-id\tcorpus-id\tscore\nq\td\t1\nq\t{v}\t1\n",
                               load_qrels, 3),
    "header-less qrels": ("qrels.tsv", lambda v: f"q\td\t1\nq\t{v}\t1\n", load_qrels, 2),
    "TREC qrels": ("qrels.txt", lambda v: f"q 0 d 1\nq\t0\t{v}\t1\n", load_qrels, 2),
    "TREC run query id": ("run.trec", lambda v: f"q Q0 d 1 1.0 t\n{v} Q0 d 1 1.0 t\n", read_trec_run, 2),
    "TREC run document id": ("run.trec", lambda v: f"q Q0 d 1 1.0 t\nq Q0 {v} 1 1.0 t\n", read_trec_run, 2),
    "ids.txt": ("ids.txt", lambda v: f"ok\n{v}\nlast\n", read_id_lines, 2),
    "BEIR folder qrels": ("beir/qrels/test.tsv", lambda v: f"query-id\tcorpus-id\tscore\nq1\td1\t1\n{v}\td1\t1\n",
                          _beir_folder_reader("qrels"), 3),
}
# In a tab-separated field, spaces around the tab separate (as in whitespace-separated files) and are not part of
# the id; a line feed ends the line and a tab the field, so these are not ids held by one field.
NOT_IN_A_FIELD = {"", " a", "a ", "\u2028a", "a\u2028", "a\nb", "a\tb"}


@pytest.mark.parametrize("value", [v for v in BAD_STRING_IDS if v not in NOT_IN_A_FIELD] + [""], ids=repr)
@pytest.mark.parametrize("reader", list(TEXT_READERS))
def test_every_text_reader_refuses_every_bad_id_naming_file_and_line(tmp_path, reader, value):
    name, text, read, line = TEXT_READERS[reader]
    if value == "" and reader.startswith(("TREC", "header-less", "BEIR qrels", "BEIR folder")):
        pytest.skip("an empty field of a whitespace-separated line is no field: the field count names the line")
    path = write(tmp_path / name, text(value))
    with pytest.raises(DataError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:{line}: "), str(error.value)


def test_ids_txt_splits_at_line_feeds_only(tmp_path):
    path = write(tmp_path / "ids.txt", "a\nb\n")
    assert read_id_lines(path) == ["a", "b"]
    path.write_bytes("a\u2028b\nc\n".encode())  # splitlines made 3 ids of 2 lines, shifting every vector's id
    with pytest.raises(DataError, match=r"ids.txt:1: id 'a\\u2028b' holds a line separator \(U\+2028\) at character 2"):
        read_id_lines(path)


def test_the_id_rule_names_the_character_and_where_it_is():
    with pytest.raises(DataError, match=r"F:3: id 'x ' holds a space at character 2 \(its end\); an id holds no "
                                        r"whitespace"):
        check_id("x ", "F:3")
    with pytest.raises(DataError, match=r"F:3: id '\\x85x' holds the whitespace U\+0085 at character 1 \(its start\)"):
        check_id("\x85x", "F:3")


def test_a_trailing_space_no_longer_loses_judgments_it_is_refused_before_any_work(tmp_path):
    """Before: `{"_id": "d1 "}` was read as "d1 ", the qrels' "d1" matched nothing, and a warning about dropped
    judgments hid the cause."""
    tiny_beir(tmp_path / "beir")
    lines = (tmp_path / "beir" / "corpus.jsonl").read_text().splitlines()
    lines[40] = json.dumps({"_id": "d40 ", "text": json.loads(lines[40])["text"]})
    write(tmp_path / "beir" / "corpus.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:41: field '_id' 'd40 ' holds a space at character 4 "
                                        r"\(its end\)"):
        load_retrieval_set(tmp_path / "beir")


def test_no_run_is_written_with_an_id_that_breaks_the_rule(tmp_path):
    for bad in ("d 1", "d\u20281", ""):
        with pytest.raises(ValueError, match="cannot be written to a TREC run"):
            write_trec_run({"q": {bad: 1.0}}, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()


# 2. Fields of the wrong JSON type, refused with FILE:LINE (never turned into their repr).

WRONG_TYPES = [
    ("corpus.jsonl", {"_id": "d", "text": {"body": "x"}}, load_corpus, "field 'text' must be a string, got an object"),
    ("corpus.jsonl", {"_id": "d", "text": ["x"]}, load_corpus, "field 'text' must be a string, got an array"),
    ("corpus.jsonl", {"_id": "d", "text": 5}, load_corpus, "field 'text' must be a string, got a number"),
    ("corpus.jsonl", {"_id": "d", "title": 1984, "text": "x"}, load_corpus,
     "field 'title' must be a string, got a number"),
    ("corpus.jsonl", {"_id": "d", "title": {"t": 1}, "text": "x"}, load_corpus,
     "field 'title' must be a string, got an object"),
    ("corpus.jsonl", {"_id": "d", "text": None}, load_corpus, "field 'text' is null"),
    ("corpus.jsonl", {"_id": "d"}, load_corpus, "missing field 'text'"),
    ("corpus.jsonl", ["d", "x"], load_corpus, "expected a JSON object"),
    ("queries.jsonl", {"_id": "q", "text": {"q": 1}}, load_queries, "field 'text' must be a string, got an object"),
    ("queries.jsonl", {"_id": "q", "text": True}, load_queries, "field 'text' must be a string, got a boolean"),
    ("c.jsonl", {"text": {"body": "x"}}, lambda p: list(iter_documents(p)),
     "field 'text' must be a string, got an object"),
    ("c.jsonl", {"text": "x", "title": 3}, lambda p: list(iter_documents(p)),
     "field 'title' must be a string, got a number"),
    ("train.jsonl", {"query": "q", "pos": "p"}, load_training_file, "field 'pos' must be a list of strings"),
    ("train.jsonl", {"query": 3, "pos": ["p"]}, load_training_file, "field 'query' must be a string"),
    ("train.jsonl", {"query": "q", "pos": ["p"], "neg": {"n": 1}}, load_training_file,
     "field 'neg' must be a list of strings"),
    ("train.jsonl", {"query": "q", "pos": ["p", "p2"], "pos_ids": ["a"]}, load_training_file,
     "'pos_ids' holds 1 ids for 2 'pos' passages"),
    ("train.jsonl", {"query": "q", "pos": ["p"], "pos_ids": "a"}, load_training_file,
     "field 'pos_ids' must be a list of ids"),
    ("pairs.jsonl", {"query": "q", "pos": {"p": 1}}, lambda p: list(iter_pairs(p)),
     "field 'pos' must be a string or a non-empty list of strings"),
    ("pairs.jsonl", {"query": ["q"], "pos": "p"}, lambda p: list(iter_pairs(p)), "field 'query' must be a non-empty"),
]


@pytest.mark.parametrize("name, record, read, message", WRONG_TYPES, ids=[f"{c[0]}-{c[3][:28]}" for c in WRONG_TYPES])
def test_fields_of_the_wrong_json_type_are_refused_naming_file_and_line(tmp_path, name, record, read, message):
    path = write(tmp_path / name, jsonl([record]))
    with pytest.raises(DataError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:1: ") and message in str(error.value), str(error.value)


def test_an_id_column_of_numbers_in_a_parquet_corpus_is_refused_naming_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": [1.0, 2.0], "text": ["a", "b"]}), path)
    with pytest.raises(DataError, match=r"c.parquet: row 0: field '_id' must be a string, got a number 1.0"):
        list(iter_documents(path))
    pq.write_table(pa.table({"_id": ["a", "b c"], "text": ["a", "b"]}), path)
    with pytest.raises(DataError, match=r"c.parquet: row 1: field '_id' 'b c' holds a space"):
        list(iter_documents(path))


# 3. qrels headers are recognised by their names only.

def test_a_header_less_qrels_file_keeps_its_first_line(tmp_path):
    assert load_qrels(write(tmp_path / "a.tsv", "q1\td1\t1\nq2\td2\t1\n")) == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert load_qrels(write(tmp_path / "b.tsv", "q1\td1\t1\n")) == {"q1": {"d1": 1}}  # one line: no header to take
    plus = write(tmp_path / "plus.tsv", "q1\td1\t+1\nq2\td2\t1\n")  # before: "+1" is no digit, so line 1 a header
    assert load_qrels(plus) == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert load_qrels(write(tmp_path / "c.txt", "q1 0 d1 2\n")) == {"q1": {"d1": 2}}
    named = write(tmp_path / "d.tsv", "score\tquery-id\tcorpus-id\n1\tq1\td1\n")  # names in another order
    assert load_qrels(named) == {"q1": {"d1": 1}}


@pytest.mark.parametrize("header", ["qid\tdocid\trel", "query_id\tdoc_id\tscore", "query-id\tdoc-id\tscore"])
def test_a_header_of_other_names_is_refused_naming_the_names(tmp_path, header):
    path = write(tmp_path / "qrels.tsv", f"{header}\nq1\td1\t1\n")
    with pytest.raises(DataError, match=r"qrels.tsv:1: relevance grade .* is not an integer \(a header line is "
                                        r"recognised by its names: 'query-id\\tcorpus-id\\tscore'\)"):
        load_qrels(path)


def test_a_header_less_qrels_file_loses_no_judgment_in_evaluate(tmp_path, capsys):
    tiny_beir(tmp_path / "beir")
    qrels = tmp_path / "beir" / "qrels" / "test.tsv"
    write(qrels, "".join(qrels.read_text().splitlines(keepends=True)[1:]))  # the header removed
    run = write(tmp_path / "run.trec", "".join(f"q{i} Q0 d{i} 1 1.0 t\n" for i in range(36, 48)))
    assert list(load_retrieval_set(tmp_path / "beir").qrels)[0] == "q36"  # before: line 1 taken for a header
    assert main(["evaluate", "--data", str(tmp_path / "beir"), "--run", str(run), "--per-query",
                 "--output", str(tmp_path / "r.json")]) == 0
    per_query = json.loads((tmp_path / "r.json").read_text())["per_query"]
    assert sorted(per_query) == sorted(f"q{i}" for i in range(36, 48))


# 4. What is not a regular file: refused in one line naming the path and what it is, before it is opened.

@pytest.fixture()
def make_fifo():
    """Makes named pipes; a writer thread stands ready at each, so that a reader opening one by mistake reads one
    line and ends (the test fails, never hangs); writers never met are released when the test ends."""
    writers: list[tuple[Path, threading.Thread]] = []

    def make(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)

        def writer() -> None:
            with open(path, "w") as handle:
                handle.write('{"_id": "d", "text": "from the pipe"}\n')
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        writers.append((path, thread))
        return path
    yield make
    for path, thread in writers:
        if thread.is_alive():  # never opened: open the reading end to let the writer finish
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            thread.join(5)
            os.close(descriptor)


def _special(kind: str, path: Path, make_fifo: Callable[[Path], Path]) -> Path:
    """A FIFO, or a character device (a link to /dev/null, which ends at once if a regression opened it), at
    `path`."""
    if kind == "fifo":
        return make_fifo(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/null")
    return path


SHORT_MODEL = ["--model", "MODEL", "--max-length", "64"]  # the tiny model reads 128 tokens
# Every option that names an input file or folder of data (models are the model loader's), with the commands'
# other required options; FILE is replaced by the special file.
FILE_OPTIONS = {
    ("bm25", "--corpus"): (".jsonl", ["bm25", "--corpus", "FILE", "--queries", "GOOD/queries.jsonl", "--output", "o"]),
    ("bm25", "--queries"): (".jsonl", ["bm25", "--corpus", "GOOD/corpus.jsonl", "--queries", "FILE", "--output", "o"]),
    ("bm25", "--data"): ("", ["bm25", "--data", "FILE", "--output", "o"]),
    ("encode", "--corpus"): (".jsonl", ["encode", "--model", "MODEL", "--corpus", "FILE", "--output", "o"]),
    ("encode", "--queries"): (".tsv", ["encode", "--model", "MODEL", "--queries", "FILE", "--output", "o"]),
    ("encode", "--input"): (".jsonl", ["encode", "--model", "MODEL", "--input", "FILE", "--output", "o"]),
    ("evaluate", "--data"): ("", ["evaluate", "--data", "FILE", "--run", "GOOD/run.trec"]),
    ("evaluate", "--run"): (".trec", ["evaluate", "--data", "GOOD", "--run", "FILE"]),
    ("search", "--queries"): (".jsonl", ["search", "--index", "INDEX", "--queries", "FILE", "--output", "o"]),
    ("search", "--index"): ("", ["search", "--index", "FILE", "--queries", "GOOD/queries.jsonl", "--output", "o"]),
    ("index", "--embeddings"): ("", ["index", "--embeddings", "FILE", "--output", "o"]),
    ("index", "--corpus"): (".jsonl", ["index", "--embeddings", "EMB", "--hybrid", "--corpus", "FILE",
                                       "--output", "o"]),
    ("search", "--corpus"): (".jsonl", ["search", "--index", "INDEX", "--query", "alpha", "--corpus", "FILE"]),
    ("finetune", "--data"): (".jsonl", ["finetune", "--model", "MODEL", "--data", "FILE", "--output", "o"]),
    ("mine", "--data"): (".jsonl", ["mine", "--model", "MODEL", "--data", "FILE", "--output", "o.jsonl"]),
    ("score", "--data"): (".jsonl", ["score", "--model", "RERANKER", "--data", "FILE", "--output", "o.jsonl"]),
    ("train-reranker", "--data"): (".jsonl", ["train-reranker", "--model", "MODEL", "--data", "FILE", "--output", "o"]),
    ("pretrain", "--corpus"): (".txt", ["pretrain", *SHORT_MODEL, "--corpus", "FILE",
                                        "--output", "o"]),
    ("pretrain", "--pairs"): (".jsonl", ["pretrain", *SHORT_MODEL, "--objective", "contrastive", "--pairs",
                                         "FILE", "--output", "o"]),
    ("pretrain", "--probe"): ("", ["pretrain", *SHORT_MODEL, "--corpus", "GOOD/corpus.jsonl", "--probe", "FILE",
                                   "--output", "o"]),
    ("pretrain", "--probe-sts"): (".tsv", ["pretrain", *SHORT_MODEL, "--corpus", "GOOD/corpus.jsonl",
                                           "--probe-sts", "FILE", "--output", "o"]),
    ("init-model", "--corpus"): (".txt", ["init-model", "--corpus", "FILE", "--output", "o"]),
    ("adapt", "--corpus"): (".jsonl", ["adapt", *SHORT_MODEL, "--pooling", "mean", "--corpus", "FILE",
                                       "--output", "o"]),
    ("adapt", "--validation"): ("", ["adapt", *SHORT_MODEL, "--pooling", "mean", "--corpus",
                                     "GOOD/corpus.jsonl", "--validation", "FILE", "--output", "o"]),
    ("quickstart", "--corpus"): (".txt", ["quickstart", "--corpus", "FILE", "--data", "GOOD", "--output", "o"]),
    ("quickstart", "--data"): ("", ["quickstart", "--data", "FILE", "--output", "o"]),
    ("report", "--variants"): ("", ["report", "--variants", "FILE", "--output", "o.md"]),
    ("bm25", "--config"): (".yaml", ["bm25", "--config", "FILE"]),
}
DATA_DESTS = {"corpus", "queries", "data", "input", "run", "pairs", "probe", "probe_sts", "validation", "embeddings",
              "index", "variants", "config", "train"}
LATE_READERS = {("adapt", "--train")}  # read after the adaptation, see docs/reliability.md


def test_the_table_of_file_options_covers_every_command():
    found = set()
    for command in discover_commands():
        parser = build_parser([command.name])
        sub = next(a for a in parser._actions if a.dest == "command").choices[command.name]
        found |= {(command.name, a.option_strings[-1]) for a in sub._actions if a.dest in DATA_DESTS
                  and a.option_strings and a.option_strings[-1] != "--config"}
    assert found - LATE_READERS <= set(FILE_OPTIONS), found - set(FILE_OPTIONS)


@pytest.fixture()
def good_inputs(tmp_path, tiny_model_dir):
    """A good BEIR folder with a run, and an index of its corpus by the tiny model."""
    good = tmp_path / "good"
    tiny_beir(good)
    write(good / "run.trec", "q40 Q0 d40 1 1.0 t\n")
    emb, index = tmp_path / "emb", tmp_path / "index"
    assert main(["encode", "--model", str(tiny_model_dir), "--pooling", "mean", "--corpus", str(good / "corpus.jsonl"),
                 "--output", str(emb), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(emb), "--output", str(index)]) == 0
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    reranker = tmp_path / "reranker"  # what `score` reads: a cross-encoder with a classifier head
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(reranker)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(reranker)
    return {"GOOD": str(good), "MODEL": str(tiny_model_dir), "INDEX": str(index), "EMB": str(emb),
            "RERANKER": str(reranker)}


def _argv(template: list[str], special: Path, inputs: dict[str, str], tmp_path: Path) -> list[str]:
    argv = []
    for word in template:
        if word == "FILE":
            word = str(special)
        elif word in ("o", "o.jsonl", "o.md"):
            word = str(tmp_path / "out" / word)
        else:  # GOOD/corpus.jsonl -> the good folder's corpus.jsonl
            head, slash, rest = word.partition("/")
            word = inputs[head] + slash + rest if head in inputs else word
        argv.append(word)
    return argv


def _one_error(capsys) -> list[str]:
    """The `retromae: error:` lines a command printed (a deprecation note may come before)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("retromae: error:")]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_every_file_option_refuses_what_is_not_a_regular_file_in_one_line(tmp_path, make_fifo, good_inputs, capsys,
                                                                           kind):
    what = "a named pipe (FIFO)" if kind == "fifo" else "a character device"
    for (command, option), (suffix, template) in FILE_OPTIONS.items():
        special = _special(kind, tmp_path / "inputs" / command / f"{option.strip('-')}{suffix}", make_fifo)
        code = main(_argv(template, special, good_inputs, tmp_path / command / option.strip("-")))
        errors = _one_error(capsys)
        assert code == 2 and len(errors) == 1, (command, option, errors)
        assert errors[0].startswith(f"retromae: error: {special}"), (command, option, errors)
        if suffix:  # a file option says what is there; a folder option may name the file the folder lacks
            assert errors[0].startswith(f"retromae: error: {special}: ") and what in errors[0], (command, errors)


def test_dev_zero_as_a_corpus_or_a_config_file_is_refused_at_once(tmp_path):
    """Before: `--corpus /dev/zero` (and a .txt name linked to it) hung, hashing or reading zeros without end. Run in
    a child process with a timeout, so that a regression fails the test instead of hanging it."""
    link = tmp_path / "zeros.txt"
    link.symlink_to("/dev/zero")
    commands = [["init-model", "--corpus", str(link), "--output", str(tmp_path / "m")],
                ["pretrain", "--model", "m", "--corpus", "/dev/zero", "--output", str(tmp_path / "p"), "--config",
                 "/dev/zero"],
                ["bm25", "--corpus", "/dev/zero", "--queries", "/dev/zero", "--output", str(tmp_path / "r")]]
    script = f"from retromae.cli import main; print([main(argv) for argv in {commands!r}])"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[2, 2, 2]", done.stderr
    errors = done.stderr.strip().splitlines()
    assert errors == [f"retromae: error: {link}: is a character device, not a regular corpus file",
                      "retromae: error: /dev/zero: is a character device, not a regular config file",
                      "retromae: error: /dev/zero: is a character device, not a regular corpus file"]


def test_a_special_file_inside_a_corpus_folder_is_named_not_skipped(tmp_path):
    folder = tmp_path / "corpus"
    write(folder / "a.jsonl", jsonl([{"text": "one"}]))
    (folder / "b.jsonl").symlink_to("/dev/null")
    with pytest.raises(DataError, match=r"b.jsonl: is a character device, not a regular corpus file"):
        list(iter_documents(folder))


def test_every_reader_refuses_a_fifo_before_opening_it(tmp_path, make_fifo):
    readers = [load_corpus, load_queries, load_qrels, read_trec_run, load_sts_pairs, read_id_lines,
               load_training_file, lambda p: list(iter_pairs(p)), lambda p: list(iter_documents(p))]
    for number, read in enumerate(readers):
        fifo = make_fifo(tmp_path / f"pipe{number}.jsonl")
        with pytest.raises(DataError, match=f"{fifo}: is a named pipe \\(FIFO\\), not a regular"):
            read(fifo)


# 5. top-k capped at the corpus size, in one helper.

def test_capped_top_k():
    assert capped_top_k(3_000_000, 150) == 150 and capped_top_k(10, 150) == 10 and capped_top_k(5, 0) == 0
    with pytest.raises(Exception, match="must be positive"):
        capped_top_k(0, 150)


def test_a_top_k_far_beyond_the_corpus_allocates_only_the_corpus(tmp_path):
    """Before: (Q, k) arrays of 3,000,000 columns per query (5.4 GB for 70 queries over 150 documents)."""
    rng = np.random.default_rng(0)
    corpus, queries = rng.standard_normal((150, 8)).astype(np.float32), rng.standard_normal((7, 8)).astype(np.float32)
    index = build_index(corpus, "Flat")
    ids = [str(row) for row in range(150)]
    scores, rows = search(index, queries, 3_000_000, ids=ids)
    assert scores.shape == rows.shape == (7, 150)
    full_scores, full_rows = search(index, queries, 150, ids=ids)
    np.testing.assert_array_equal(rows, full_rows)
    assert search(ExactIndex(8, "ip"), queries, 5, ids=[])[0].shape == (7, 0)  # an empty index: nothing, no error
    engine = BM25().index(["a", "b"], ["red apple", "green apple"])
    assert engine.search({"q": "apple"}, k=3_000_000) == engine.search({"q": "apple"}, k=2)


def test_search_bm25_and_evaluate_with_a_huge_top_k_give_the_corpus_sized_run(tmp_path, good_inputs, capsys):
    good = Path(good_inputs["GOOD"])
    for k in (48, 100_000):  # the most --top-k takes (MAX_TOP_K), far beyond the 48 documents
        assert main(["search", "--index", good_inputs["INDEX"], "--queries", str(good / "queries.jsonl"),
                     "--output", str(tmp_path / f"dense-{k}.trec"), "--top-k", str(k)]) == 0
        assert main(["bm25", "--data", str(good), "--output", str(tmp_path / f"bm25-{k}.trec"), "--top-k", str(k)]) == 0
        assert main(["evaluate", "--data", str(good), "--model", good_inputs["MODEL"], "--pooling", "mean",
                     "--top-k", str(k), "--k-values", "10", "--save-run", str(tmp_path / f"eval-{k}.trec")]) == 0
    for name in ("dense", "bm25", "eval"):
        assert read_trec_run(tmp_path / f"{name}-48.trec") == read_trec_run(tmp_path / f"{name}-100000.trec")


# 6. Every command that reads a format refuses a bad id in it with FILE:LINE, exit 2, before any work.

def _break_line(path: Path, line: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")


FLOAT_ID = json.dumps({"_id": 4983.0, "text": "alpha beta gamma delta"})
BAD_LINES = {  # file: (line, its text, the start of the error after FILE:LINE)
    "corpus.jsonl": (5, FLOAT_ID, "field '_id' must be a string"),
    "queries.jsonl": (5, FLOAT_ID, "field '_id' must be a string"),
    "qrels/test.tsv": (3, "q37 x\td37\t1", "query id 'q37 x' holds a space at character 4"),
}
BAD_ID_COMMANDS = {
    "corpus.jsonl": [["bm25", "--data", "GOOD", "--output", "o"],
                     ["bm25", "--corpus", "GOOD/corpus.jsonl", "--queries", "GOOD/queries.jsonl", "--output", "o"],
                     ["encode", "--model", "MODEL", "--corpus", "GOOD/corpus.jsonl", "--output", "o"],
                     ["evaluate", "--data", "GOOD", "--run", "GOOD/run.trec"],
                     ["evaluate", "--data", "GOOD", "--model", "MODEL", "--pooling", "mean"],
                     ["mine", "--model", "MODEL", "--data", "GOOD", "--split", "train", "--output", "o.jsonl"],
                     ["finetune", "--model", "MODEL", "--data", "GOOD", "--output", "o"],
                     ["train-reranker", "--model", "MODEL", "--data", "GOOD", "--output", "o"],
                     ["pretrain", *SHORT_MODEL, "--corpus", "GOOD/corpus.jsonl", "--output", "o"],
                     ["pretrain", *SHORT_MODEL, "--corpus", "GOOD2/corpus.jsonl", "--probe", "GOOD",
                      "--output", "o"],
                     ["init-model", "--corpus", "GOOD/corpus.jsonl", "--output", "o"],
                     ["adapt", *SHORT_MODEL, "--pooling", "mean", "--corpus", "GOOD/corpus.jsonl", "--output",
                      "o"],
                     ["quickstart", "--data", "GOOD", "--output", "o"]],
    "queries.jsonl": [["bm25", "--data", "GOOD", "--output", "o"],
                      ["encode", "--model", "MODEL", "--queries", "GOOD/queries.jsonl", "--output", "o"],
                      ["search", "--index", "INDEX", "--queries", "GOOD/queries.jsonl", "--output", "o"],
                      ["evaluate", "--data", "GOOD", "--run", "GOOD/run.trec"]],
    "qrels/test.tsv": [["bm25", "--data", "GOOD", "--output", "o"],
                       ["evaluate", "--data", "GOOD", "--run", "GOOD/run.trec"],
                       ["evaluate", "--data", "GOOD", "--model", "MODEL", "--pooling", "mean"],
                       ["mine", "--model", "MODEL", "--data", "GOOD", "--split", "test", "--output", "o.jsonl"],
                       ["pretrain", *SHORT_MODEL, "--corpus", "GOOD2/corpus.jsonl", "--probe", "GOOD",
                        "--probe-split", "test", "--output", "o"],
                       ["adapt", *SHORT_MODEL, "--pooling", "mean", "--corpus", "GOOD2/corpus.jsonl",
                        "--validation", "GOOD", "--output", "o"],
                       ["quickstart", "--data", "GOOD", "--output", "o"]],
}


@pytest.mark.parametrize("file", list(BAD_ID_COMMANDS))
def test_every_command_reading_a_format_refuses_a_bad_id_with_file_and_line(tmp_path, good_inputs, capsys, file):
    """A `_id` of 4983.0 (before: read as the string "4983.0" and its judgments dropped, exit 0), or a qrels id
    holding a space, in each file of a BEIR folder, through every command that reads that file."""
    good2 = tmp_path / "good2"
    tiny_beir(good2)
    inputs = {**good_inputs, "GOOD2": str(good2)}
    path = Path(good_inputs["GOOD"]) / file
    line, text, message = BAD_LINES[file]
    _break_line(path, line, text)
    for number, template in enumerate(BAD_ID_COMMANDS[file]):
        code = main(_argv(template, path, inputs, tmp_path / f"{template[0]}-{number}"))
        errors = _one_error(capsys)
        assert code == 2 and len(errors) == 1, (template, errors)
        assert errors[0].startswith(f"retromae: error: {path}:{line}: {message}"), (template, errors)


def test_commands_reading_runs_training_files_and_ids_txt_refuse_bad_ids(tmp_path, good_inputs, capsys):
    good = Path(good_inputs["GOOD"])
    run = write(tmp_path / "run.trec", "q40 Q0 d40 1 1.0 t\nq41 Q0 d\u202841 1 1.0 t\n")
    train = write(tmp_path / "train.jsonl", jsonl([{"query_id": "q1", "query": "q", "pos": ["p"]},
                                                   {"query_id": 7, "query": "q", "pos": ["p"]}]))
    emb = Path(good_inputs["EMB"])
    ids = (emb / "ids.txt").read_text().splitlines()
    ids[2] = "d2\u2028x"
    write(emb / "ids.txt", "\n".join(ids) + "\n")
    index_ids = Path(good_inputs["INDEX"]) / "ids.txt"
    write(index_ids, index_ids.read_text().replace("d3\n", "d 3\n"))
    cases = [(["evaluate", "--data", str(good), "--run", str(run)], f"{run}:2: "),
             (["finetune", "--model", good_inputs["MODEL"], "--data", str(train), "--output", str(tmp_path / "f")],
              f"{train}:2: field 'query_id' must be a string"),
             (["mine", "--model", good_inputs["MODEL"], "--data", str(train), "--output", str(tmp_path / "m.jsonl")],
              f"{train}:2: field 'query_id' must be a string"),
             (["index", "--embeddings", str(emb), "--output", str(tmp_path / "i")], f"{emb / 'ids.txt'}:3: id "),
             (["search", "--index", good_inputs["INDEX"], "--queries", str(good / "queries.jsonl"), "--output",
               str(tmp_path / "s.trec")], f"{index_ids}: was replaced after the index was written")]  # its generation
    for argv, start in cases:
        code = main(argv)
        errors = _one_error(capsys)
        assert code == 2 and len(errors) == 1 and errors[0].startswith(f"retromae: error: {start}"), (argv, errors)
