"""What an input file or path may be, checked by one rule, early (issue 61 items 3, 4, 5, 9; issue 63 items 4, 8).

- One rule for what a corpus argument names (`data.corpus.corpus_files`), over every command that takes a corpus
  (found in the CLI's registry: each config class's `INPUT_FORMATS`): a BEIR or MS MARCO folder stands for its
  corpus file; a folder holding two corpus files, or a retrieval set's files without a corpus, is refused naming them.
- A corpus whose format is wrong (a Pyserini-style record without 'text' or 'contents') is refused, naming the
  fields accepted, before torch is imported, by every such command; paths in a `--config` file and given to the
  Python API are checked as the command line's are.
- A .tsv corpus or queries file with a header row reads no header as a document or query.
- A repeated id is refused by every reader that keys texts by id, naming the file and line of both occurrences.
- A run that fails before its lasting work hands its output folder back: what it wrote removed, its claim released.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bare_config

from retromae.cli import build_parser, main
from retromae.data.corpus import iter_corpus
from retromae.data.fields import read_id_lines
from retromae.data.inputs import CHECKS, declared_formats
from retromae.data.retrieval_sets import load_corpus, load_queries
from retromae.data.training_groups import read_training_records
from retromae.preflight import check_inputs
from retromae.runtime.errors import DataError
from retromae.runtime.options import MODEL_READS, REQUIRED, build_config, reading_options

COMMANDS = {name: parser.config_class for name, parser in build_parser()._subparsers._group_actions[0].choices.items()}
CORPUS_COMMANDS = sorted(name for name, cls in COMMANDS.items() if "corpus" in declared_formats(cls))
# What makes --corpus act where another option decides (`index --corpus` is read with --hybrid; `search --corpus`
# shows the texts of a --query search); the rest of each command line comes from its config class's required options.
CORPUS_ACTS_WITH = {"bm25": ["--queries", "Q"], "index": ["--hybrid"], "search": ["--query", "q"],
                    "pretrain": ["--model", "M"]}
PYSERINI_WITHOUT_TEXT = {"id": "d1", "body": "a document"}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "bert"}))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_jsonl(beir / "corpus.jsonl", [{"_id": f"d{i}", "title": "t", "text": f"text {i}"} for i in range(3)])
    write_jsonl(beir / "queries.jsonl", [{"_id": "q1", "text": "a question"}])
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return {"M": model, "Q": beir / "queries.jsonl", "R": tmp_path / "run.trec", "beir": beir,
            "bad": write_jsonl(tmp_path / "bad.jsonl", [PYSERINI_WITHOUT_TEXT]), "tmp": tmp_path}


def command_line(name: str, files: dict[str, Path], corpus: Path) -> list[str]:
    """`retromae NAME` with each required option of its config class filled (a model folder, an existing folder, an
    output), what makes --corpus act, and --corpus."""
    argv = [name]
    for field in dataclasses.fields(COMMANDS[name]):
        if field.name == "corpus" or field.default is not REQUIRED or field.default_factory is not dataclasses.MISSING:
            continue
        value = files["M"] if field.metadata.get("reads") in MODEL_READS else files["tmp"] / f"out-{name}" \
            if field.name == "output" else files["tmp"]
        argv += [f"--{field.name.replace('_', '-')}", str(value)]
    argv += [str(files.get(arg, arg)) for arg in CORPUS_ACTS_WITH.get(name, [])]
    return [*argv, "--corpus", str(corpus)]


def test_the_registry_has_the_commands_that_take_a_corpus():
    assert CORPUS_COMMANDS == ["adapt", "bm25", "encode", "index", "init-model", "pretrain", "quickstart", "search"]


def test_every_command_refuses_a_corpus_of_another_format_before_torch_naming_the_fields_accepted(files, capsys):
    """One interpreter runs every command that takes a corpus on a record without 'text' or 'contents': one line
    naming the file, the line and the fields accepted, exit 2, and no torch. `pretrain` builds its options with
    torch (issue 64, item 6), so it is run here, in the test's process: only its line is checked."""
    TORCH_AT_ITS_OPTIONS = {"pretrain"}
    lines = [command_line(name, files, files["bad"]) for name in CORPUS_COMMANDS if name not in TORCH_AT_ITS_OPTIONS]
    code = ("import io, json, sys; from contextlib import redirect_stderr; from retromae.cli import main\n"
            "rows = []\n"
            f"for argv in {lines!r}:\n"
            "    err = io.StringIO()\n"
            "    with redirect_stderr(err): status = main(argv)\n"
            "    heavy = sorted({'torch', 'transformers'} & set(sys.modules))\n"
            "    rows.append([argv[0], status, err.getvalue().strip(), heavy])\n"
            "print(json.dumps(rows))")
    rows = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.splitlines()[-1])
    for name in sorted(TORCH_AT_ITS_OPTIONS):
        status = main(command_line(name, files, files["bad"]))
        rows.append([name, status, capsys.readouterr().err.strip(), []])
    assert sorted(row[0] for row in rows) == CORPUS_COMMANDS
    for name, status, message, heavy in rows:
        assert status == 2, (name, message)
        assert message == (f"retromae: error: {files['bad']}:1: missing field 'text' or 'contents'; a document is a "
                           "JSON object with its text in 'text' (BEIR: '_id', optional 'title', 'text') or in "
                           "'contents' (Pyserini: 'id', 'contents') (this one holds 'id', 'body')"), name
        assert heavy == [], name


