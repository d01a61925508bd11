"""Hostile inputs of the parsers (audit sections 3, 4 and 13): JSON text that the parser cannot turn into a value (an
array nested 100,000 deep, an integer of 5,000 digits), a lone surrogate from a `\\ud800` escape, a key given twice,
in every JSON-lines reader, every JSON file and the `--config` file; numbers of text fields that Python's int() and
float() would take but that are not plain decimal notation (`1_000`, `٣`, `１`); a `--split` that is a path. Each is
refused in one line naming the file, the line and the field, through `runtime.lines.loads_finite` (the one JSON
parser), `runtime.lines.finite_number` / `integer_field` (the numbers of text fields) and `data.retrieval_sets.
check_split`."""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

from retromae.cli import build_parser, discover_commands, main
from retromae.data.corpus import iter_documents
from retromae.data.pairs import iter_pairs
from retromae.data.retrieval_sets import (
    load_corpus,
    load_qrels,
    load_queries,
    load_retrieval_set,
    load_sts_pairs,
    read_trec_run,
)
from retromae.data.token_store import TokenStore
from retromae.data.training_groups import load_training_file
from retromae.evaluation.experiments import read_metrics, read_variant
from retromae.finetuning.negatives import load_latest_negatives
from retromae.models.model_source import resolve_model
from retromae.retrieval.encode import load_embeddings
from retromae.retrieval.index import load_index
from retromae.runtime.errors import RetroMAEError
from retromae.runtime.lines import MAX_NESTING, loads_finite, read_json_file
from retromae.runtime.options import ConfigError, load_config_file

