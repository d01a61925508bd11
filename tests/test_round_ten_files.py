"""Round ten: which files a corpus argument reads, and a run's identity over exactly those (audit 11, F and G).

- F: a folder of corpus files left out its `.jsonl.gz` / `.tsv.gz` shards (read when named alone) and skipped a
  `.jsonl.zst` in silence; it read a hidden `.notes.jsonl` as corpus; one file named twice (`a.jsonl ./a.jsonl`, a
  link, a file beside its folder) was trained on twice. A folder's files are now those a file named alone is read as
  (`data.corpus.folder_files`), hidden ones skipped with a note, and a file reached twice refused naming both
  (`runtime.input_files.read_once`, the rule `evaluate --data` shares).
- G: `input_fingerprint` did not enter a linked folder (`qrels -> ../shared/qrels`) and took `hf:LOCAL_FOLDER` by
  its name, so a resume after such an input changed went on with the new data. It now fingerprints the files the
  readers reach (`runtime.input_files.folder_inputs`).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from pathlib import Path

import pytest
from conftest import command_inputs, error_line, tiny_beir
from test_output_paths import CASES

from retromae.cli import main
from retromae.data.corpus import corpus_files, iter_corpus, iter_corpus_pieces
from retromae.data.inputs import check_format
from retromae.data.retrieval_sets import load_corpus
from retromae.data.token_store import source_fingerprint
from retromae.evaluation.config import EvaluateConfig
from retromae.finetuning.config import FinetuneConfig
from retromae.pretraining.config import PretrainConfig
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import claim_folder, input_fingerprint, release, run_identity

# Every command line that reads a corpus argument: those of the output cases, and the three whose corpus is not
# their output's input there
CORPUS_COMMANDS = sorted([*(line for line in CASES.values() if "--corpus C " in line),
                          "index --embeddings E --hybrid --corpus C --output OUT",
                          "search --index I --query cat --corpus C",
                          "quickstart --data B --corpus C --output OUT"])
SEVERAL = [line for line in CORPUS_COMMANDS if line.split()[0] in ("adapt", "init-model", "pretrain", "quickstart")]


def ids(lines: list[str]) -> list[str]:
    return [" ".join(line.split()[:1] + [word for word in line.split() if word in ("--hybrid", "--query")])
            for line in lines]


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


def shards(folder: Path, source: Path, *names: str) -> Path:
    """`folder` holding `source`'s lines cut into one shard per name (a .gz name written compressed)."""
    folder.mkdir()
    lines = source.read_text().splitlines(keepends=True)
    step = -(-len(lines) // len(names))
    for number, name in enumerate(names):
        text = "".join(lines[number * step:(number + 1) * step]).encode()
        (folder / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return folder


def run(command: str, inputs: dict[str, Path], tmp_path: Path, *corpus: str) -> int:
    """`command` with its corpus argument C given as the `corpus` arguments and OUT under `tmp_path`."""
    words = {key: str(value) for key, value in inputs.items()}
    argv = []
    for word in command.split():
        argv += list(corpus) if word == "C" else [words.get(word, word.replace("OUT", str(tmp_path / "out")))]
    return main(argv)


# F: a folder's files are those a file named alone is read as

def test_a_folder_reads_its_gzip_shards_as_each_is_read_named_alone(inputs, tmp_path):
    folder = shards(tmp_path / "c", inputs["C"], "a.jsonl", "b.jsonl.gz", "c.json.gz")
    (folder / "README.md").write_text("not corpus")
    assert [path.name for path in corpus_files(folder)] == ["a.jsonl", "b.jsonl.gz", "c.json.gz"]
    alone = [document.text for name in ("a.jsonl", "b.jsonl.gz", "c.json.gz") for document in
             iter_corpus([folder / name])]
    assert [document.text for document in iter_corpus([folder])] == alone and len(alone) == 48
    assert list(load_corpus(folder)) == [f"d{i}" for i in range(48)]
    assert sum(ends for _, ends in iter_corpus_pieces([folder], 1000, " ")) == 48


def test_a_tsv_gz_shard_is_read_in_a_folder(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.tsv").write_text("1\tfirst text\n")
    (tmp_path / "c" / "b.tsv.gz").write_bytes(gzip.compress(b"2\tsecond text\n"))
    assert {key: passage.text for key, passage in load_corpus(tmp_path / "c").items()} == {"1": "first text",
                                                                                           "2": "second text"}


@pytest.mark.parametrize("command", CORPUS_COMMANDS, ids=ids(CORPUS_COMMANDS))
def test_a_shard_in_a_format_not_read_is_refused_by_every_corpus_command(command, inputs, tmp_path, capsys):
    folder = shards(tmp_path / "c", inputs["C"], "a.jsonl", "b.jsonl.zst")
    assert run(command, inputs, tmp_path, str(folder)) == 2
    assert error_line(capsys) == (
        f"retromae: error: {folder}/b.jsonl.zst: unknown corpus format '.zst'; use .txt, .jsonl, .json, .tsv, "
        ".parquet (.jsonl and .tsv also .gz), a folder holding them, or hf:NAME")
    assert sorted(os.listdir(tmp_path)) == ["c"]


@pytest.mark.parametrize("command", CORPUS_COMMANDS, ids=ids(CORPUS_COMMANDS))
def test_a_folder_reaching_one_file_twice_is_refused_by_every_corpus_command(command, inputs, tmp_path, capsys):
    folder = shards(tmp_path / "c", inputs["C"], "a.jsonl")
    (folder / "b.jsonl").symlink_to("a.jsonl")
    assert run(command, inputs, tmp_path, str(folder)) == 2
    assert error_line(capsys) == (
        f"retromae: error: '{folder}' (by '{folder}/a.jsonl') and '{folder}' (by '{folder}/b.jsonl') name one "
        f"corpus file, '{folder}/a.jsonl': give each once")
    assert sorted(os.listdir(tmp_path)) == ["c"]


@pytest.mark.parametrize("way", ["named twice", "through ./", "through a link", "beside its folder"])
@pytest.mark.parametrize("command", SEVERAL, ids=ids(SEVERAL))
def test_one_file_reached_by_two_arguments_is_refused_naming_both(command, way, inputs, tmp_path, capsys,
                                                                  monkeypatch):
    folder = shards(tmp_path / "c", inputs["C"], "a.jsonl")
    (tmp_path / "link.jsonl").symlink_to(folder / "a.jsonl")
    monkeypatch.chdir(tmp_path)
    second = {"named twice": "c/a.jsonl", "through ./": "./c/a.jsonl", "through a link": "link.jsonl",
              "beside its folder": "c"}[way]
    assert run(command, inputs, tmp_path, "c/a.jsonl", second) == 2
    by = " (by 'c/a.jsonl')" if way == "beside its folder" else ""
    assert error_line(capsys) == (f"retromae: error: 'c/a.jsonl' and '{second}'{by} name one corpus file, "
                                  f"'{folder}/a.jsonl': give each once")
    assert sorted(os.listdir(tmp_path)) == ["c", "link.jsonl"]


def test_the_check_before_the_work_refuses_it_beside_a_hub_data_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("a.jsonl").write_text('{"text": "one"}\n')
    with pytest.raises(DataError, match=r"^'a.jsonl' and './a.jsonl' name one corpus file"):
        check_format("documents", ["hf:some/hub-set", "a.jsonl", "./a.jsonl"])


def test_evaluate_data_shares_the_rule_through_a_link(tmp_path):
    tiny_beir(tmp_path / "sf")
    (tmp_path / "again").symlink_to("sf")
    config = EvaluateConfig(model=["m"], data=[tmp_path / "sf", tmp_path / "again"])
    with pytest.raises(DataError) as refused:
        config.data_sets()
    assert str(refused.value) == (f"--data: '{tmp_path}/sf' and '{tmp_path}/again' name one data set, "
                                  f"'{tmp_path}/sf': give each once")


def test_hidden_files_are_skipped_with_one_note_per_folder(tmp_path, capsys):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"_id": "1", "text": "kept"}\n')
    (folder / ".notes.jsonl").write_text('{"text": "a note"}\n')
    (folder / "._a.jsonl").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    assert [document.text for document in iter_corpus([folder])] == ["kept"]
    assert [passage.text for passage in load_corpus(folder).values()] == ["kept"]
    assert corpus_files(folder) == [folder / "a.jsonl"]
    assert capsys.readouterr().err == (f"retromae: note: {folder}: 2 hidden files (names starting with '.') "
                                       "skipped: hidden files are no corpus\n")


def test_a_folder_holding_only_hidden_corpus_files_holds_no_corpus(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / ".a.jsonl").write_text('{"text": "hidden"}\n')
    with pytest.raises(DataError, match=r"/c: no corpus file: "):
        corpus_files(tmp_path / "c")


# G: a run's identity over the files its readers read

def test_a_fingerprint_enters_a_linked_folder_as_the_readers_do(tmp_path):
    tiny_beir(tmp_path / "shared")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (data / name).write_bytes((tmp_path / "shared" / name).read_bytes())
    (data / "qrels").symlink_to("../shared/qrels")
    (data / "loop").symlink_to("..")  # a link to a folder above: entered once, never looped
    before = input_fingerprint(data)
    (tmp_path / "shared" / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    assert input_fingerprint(data) != before


def test_an_hf_local_folder_is_fingerprinted_by_its_files(tmp_path):
    folder = tmp_path / "hfd"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "one"}\n')
    before, key = input_fingerprint(f"hf:{folder}"), source_fingerprint(f"hf:{folder}")
    assert before == f"hf::{input_fingerprint(folder)}"
    (folder / "train.jsonl").write_text('{"text": "two"}\n')
    assert input_fingerprint(f"hf:{folder}") != before and source_fingerprint(f"hf:{folder}") != key
    assert input_fingerprint("hf:wikitext:wikitext-2-raw-v1") == "hf:wikitext:wikitext-2-raw-v1"


def test_a_hidden_file_is_neither_read_nor_fingerprinted(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"text": "kept"}\n')
    before = input_fingerprint(folder), source_fingerprint(folder)
    (folder / ".b.jsonl").write_text('{"text": "hidden"}\n')
    assert (input_fingerprint(folder), source_fingerprint(folder)) == before
    assert [document.text for document in iter_corpus([folder])] == ["kept"]


@pytest.mark.parametrize("edit", ["finetune --data (qrels linked)", "pretrain --corpus hf:FOLDER"])
def test_a_resume_after_such_an_input_changed_is_refused(edit, tmp_path):
    tiny_beir(tmp_path / "shared")
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").symlink_to(tmp_path / "shared" / "corpus.jsonl")
    (data / "queries.jsonl").symlink_to(tmp_path / "shared" / "queries.jsonl")
    (data / "qrels").symlink_to(tmp_path / "shared" / "qrels")
    config = FinetuneConfig(model="m", data=data, output=tmp_path / "out") if edit.startswith("finetune") else \
        PretrainConfig(model="m", corpus=[f"hf:{tmp_path / 'shared'}"], output=tmp_path / "out")
    command, option = edit.split()[:2]
    try:
        claim_folder(config.output, command, run_identity(config), ("model",))
        (config.output / "model").write_text("steps 1-2")
        release()
        (tmp_path / "shared" / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
        resumed = dataclasses.replace(config, resume=True)
        with pytest.raises(ConfigError, match=rf"belongs to another run \({option[2:]} content differ\)"):
            claim_folder(config.output, command, run_identity(resumed), ("model",), resume=True)
    finally:
        release()


def test_a_folder_without_links_keeps_the_fingerprint_runs_recorded_before(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("a")
    (tmp_path / "sub.txt").write_text("b")
    (tmp_path / ".hidden").write_text("c")
    assert input_fingerprint(tmp_path) == "1f087fc04e99a835"  # as `sorted(rglob("*"))` over visible files gave it