def config_of(name: str, files: dict[str, Path], corpus: Path):
    """The config `retromae NAME ... --corpus CORPUS` builds (its command line as above)."""
    args = build_parser(command_line(name, files, corpus)).parse_args(command_line(name, files, corpus))
    values = {key: value for key, value in vars(args).items() if key not in ("handler", "options_class", "command",
                                                                             "verbose", "threads")}
    return build_config(COMMANDS[name], values)


@pytest.mark.parametrize("name", CORPUS_COMMANDS)
def test_every_command_reads_a_corpus_folder_by_the_one_rule(name, files):
    """A BEIR folder stands for its corpus.jsonl (before: `encode --corpus FOLDER` said "not a regular file"); a
    folder holding two corpus files, or queries and qrels without a corpus, is refused naming what it holds."""
    check_inputs(config_of(name, files, files["beir"]))
    both = files["tmp"] / "both"
    both.mkdir()
    write_jsonl(both / "corpus.jsonl", [{"_id": "d1", "text": "x"}])
    (both / "collection.tsv").write_text("d1\tx\n")
    with pytest.raises(DataError, match=r"both: holds corpus.jsonl and collection.tsv; a corpus folder holds one"):
        check_inputs(config_of(name, files, both))
    (files["beir"] / "corpus.jsonl").rename(files["tmp"] / "moved.jsonl")
    with pytest.raises(DataError, match=r"beir: holds queries.jsonl, qrels but no corpus file"):
        check_inputs(config_of(name, files, files["beir"]))


@pytest.mark.parametrize("name", CORPUS_COMMANDS)
def test_every_command_reads_a_tsv_corpus_with_a_header_row_without_the_header(name, files):
    corpus = files["tmp"] / "corpus.tsv"
    corpus.write_text("id\ttitle\ttext\nd1\tT\thello\nd2\tU\tworld\n")
    check_inputs(config_of(name, files, corpus))
    corpus.write_text("id\theadline\ttext\nd1\tT\thello\n")
    with pytest.raises(DataError, match=r"corpus.tsv:1: a header row .* names 'headline', no column a .tsv corpus"):
        check_inputs(config_of(name, files, corpus))


@pytest.mark.parametrize(("header", "rows"), [("id\ttitle\ttext", "d1\tT\thello\nd2\tU\tworld"),
                                              ("id\ttext", "d1\thello\nd2\tworld"),
                                              ("docid\ttext\ttitle", "d1\thello\tT\nd2\tworld\tU"),
                                              ("_id\tcontents", "d1\thello\nd2\tworld")])
