"""Round nine of the hostile-input audit: the file system's edges, each at one rule.

- `index --factory binary` on a nearly full disk died of SIGBUS (no message, its claim and a temporary file left for
  good): its float rows were written through a sparse memory map. Every writer through a memory map now goes through
  `runtime.io.atomic_array`, which reserves the file's blocks first; and a claim clears a killed write's temporary
  files of the names it writes (`runtime.io.clear_leftovers`).
- A file name that is not UTF-8, found by listing a folder, ended `encode`, `pretrain`, `adapt`... in a
  UnicodeEncodeError inside `input_fingerprint`, while `bm25` read the file. Fingerprints hash a name's bytes; a
  listed corpus file's (or data set's) name keeps the rule of names given as options (`options.check_listed_name`).
- A legal output name of 241-255 characters was "File name too long": retromae's temporary name or lock beside it
  was. Those names are shortened to a digest where they would pass the limit (`runtime.io.own_prefix`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs, error_line
from test_output_paths import CASES

import retromae.retrieval.index
from retromae.cli import main
from retromae.evaluation.config import _sets_in
from retromae.runtime.errors import DataError, FileSystemError
from retromae.runtime.io import atomic_array, atomic_directory, clear_leftovers, own_prefix, write_text_atomic
from retromae.runtime.run_folder import claim_file, claim_folder, file_fingerprint, input_fingerprint, release

SOURCE = Path(retromae.retrieval.index.__file__).parents[1]
BAD = os.fsdecode(b"b\xff.jsonl")  # a Latin-1 name from an old archive: its byte 0xFF is no UTF-8


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


@pytest.fixture()
def full_disk(monkeypatch):
    """Every reservation of blocks fails as on a full disk."""
    def refuse(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "posix_fallocate", refuse)


# F: one writer through a memory map, its blocks reserved first

def test_atomic_array_reserves_before_anything_is_written(full_disk, tmp_path):
    with pytest.raises(FileSystemError, match=r"x\.npy: cannot write: No space left on device$"):
        with atomic_array(tmp_path / "x.npy", (1000, 8)):
            raise AssertionError("the map is never handed out unreserved")
    assert os.listdir(tmp_path) == []


def test_atomic_array_writes_a_whole_npy_file(tmp_path):
    with atomic_array(tmp_path / "x.npy", (3, 2)) as rows:
        rows[:] = [[1, 2], [3, 4], [5, 6]]
    assert np.load(tmp_path / "x.npy").tolist() == [[1, 2], [3, 4], [5, 6]]
    assert os.listdir(tmp_path) == ["x.npy"]


def test_no_other_module_maps_a_file_for_writing():
    pattern = re.compile(r"open_memmap|np\.memmap\([^)]*mode=\"[wr]\+\"")
    found = [path.relative_to(SOURCE) for path in SOURCE.rglob("*.py") if pattern.search(path.read_text())]
    assert found == [Path("runtime/io.py")]


@pytest.mark.parametrize("command, written", [
    ("index --embeddings E --output OUT --factory binary", "vectors.npy"),
    ("encode --model M --corpus C --output OUT --no-progress", "embeddings.npy"),
])
def test_a_full_disk_under_a_mapped_writer_is_one_line(command, written, inputs, full_disk, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(inputs[word]) if word in inputs else str(out) if word == "OUT" else word for word in command.split()]
    assert main(argv) == 1
    assert error_line(capsys) == f"retromae: error: {out / written}: cannot write: No space left on device"
    assert not [path for path in tmp_path.rglob("*") if path.name.endswith(".tmp") or path.name.endswith(".lock")]


def test_a_mapped_writer_on_a_full_tmpfs_is_an_error_not_a_signal(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(FileSystemError, match="No space left on device"):
            retromae.retrieval.index._save_rows(np.ones((100_000, 4), dtype=np.float32), small / "vectors.npy")
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


LEFTOVERS = [".vectors.npy.kltnj2_e.tmp", ".retromae-run.json.a1b2c3d4.tmp"]
KEPT = [".vectors.npy.old", ".vectors.npy.kltnj2_e.tmp.bak", ".vectors.npy.KLTNJ2_E.tmp", ".notes.txt.kltnj2_e.tmp",
        ".vectors.npy.abc.tmp", "vectors.npy.kltnj2_e.tmp"]


def test_claiming_a_folder_clears_the_temporary_files_of_the_names_it_writes(tmp_path):
    folder = tmp_path / "ix"
    folder.mkdir()
    (folder / ".lexical.abcdefgh.tmp").mkdir()  # a folder written whole (`atomic_directory`)
    for name in LEFTOVERS + KEPT:
        (folder / name).write_text("x")
    try:
        claim_folder(folder, "index", {}, ("vectors.npy", "lexical"), resumable=False)
    finally:
        release()
    assert sorted(os.listdir(folder)) == sorted(KEPT + ["retromae-run.json"])


def test_claiming_a_file_clears_its_temporary_files_only_once_claimed(tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("kept\n")
    (tmp_path / ".run.trec.kltnj2_e.tmp").write_text("x")
    (tmp_path / ".run.trec.old").write_text("x")
    with pytest.raises(Exception, match="exists"):
        claim_file(run, overwrite=False)
    release()
    assert (tmp_path / ".run.trec.kltnj2_e.tmp").exists()
    try:
        claim_file(run, overwrite=True)
    finally:
        release()
    assert sorted(os.listdir(tmp_path)) == [".run.trec.old", "run.trec"]


def test_the_next_index_run_clears_a_killed_runs_temporary_file(inputs, tmp_path):
    out = tmp_path / "ix"
    out.mkdir()
    (out / ".vectors.npy.kltnj2_e.tmp").write_bytes(b"\0" * 4096)
    assert main(["index", "--embeddings", str(inputs["E"]), "--output", str(out), "--factory", "binary"]) == 0
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]


# G: names that are not UTF-8, found by listing

def test_a_fingerprint_takes_any_name_and_keeps_utf8_names_fingerprints(tmp_path):
    (tmp_path / "café.txt").write_text("a")
    expected = hashlib.sha1(f"café.txt={file_fingerprint(tmp_path / 'café.txt')}\n".encode()).hexdigest()[:16]
    assert input_fingerprint(tmp_path) == expected  # the identity of runs recorded before stays
    (tmp_path / os.fsdecode(b"notes\xe9.txt")).write_text("b")
    assert input_fingerprint(tmp_path) not in ("", expected)


CORPUS_COMMANDS = sorted(line for line in CASES.values() if "--corpus C " in line)


@pytest.mark.parametrize("command", CORPUS_COMMANDS, ids=[line.split()[0] for line in CORPUS_COMMANDS])
def test_a_listed_corpus_file_whose_name_is_not_utf8_is_refused_by_every_command(command, inputs, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = inputs["C"].read_text().splitlines(keepends=True)
    (corpus / "a.jsonl").write_text("".join(text[:24]))
    (corpus / BAD).write_text("".join(text[24:]))
    out = tmp_path / "out"
    words = {**{key: str(value) for key, value in inputs.items()}, "C": str(corpus), "OUT": str(out)}
    argv = [words.get(word, word.replace("OUT", str(out))) for word in command.split()]
    assert main(argv) == 2
    assert error_line(capsys) == (
        f"retromae: error: {corpus}: the name 'b\\udcff.jsonl' holds the byte 0xFF, which is not UTF-8, at character "
        "2: an option's value must be UTF-8 text (a file's name too: rename it, or link to it under a UTF-8 name)")
    assert sorted(os.listdir(tmp_path)) == ["corpus"]


def test_a_stray_file_not_utf8_named_in_a_model_folder_is_fingerprinted(inputs, tmp_path):
    stray = inputs["M"] / os.fsdecode(b"notes\xe9.txt")
    stray.write_text("hi")
    try:
        assert main(["encode", "--model", str(inputs["M"]), "--corpus", str(inputs["C"]), "--output",
                     str(tmp_path / "emb"), "--no-progress"]) == 0
    finally:
        stray.unlink()


def test_a_listed_data_set_whose_name_is_not_utf8_is_refused(tmp_path):
    (tmp_path / os.fsdecode(b"s\xe9") / "corpus.jsonl").parent.mkdir()
    (tmp_path / os.fsdecode(b"s\xe9") / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(DataError, match=r"the name 's\\udce9' holds the byte 0xE9, which is not UTF-8"):
        _sets_in(tmp_path, "test")


# I1: any legal output name, our own names beside it shortened where they would not fit

@pytest.mark.parametrize("size, hashed", [(241, False), (242, True), (255, True), (256, False)])
def test_our_names_beside_a_file_fit_wherever_its_name_does(size, hashed, tmp_path):
    prefix = own_prefix(tmp_path / ("y" * size))
    assert (len(prefix) == 34) is hashed
    assert len(f"{prefix}kltnj2_e.tmp") <= 255 or size > 255


@pytest.mark.parametrize("size", [241, 250, 255])
@pytest.mark.parametrize("writer", ["write_text_atomic", "atomic_directory", "claim_file"])
def test_a_name_of_up_to_the_limit_is_written(writer, size, tmp_path):
    path = tmp_path / ("y" * size)
    if writer == "write_text_atomic":
        write_text_atomic(path, "x")
    elif writer == "atomic_directory":
        with atomic_directory(path) as folder:
            (folder / "f").write_text("x")
    else:
        try:
            claim_file(path, overwrite=False)
            assert len(os.listdir(tmp_path)) == 1  # the lock
        finally:
            release()
    assert os.listdir(tmp_path) == ([path.name] if writer != "claim_file" else [])


@pytest.mark.parametrize("size", [245, 255, 256])
def test_bm25_writes_a_run_of_any_legal_name_and_refuses_a_longer_one_first(size, inputs, tmp_path, capsys):
    output = tmp_path / ("y" * (size - 5) + ".trec")
    code = main(["bm25", "--corpus", str(inputs["C"]), "--queries", str(inputs["Q"]), "--output", str(output)])
    if size <= 255:
        assert code == 0 and os.listdir(tmp_path) == [output.name]
    else:
        assert code == 1
        line = error_line(capsys)
        assert line.startswith(f"retromae: error: {output}: ") and line.endswith("File name too long"), line
        assert os.listdir(tmp_path) == []


def test_clear_leftovers_of_a_long_name_uses_the_same_short_prefix(tmp_path):
    path = tmp_path / ("y" * 250)
    (tmp_path / f"{own_prefix(path)}kltnj2_e.tmp").write_text("x")
    clear_leftovers(path)
    assert os.listdir(tmp_path) == []
