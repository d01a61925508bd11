"""What an output may replace: a regular file, or nothing (the audit of round five, section 1).

`--overwrite` with an `--output` naming a device node (/dev/full) or a FIFO replaced it with a plain file: the atomic
write renames its temporary file over whatever is there. The rule lives where every write goes through
(`retromae.runtime.io.replaced_file`, `replaced_folder`) and is checked again where a command claims its output
before the work (`retromae.runtime.run_folder.claim_file`, `_make_folder`): a file output replaces only a regular file
(a symbolic link to one is written through, and stays), a folder output only a folder; a device, a FIFO, a socket or
a link to nothing is refused in one line naming the path, and left as it was. Generated over every output option of
every command in the CLI's registry, then the writers themselves.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from functools import partial
from pathlib import Path

import pytest
from conftest import command_inputs

from retromae.cli import build_parser, main
from retromae.runtime.errors import DataError, FileSystemError
from retromae.runtime.io import append_line, atomic_directory, atomic_path, write_text_atomic
from retromae.runtime.run_folder import claim_file, release

COMMANDS = {name: parser.config_class for name, parser in build_parser()._subparsers._group_actions[0].choices.items()}
OUTPUT_OPTIONS = ("output", "save_run")  # the options naming what a command writes (a --cache-dir is written in)
# Each command's output option with the rest of a command line that reaches its claim (letters: `inputs`); OUT is
# the output, with the suffix the option takes for a file.
CASES = {
    ("adapt", "output"): "adapt --model M --pooling cls --corpus C --output OUT --max-steps 2",
    ("bm25", "output"): "bm25 --corpus C --queries Q --output OUT.trec",
    ("encode", "output"): "encode --model M --corpus C --output OUT",
    ("evaluate", "output"): "evaluate --model M --data B --output OUT.json",
    ("evaluate", "save_run"): "evaluate --model M --data B --save-run OUT.trec",
    ("finetune", "output"): "finetune --model M --data B --output OUT --max-steps 1",
    ("index", "output"): "index --embeddings E --output OUT",
    ("init-model", "output"): "init-model --corpus C --output OUT --vocab-size 200 --hidden-size 64 --layers 1 "
                              "--max-positions 64",
    ("mine", "output"): "mine --data B --negatives bm25 --output OUT.jsonl",
    ("pretrain", "output"): "pretrain --model M --corpus C --output OUT --max-steps 1 --max-length 32",
    ("quickstart", "output"): "quickstart --data B --output OUT",
    ("report", "output"): "report --variants E --output OUT",
    ("score", "output"): "score --model M --data T --output OUT.jsonl",
    ("search", "output"): "search --index I --queries E --output OUT.trec",
    ("train-reranker", "output"): "train-reranker --model M --data T --output OUT --max-steps 1",
}


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A model folder, a BEIR folder, its encoding, its index and a training file."""
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