def test_a_tsv_header_row_is_read_as_the_columns_names(tmp_path, header, rows):
    path = tmp_path / "corpus.tsv"
    path.write_text(f"{header}\n{rows}\n")
    corpus = load_corpus(path)
    assert list(corpus) == ["d1", "d2"] and corpus["d1"].text == "hello"
    assert [document.doc_id for document in iter_corpus([path])] == ["d1", "d2"]  # pre-training reads it alike
    queries = tmp_path / "queries.tsv"
    queries.write_text("qid\tquery\nq1\ta question\n")
    assert load_queries(queries) == {"q1": "a question"}


def test_pyserini_contents_are_read_and_both_text_fields_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d1", "contents": "hello"}])
    assert load_corpus(path)["d1"].text == "hello"
    write_jsonl(path, [{"id": "d1", "contents": "hello", "text": "other"}])
    with pytest.raises(DataError, match="docs.jsonl:1: both 'text' and 'contents' given"):
        load_corpus(path)


def test_missing_field_errors_name_the_fields_accepted(tmp_path):
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "query": "x"}])
    with pytest.raises(DataError, match=r"queries.jsonl:1: missing field 'text'; a query is a JSON object with '_id' "
                                        r"\(or 'id'\) and 'text' .*\(this one holds '_id', 'query'\)"):
        load_queries(queries)
    training = write_jsonl(tmp_path / "train.jsonl", [{"question": "x", "pos": ["p"]}])
    with pytest.raises(DataError, match=r"train.jsonl:1: missing field 'query'; a training line is a JSON object "):
        list(read_training_records(training))


# Each reader that keys texts by id, with a file giving the id "a" on lines 1 and 3 (line 2 another id); every
# format of `data.inputs.CHECKS` is here, or among those that key nothing by id (`NOT_KEYED`).
def _reader_cases(tmp_path: Path) -> dict[str, tuple]:
    def jsonl(name, records):
        return write_jsonl(tmp_path / name, records)

    def text(name, content):
        (tmp_path / name).write_text(content)
        return tmp_path / name

    docs = [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}, {"_id": "a", "text": "z"}]
    training = [{"query_id": "a", "query": "x", "pos": ["p"]}, {"query_id": "b", "query": "y", "pos": ["p"]},
                {"query_id": "a", "query": "z", "pos": ["p"]}]
    from retromae.adaptation.data import read_documents
    return {
        "corpus (JSON lines)": ("corpus", jsonl("corpus.jsonl", docs), load_corpus),
        "corpus (.tsv)": ("corpus", text("collection.tsv", "a\tx\nb\ty\na\tz\n"), load_corpus),
        "queries (JSON lines)": ("queries", jsonl("queries.jsonl", docs), load_queries),
        "queries (.tsv)": ("queries", text("queries.tsv", "a\tx\nb\ty\na\tz\n"), load_queries),
        "documents (adapt's corpus)": ("documents", jsonl("adapt.jsonl", docs), lambda p: read_documents([str(p)])),
        "training file (query_id)": ("training file", jsonl("train.jsonl", training),
                                     lambda p: list(read_training_records(p))),
        "ids.txt (embeddings, indexes)": ("ids", text("ids.txt", "a\nb\na\n"), read_id_lines),
    }


NOT_KEYED = {"pairs": "pairs name no ids", "sts": "pairs name no ids",
             "run": "ids per query; a document twice for one query is refused naming its line (read_trec_run)",
             "retrieval set": "its corpus and queries: the readers above", "retrieval sets": "the same",
             "training data": "a training file or a retrieval set: the readers above"}


def test_every_format_read_by_id_has_its_repeated_id_case(tmp_path):
    covered = {kind for kind, _, _ in _reader_cases(tmp_path).values()}
    assert set(CHECKS) <= covered | set(NOT_KEYED)