DEEP = "[" * 100_000 + "]" * 100_000
BIG_INTEGER = "1" + "0" * 5_000
HOSTILE_VALUES = {"deep": (DEEP, "arrays or objects nested more than 100 levels deep"),
                  "nested 101": ("[" * 101 + "]" * 101, "arrays or objects nested more than 100 levels deep"),
                  "big integer": (BIG_INTEGER, "a number of more than 4300 digits")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def with_field(record: dict, name: str, json_text: str) -> str:
    """`record` as one JSON line whose field `name` is `json_text` as it is (a duplicate when `name` is already in
    it: the text is written, not a dict)."""
    return json.dumps(record)[:-1] + f', "{name}": {json_text}}}'


# 1. Every JSON-lines reader: what the parser cannot make a value of, a lone surrogate, a key given twice.

def _beir_folder(part: str) -> Callable[[Path], object]:
    def read(path: Path) -> object:
        other = "queries.jsonl" if part == "corpus.jsonl" else "corpus.jsonl"
        write(path.parent / other, json.dumps({"_id": "q1" if other == "queries.jsonl" else "d1", "text": "t"}) + "\n")
        write(path.parent / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
        return load_retrieval_set(path.parent)
    return read


LINE_READERS: dict[str, tuple[str, dict, str, Callable[[Path], object]]] = {
    # name: (file, a good record, its string field a surrogate goes in, reader)
    "BEIR corpus": ("corpus.jsonl", {"_id": "d1", "title": "", "text": "t"}, "_id", load_corpus),
    "BEIR queries": ("queries.jsonl", {"_id": "q1", "text": "q"}, "text", load_queries),
    "BEIR folder corpus": ("beir/corpus.jsonl", {"_id": "d1", "text": "t"}, "text", _beir_folder("corpus.jsonl")),
    "BEIR folder queries": ("beir/queries.jsonl", {"_id": "q1", "text": "q"}, "_id", _beir_folder("queries.jsonl")),
    "pre-training corpus": ("c.jsonl", {"id": "d1", "text": "t"}, "text", lambda p: list(iter_documents(p))),
    "training file": ("train.jsonl", {"query": "q", "pos": ["p"], "neg": ["n"]}, "query", load_training_file),
    "pairs file": ("pairs.jsonl", {"query": "q", "pos": "p"}, "pos", lambda p: list(iter_pairs(p))),
    "metrics.jsonl": ("metrics.jsonl", {"step": 1, "loss": 2.0}, "note", read_metrics),
}


@pytest.mark.parametrize("value", list(HOSTILE_VALUES))
@pytest.mark.parametrize("reader", list(LINE_READERS))
def test_every_json_lines_reader_refuses_what_the_parser_cannot_read_naming_file_and_line(tmp_path, reader, value):
    name, record, _, read = LINE_READERS[reader]
    text, message = HOSTILE_VALUES[value]
    path = write(tmp_path / name, json.dumps(record) + "\n" + with_field(record, "n", text) + "\n")
    with pytest.raises(RetroMAEError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:2: {message}"), str(error.value)[:300]


@pytest.mark.parametrize("reader", list(LINE_READERS))
def test_every_json_lines_reader_refuses_a_lone_surrogate_naming_file_line_and_field(tmp_path, reader):
    name, record, field, read = LINE_READERS[reader]
    poisoned = with_field({key: value for key, value in record.items() if key != field}, field, '"a\\ud800b"')
    path = write(tmp_path / name, json.dumps(record) + "\n" + poisoned + "\n")
    with pytest.raises(RetroMAEError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:2: field '{field}' is not Unicode text: it holds a lone surrogate")
    str(error.value).encode("utf-8")  # the refusal itself can be printed


@pytest.mark.parametrize("reader", list(LINE_READERS))
def test_every_json_lines_reader_refuses_a_key_given_twice_naming_file_line_and_key(tmp_path, reader):
    name, record, _, read = LINE_READERS[reader]
    key = next(iter(record))
    path = write(tmp_path / name, json.dumps(record) + "\n" + with_field(record, key, json.dumps(record[key])) + "\n")
    with pytest.raises(RetroMAEError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:2: {key} given twice"), str(error.value)[:300]


@pytest.mark.parametrize("text, field", [
    ('{"_id": "d1", "text": "t", "meta": {"title": ["x", "\\udc80"]}}', "meta.title[1]"),
    ('["ok", "\\uDFFF"]', "[1]"),
    ('{"a\\ud800": 1}', None),
])
def test_the_field_of_a_lone_surrogate_is_named_by_its_path(text, field):
    with pytest.raises(ValueError) as error:
        loads_finite(text)
    expected = f"field '{field}'" if field else "the key 'a\\ud800'"
    assert str(error.value).startswith(f"{expected} is not Unicode text")


def test_what_the_parser_still_takes():
    assert loads_finite('{"t": "\\ud83d\\ude00", "n": 1' + "0" * 400 + "}")["t"] == "\U0001F600"  # a pair: one
    deepest = loads_finite("[" * MAX_NESTING + "]" * MAX_NESTING)
    for _ in range(MAX_NESTING - 1):
        [deepest] = deepest
    assert deepest == []
    assert loads_finite('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}') == {"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}


def test_a_surrogate_in_a_corpus_stops_bm25_and_encode_before_any_work(tmp_path, tiny_model_dir, capsys):
    """The audit's crashes: `bm25` wrote nothing after a whole search (UnicodeEncodeError in write_trec_run),
    `encode` crashed fingerprinting the texts; each now says the file, line and field, and writes nothing."""
    tiny_beir(tmp_path / "beir")
    corpus = write(tmp_path / "corpus.jsonl", '{"_id": "d\\ud800", "text": "apple"}\n')
    queries = str(tmp_path / "beir" / "queries.jsonl")
    for argv in (["bm25", "--corpus", str(corpus), "--queries", queries, "--output", str(tmp_path / "run.trec")],
                 ["encode", "--model", str(tiny_model_dir), "--pooling", "mean", "--corpus", str(corpus),
                  "--output", str(tmp_path / "emb")]):
        assert main(argv) == 2
        errors = capsys.readouterr().err.strip().splitlines()
        assert errors == [f"retromae: error: {corpus}:1: field '_id' is not Unicode text: it holds a lone surrogate "
                          "(a JSON \\ud800-\\udfff escape not paired as UTF-16)"], argv
    assert not (tmp_path / "run.trec").exists() and not (tmp_path / "emb").exists()


# 2. Every JSON file read whole: run and model folders' files, and the config file.

def _embeddings_folder(path: Path) -> object:
    write(path.parent / "ids.txt", "d1\n")
    np.save(path.parent / "embeddings.npy", np.zeros((1, 4), dtype=np.float32))
    return load_embeddings(path.parent)


def _model_folder(path: Path) -> object:
    return resolve_model(str(path.parent))


JSON_FILES: dict[str, tuple[str, Callable[[Path], object]]] = {
    # name: (file, reader of the file or of its folder)
    "index.json": ("index/index.json", lambda p: load_index(p.parent)),
    "encode.json": ("emb/encode.json", _embeddings_folder),
    "model config.json": ("model/config.json", _model_folder),
    "token store meta.json": ("store/meta.json", lambda p: TokenStore(p.parent)),
    "evaluation results": ("variant/eval/beir.json", lambda p: read_variant(p.parent.parent)),
    "mined negatives": ("run/negatives/step-5.json", lambda p: load_latest_negatives(None, p.parent.parent, 5)),
    "a run folder's JSON": ("info.json", read_json_file),
    "--config (JSON)": ("run.json", load_config_file),
}


@pytest.mark.parametrize("value", list(HOSTILE_VALUES) + ["surrogate", "key twice"])
@pytest.mark.parametrize("reader", list(JSON_FILES))
def test_every_json_file_refuses_what_the_parser_cannot_read_naming_the_file(tmp_path, reader, value):
    name, read = JSON_FILES[reader]
    text, message = HOSTILE_VALUES.get(value, (None, None))
    if value == "surrogate":
        text, message = '"\\udfff"', "field 'n' is not Unicode text: it holds a lone surrogate"
    body = '{"n": 1, "n": 2}' if value == "key twice" else '{"n": ' + text + '}'
    if reader == "mined negatives":
        body = f"[{body}]"
        message = message and message.replace("'n'", "'[0].n'")
    path = write(tmp_path / name, body)
    with pytest.raises(RetroMAEError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}: {message or 'n given twice'}"), str(error.value)[:300]


# 3. The --config file, YAML too: deep nesting, a complex key, a 5,000-digit integer, an alias bomb.

@pytest.mark.parametrize("name, text, message", [
    ("deep.yaml", "top_k: " + "[" * 20_000 + "]" * 20_000 + "\n", "mappings or lists nested more than 100 levels"),
    ("nested.yaml", "top_k: " + "[" * 101 + "]" * 101 + "\n", "arrays or objects nested more than 100 levels"),
    ("key.yaml", "? [a, b]\n: 1\n", "line 1: a key must be a name, not a list"),
    ("bomb.yaml", "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))
     + "tag: [*i, *i]\n", "its values, with YAML aliases expanded, hold more than 10,000,000"),
    ("loop.yaml", "tag: &a [*a]\n", "arrays or objects nested more than 100 levels"),
    ("deep.json", '{"top_k": ' + DEEP + "}", "arrays or objects nested more than 100 levels deep"),
    ("big.json", '{"top_k": ' + BIG_INTEGER + "}", "a number of more than 4300 digits"),
    ("twice.json", '{"top_k": 1, "top_k": 2}', "top_k given twice"),
])
def test_a_config_file_the_parser_cannot_read_is_refused_naming_it(tmp_path, capsys, name, text, message):
    path = write(tmp_path / name, text)
    with pytest.raises(ConfigError) as error:
        load_config_file(path)
    assert str(error.value).startswith(f"{path}: {message}"), str(error.value)[:300]
    beir = tmp_path / "beir"
    tiny_beir(beir)
    assert main(["bm25", "--config", str(path), "--data", str(beir), "--output", str(tmp_path / "o.trec")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"retromae: error: {error.value}"]
    assert not (tmp_path / "o.trec").exists()


def test_yaml_aliases_of_a_reasonable_size_still_work(tmp_path):
    path = write(tmp_path / "run.yaml", "corpus: &c [a.jsonl, b.jsonl]\nother: *c\n")
    assert load_config_file(path) == {"corpus": ["a.jsonl", "b.jsonl"], "other": ["a.jsonl", "b.jsonl"]}


# 4. Numbers of text fields: plain ASCII decimal notation only, over every reader of them.

NOT_PLAIN = ["1_0", "٣", "１", "1e", "0x10", "1.5.2", "--1", "½"]
TEXT_NUMBER_READERS: dict[str, tuple[str, Callable[[str], str], Callable[[Path], object], str]] = {
    # name: (file, a line with the number, reader, what the refusal calls it)
    "qrels grade (BEIR)": ("qrels.tsv", lambda n: f"query-id\tcorpus-id\tscore\nq1\td1\t{n}\n", load_qrels,
                           "relevance grade"),
    "qrels grade (TREC)": ("qrels.txt", lambda n: f"q1 0 d0 1\nq1 0 d1 {n}\n", load_qrels, "relevance grade"),
    "run score": ("run.trec", lambda n: f"q1 Q0 d0 1 1.5 t\nq1 Q0 d1 2 {n} t\n", read_trec_run, "score"),
    "run rank": ("run.trec", lambda n: f"q1 Q0 d0 1 1.5 t\nq1 Q0 d1 {n} 1.0 t\n", read_trec_run, "rank"),
    "STS score": ("sts.csv", lambda n: f"g\tf\t2012\t1\t2.5\tA\tB\ng\tf\t2012\t2\t{n}\tA\tB\n", load_sts_pairs,
                  "score"),
}


@pytest.mark.parametrize("number", NOT_PLAIN)
@pytest.mark.parametrize("reader", list(TEXT_NUMBER_READERS))
def test_every_text_number_reader_takes_plain_decimal_notation_only(tmp_path, reader, number):
    name, lines, read, what = TEXT_NUMBER_READERS[reader]
    path = write(tmp_path / name, lines(number))
    with pytest.raises(RetroMAEError) as error:
        read(path)
    assert str(error.value).startswith(f"{path}:2: {what} {number!r} is not a"), str(error.value)


@pytest.mark.parametrize("reader", list(TEXT_NUMBER_READERS))
def test_every_text_number_reader_still_takes_plain_numbers(tmp_path, reader):
    name, lines, read, what = TEXT_NUMBER_READERS[reader]
    integer = "grade" in reader or "rank" in reader
    assert read(write(tmp_path / name, lines(" +3" if integer else "-0.5e1")))
    for spelling in () if integer else ("nan", "-Infinity"):  # refused as not finite, as before
        with pytest.raises(RetroMAEError, match=f":2: {what} '{spelling}' is not finite"):
            read(write(tmp_path / name, lines(spelling)))


def test_a_qrels_grade_in_unicode_digits_stops_evaluate_naming_the_file(tmp_path, capsys):
    tiny_beir(tmp_path / "beir")
    qrels = tmp_path / "beir" / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("\t1\n", "\t1_0\n", 1))
    write(tmp_path / "run.trec", "q1 Q0 d1 1 1.0 t\n")
    assert main(["evaluate", "--data", str(tmp_path / "beir"), "--run", str(tmp_path / "run.trec")]) == 2
    [error] = capsys.readouterr().err.strip().splitlines()
    assert error.startswith(f"retromae: error: {qrels}:") and "relevance grade '1_0' is not an integer" in error


# 5. A split is a name: every command's split option refuses a path, before any work.

def split_options() -> list[tuple[str, str]]:
    """(command, flag) of every option naming a qrels split."""
    found = []
    for command in discover_commands():
        parser = build_parser([command.name])
        sub = next(a for a in parser._actions if a.dest == "command").choices[command.name]
        found += [(command.name, action.option_strings[-1]) for action in sub._actions
                  if action.dest.endswith("split") and action.option_strings]
    return found


@pytest.mark.parametrize("split", ["../qrels/test", "qrels/test", "..", "a\\b", "", "/etc/passwd"])
def test_every_split_option_refuses_a_path(capsys, split):
    options = split_options()
    assert {("bm25", "--split"), ("evaluate", "--split"), ("mine", "--split"), ("finetune", "--split"),
            ("train-reranker", "--split"), ("pretrain", "--probe-split"), ("adapt", "--validation-split"),
            ("adapt", "--train-split")} <= set(options)
    for command, flag in options:
        assert main([command, f"{flag}={split}"]) == 2, (command, flag)
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"retromae: error: {flag}: a split is a name such as test or dev, not a path"), error


def test_the_library_refuses_a_split_that_is_a_path_too(tmp_path):
    tiny_beir(tmp_path / "beir")
    with pytest.raises(ConfigError, match="--split: a split is a name"):
        load_retrieval_set(tmp_path / "beir", split="../qrels/test")
    assert load_retrieval_set(tmp_path / "beir", split="test")