def make(kind: str, path: Path) -> None:
    """Put a `kind` of thing that is no regular file at `path`."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.with_name("nothing-here"))


def unchanged(kind: str, path: Path) -> bool:
    """Whether the thing `make` put at `path` is still there as it was (and a link's target was not created)."""
    if kind == "fifo":
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    return path.is_symlink() and os.readlink(path) == str(path.with_name("nothing-here")) and not path.exists()


def test_the_cases_are_every_output_option_of_every_command():
    found = {(name, field.name) for name, config_cls in COMMANDS.items() for field in dataclasses.fields(config_cls)
             if field.name in OUTPUT_OPTIONS}
    assert set(CASES) == found


@pytest.mark.parametrize("kind", ["fifo", "dangling link"])
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_output_refuses_what_is_not_a_regular_file_or_folder_even_with_overwrite(case, kind, inputs, tmp_path,
                                                                                       capsys):
    words = CASES[case].split()
    out = next(word for word in words if word.startswith("OUT"))
    target = tmp_path / f"out{out[3:]}"
    make(kind, target)
    args = [str(target) if word == out else str(inputs.get(word, word)) for word in words]
    overwrite = ["--overwrite"] if any(field.name == "overwrite" for field in dataclasses.fields(COMMANDS[case[0]])) \
        else []
    assert main([*args, *overwrite]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{target}: is a " in lines[0], lines
    assert ("named pipe (FIFO)" if kind == "fifo" else "dangling symbolic link") in lines[0]
    assert unchanged(kind, target)


# Each command's folder it writes in (a cache), with the rest of a command line that reaches its check
FOLDER_CASES = {
    "adapt": "adapt --model M --pooling cls --corpus C --output OUT --max-steps 2 --cache-dir DIR",
    "evaluate": "evaluate --model M --data B --bm25 --output OUT --cache-dir DIR",
    "pretrain": "pretrain --model M --corpus C --output OUT --max-steps 1 --max-length 32 --cache-dir DIR",
}


def test_the_folder_cases_are_every_cache_option_of_every_command():
    assert set(FOLDER_CASES) == {name for name, config_cls in COMMANDS.items()
                                 if any(field.name == "cache_dir" for field in dataclasses.fields(config_cls))}


@pytest.mark.parametrize("kind", ["fifo", "dangling link"])
@pytest.mark.parametrize("command", FOLDER_CASES)
def test_every_cache_folder_option_refuses_what_is_not_a_folder_before_the_work(command, kind, inputs, tmp_path,
                                                                                capsys):
    folder = tmp_path / "cache"
    make(kind, folder)
    words = FOLDER_CASES[command].split()
    places = {"OUT": tmp_path / "out", "DIR": folder}
    assert main([str(places.get(word, inputs.get(word, word))) for word in words]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"retromae: error: --cache-dir: {folder}: is a "), lines
    assert unchanged(kind, folder) and not (tmp_path / "out").exists()


def test_a_refused_output_runs_no_search_first(inputs, tmp_path, monkeypatch, capsys):
    """The claim says it before the work: a long search is not run to be refused when its run is written."""
    from retromae.retrieval import run as retrieval_run

    monkeypatch.setattr(retrieval_run, "bm25_search", lambda *args: pytest.fail("searched before the output's check"))
    os.mkfifo(tmp_path / "run.trec")
    assert main(["bm25", "--data", str(inputs["B"]), "--output", str(tmp_path / "run.trec"), "--overwrite"]) == 1
    assert capsys.readouterr().err == (f"retromae: error: {tmp_path / 'run.trec'}: is a named pipe (FIFO), not a "
                                       "regular file; a write replaces only a regular file: choose another --output\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.trec"]  # no lock file, no temporary


def test_claiming_a_file_refuses_it_with_or_without_overwrite(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    for name in ("fifo", "link"):
        for overwrite in (False, True):
            with pytest.raises(FileSystemError, match=f"^{tmp_path / name}: is a .* choose another --save-run$"):
                claim_file(tmp_path / name, overwrite, "save_run")
    release()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fifo", "link"]


def write_through_atomic_path(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


FILE_WRITERS = {"write_text_atomic": write_text_atomic, "atomic_path": write_through_atomic_path}


@pytest.mark.parametrize("writer", FILE_WRITERS)
@pytest.mark.parametrize("kind", ["fifo", "dangling link", "folder"])
def test_every_file_writer_refuses_what_is_not_a_regular_file(writer, kind, tmp_path):
    path = tmp_path / "out"
    path.mkdir() if kind == "folder" else make(kind, path)
    words = {"fifo": "a named pipe (FIFO)", "dangling link": "a dangling symbolic link", "folder": "a folder"}
    with pytest.raises(FileSystemError, match=f"^{path}: is {re.escape(words[kind])}"):
        FILE_WRITERS[writer](path, "new")
    assert path.is_dir() if kind == "folder" else unchanged(kind, path)
    assert sorted(item.name for item in tmp_path.iterdir()) == ["out"]  # no temporary left


@pytest.mark.parametrize("writer", FILE_WRITERS)
def test_a_link_to_a_regular_file_is_written_through_and_stays(writer, tmp_path):
    """As a shell's `>` writes: the file the link names gets the text; the link is kept."""
    (tmp_path / "real").write_text("old\n")
    (tmp_path / "link").symlink_to("real")
    FILE_WRITERS[writer](tmp_path / "link", "new")
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real").read_text() == "new"


OWN_WRITERS = {"append_line": append_line, "write_text_atomic(own=True)": partial(write_text_atomic, own=True)}


@pytest.mark.parametrize("writer", OWN_WRITERS)
@pytest.mark.parametrize("kind", ["link to a file", "fifo", "dangling link", "folder"])
def test_a_file_of_a_runs_own_is_never_written_through_what_is_there(writer, kind, tmp_path):
    """A run's metrics.jsonl and config.json (round eight): not the output rule's write through a link, but the
    own-file rule (`runtime.lines.check_own_file`): refused, the link and its target left as they were."""
    (tmp_path / "real").write_text("old\n")
    path = tmp_path / "out"
    if kind == "link to a file":
        path.symlink_to("real")
    else:
        path.mkdir() if kind == "folder" else make(kind, path)
    with pytest.raises(DataError, match=f"^{path}: is .*, not a regular file; retromae writes this file itself"):
        OWN_WRITERS[writer](path, "new")
    assert (tmp_path / "real").read_text() == "old\n" and sorted(item.name for item in tmp_path.iterdir()) == [
        "out", "real"]


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "file"])
def test_a_folder_write_refuses_what_is_not_a_folder(kind, tmp_path):
    path = tmp_path / "out"
    path.write_text("keep") if kind == "file" else make(kind, path)
    with pytest.raises(FileSystemError, match=f"^{path}: is a .*, not a folder"):
        with atomic_directory(path) as staging:
            (staging / "x").write_text("x")
    assert path.read_text() == "keep" if kind == "file" else unchanged(kind, path)
    assert sorted(item.name for item in tmp_path.iterdir()) == ["out"]