@pytest.mark.parametrize("case", [
    "corpus (JSON lines)", "corpus (.tsv)", "queries (JSON lines)", "queries (.tsv)", "documents (adapt's corpus)",
    "training file (query_id)", "ids.txt (embeddings, indexes)"])
def test_every_reader_refuses_a_repeated_id_naming_both_lines(tmp_path, case):
    _, path, read = _reader_cases(tmp_path)[case]
    with pytest.raises(DataError, match=rf"{path.name}:3: (query )?id 'a' was given before, at {path}:1; "):
        read(path)


def test_a_corpus_folder_of_several_files_refuses_an_id_given_in_two_of_them(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [{"_id": "x", "text": "one"}])
    write_jsonl(folder / "b.jsonl", [{"_id": "y", "text": "two"}, {"_id": "x", "text": "three"}])
    with pytest.raises(DataError, match=rf"b.jsonl:2: id 'x' was given before, at {folder / 'a.jsonl'}:1"):
        load_corpus(folder)


def test_encode_from_python_refuses_repeated_ids_naming_the_rows():
    from retromae.retrieval.encode import _check_ids

    with pytest.raises(DataError, match=r"row 2 of the ids: id 'a' was given before, at row 0 of the ids"):
        _check_ids(["a", "b", "a"], ["x", "y", "z"])




@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_input_option_of_every_config_is_checked_by_the_one_preflight(name, tmp_path):
    """Every input option of every command's config, holding a missing path, is refused by `check_config` naming the
    option: the check `configured` runs after merging a `--config` file, and the Python API on every call."""
    from retromae.preflight import check_config

    options = list(reading_options(COMMANDS[name], ("path",)))
    for option in options:
        with pytest.raises(DataError, match=f"^--{option.replace('_', '-')} {tmp_path / 'nope'}: no such file"):
            check_config(bare_config(COMMANDS[name], **{option: str(tmp_path / "nope")}))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_entry_point_of_the_api_checks_its_config_first(name, monkeypatch):
    import retromae.api

    class Checked(Exception):
        pass

    def check(config):
        raise Checked(type(config).__name__)

    monkeypatch.setattr(retromae.api, "check_config", check)
    with pytest.raises(Checked, match=COMMANDS[name].__name__):
        getattr(retromae, name.replace("-", "_"))(bare_config(COMMANDS[name]))


@pytest.mark.parametrize(("name", "option", "yaml"), [("adapt", "train", "train"), ("encode", "corpus", "corpus"),
                                                      ("pretrain", "probe", "probe")])
def test_a_missing_path_in_a_config_file_is_answered_before_torch(name, option, yaml, files, tmp_path, capsys):
    """The issue's YAML keys through the command line: one line naming the option; torch not imported (checked in a
    fresh interpreter, but for `pretrain`, which builds its options with torch: issue 64, item 6)."""
    config = tmp_path / "options.yaml"
    config.write_text(f"{yaml}: {tmp_path / 'nope'}\n")
    argv = command_line(name, files, files["beir"])
    argv = [*(argv[:-2] if option == "corpus" else argv), "--config", str(config)]
    if name == "pretrain":
        out = [f"{main(argv)} {capsys.readouterr().err.strip()}", "[]"]
    else:
        code = ("import io, sys; from contextlib import redirect_stderr; from retromae.cli import main\n"
                "err = io.StringIO()\n"
                f"with redirect_stderr(err): status = main({argv!r})\n"
                "print(status, err.getvalue().strip()); print(sorted({'torch', 'transformers'} & set(sys.modules)))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert out == [f"2 retromae: error: --{option} {tmp_path / 'nope'}: no such file or folder", "[]"]


def test_the_api_checks_a_missing_train_path_without_importing_torch(tmp_path, files):
    code = ("import sys, retromae\n"
            "try:\n"
            f"    retromae.adapt(model={str(files['M'])!r}, corpus=[{str(files['beir'])!r}], "
            f"output={str(tmp_path / 'out')!r}, train='/nope')\n"
            "except Exception as error: print(type(error).__name__, error)\n"
            "print(sorted({'torch', 'transformers'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["DataError --train /nope: no such file or folder", "[]"]


@pytest.mark.parametrize("reader", ["adapt", "pretrain", "init-model", "quickstart"])
def test_an_empty_corpus_is_refused_in_one_line_by_every_command_reading_documents(reader, files, capsys):
    empty = files["tmp"] / "empty.jsonl"
    empty.write_text("\n" + json.dumps({"text": "  "}) + "\n")
    assert main(command_line(reader, files, empty)) == 2
    assert capsys.readouterr().err.strip() == (f"retromae: error: {empty}: empty corpus: no document holds any "
                                                "text; give a corpus with documents")


def test_a_failed_index_hands_its_folder_back_and_the_same_command_then_runs(files, tiny_model_dir, monkeypatch,
                                                                             capsys):
    """The disk fills while `index` writes (its writer raises ENOSPC): one line, its partial files, marker and lock
    removed, the folder it made gone; the same command then runs (before: "holds the outputs of another run")."""
    import retromae.retrieval.index as index_module

    embeddings, output = files["tmp"] / "emb", files["tmp"] / "idx"
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(files["beir"]), "--output",
                 str(embeddings), "--no-progress"]) == 0
    real = index_module.write_text_atomic

    def full_disk(path, *args, **kwargs):
        if Path(path).name == "ids.txt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(index_module, "write_text_atomic", full_disk)
    assert main(["index", "--embeddings", str(embeddings), "--output", str(output)]) == 1
    assert capsys.readouterr().err.strip().endswith("ids.txt: No space left on device")
    assert not output.exists()
    monkeypatch.setattr(index_module, "write_text_atomic", real)
    assert main(["index", "--embeddings", str(embeddings), "--output", str(output)]) == 0


def test_the_names_of_the_rule_are_the_readers_names():
    from retromae.data.corpus import CORPUS_NAMES
    from retromae.data.inputs import EMBEDDINGS_INFO
    from retromae.evaluation.config import CORPUS_FILES
    from retromae.retrieval.encode import INFO_FILE
    from retromae.runtime.run_folder import READ_IN_FOLDERS

    assert EMBEDDINGS_INFO == INFO_FILE and CORPUS_FILES == CORPUS_NAMES
    assert set(CORPUS_NAMES) <= set(READ_IN_FOLDERS)  # an output never goes over a corpus file an input folder holds


def test_a_pretraining_failing_before_its_first_step_hands_its_folder_back(tiny_model_dir, tiny_corpus, tmp_path,
                                                                          monkeypatch, capsys):
    """The disk fills when `pretrain` writes its config.json (after it claimed the folder, before its first step:
    the training loop writes it once a resume is checked): nothing of it is left (marker, lock, config, the folder it
    made), and the same command then runs."""
    import retromae.training.loop as loop

    output = tmp_path / "run"
    argv = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(output),
            "--max-length", "32", "--batch-size", "4", "--max-steps", "1", "--save-every", "0", "--cache-dir",
            str(tmp_path / "cache")]

    def full_disk(config, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(loop, "save_config", full_disk)
    assert main(argv) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"retromae: error: {output / 'config.json'}: No "
                                                                "space left on device")
    assert not output.exists()
    monkeypatch.undo()
    assert main(argv) == 0


# Inputs that are folders retromae wrote (an encoding: --embeddings, --recall-queries; an index, a run, report
# variants) and that their own readers check when they open them; `--input`, the old spelling of --corpus/--queries.
OWN_FOLDERS = {"embeddings", "recall_queries", "index", "init_from", "variants", "input"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_input_option_declares_the_format_it_is_read_in(name):
    options = set(reading_options(COMMANDS[name], ("path",)))
    undeclared = options - set(declared_formats(COMMANDS[name])) - OWN_FOLDERS
    assert not undeclared, f"{name}: declare the format of {undeclared} in its config class's INPUT_FORMATS"
    assert {kind for kind, _ in declared_formats(COMMANDS[name]).values()} <= set(CHECKS)
