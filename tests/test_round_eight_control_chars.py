"""Round eight: text from records and from listed file names reaches no message raw.

Ids and texts from data files were already quoted (`runtime.lines.quoted`); paths recorded in index.json, a run
marker's command and its identity's names, and the names of files found by listing a folder went into messages as
they were: an ESC sequence coloured the terminal or cleared it, BEL rang, and a newline in a file's name made a
one-line error two. Every message is now `runtime.errors.printable` where it becomes text (the text of every
`RetroMAEError`, `os_error_line`, `console.notice`), and a marker is read only when it records one of
`run_folder.MARKER_COMMANDS`. The three cases of the audit (repro/03_control_chars.sh) run through the CLI; each
site of a message is tried with each control character.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs

from retromae.cli import discover_commands, main
from retromae.retrieval.texts import corpus_path, document_texts
from retromae.runtime.console import notice
from retromae.runtime.errors import DataError, FileSystemError, ModelLoadError, NonFiniteError, os_error_line
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import MARKER, MARKER_COMMANDS, claim_folder, read_marker, release, write_marker

# Characters a terminal acts on rather than shows, in names, and each as a message writes it
CONTROLS = {"ESC": "\x1b[31m", "BEL": "\x07", "newline": "\n", "CR": "\r", "CSI (C1)": "\x9b2J", "U+202E": "\u202e"}
ESCAPES = {"\x1b": "\\x1b", "\x07": "\\x07", "\n": "\\n", "\r": "\\r", "\x9b": "\\x9b", "\u202e": "\\u202e"}


def shown(text: str) -> str:
    return text.translate(str.maketrans(ESCAPES))


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert not any(char in err[:-1] for char in ESCAPES), err
    return err.strip()


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


@pytest.mark.parametrize("control", CONTROLS)
def test_a_data_error_in_a_listed_file_stays_one_line(control, inputs, tmp_path, capsys):
    """(c) A corpus folder's file, found by listing it, named with a control character and holding a bad line."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    name = f"bad{CONTROLS[control]}name.jsonl"
    (folder / name).write_text('{"_id": "a", "text": "one"}\n{"_id": "b", "text": \n')
    out = tmp_path / "out.trec"
    assert main(["bm25", "--corpus", str(folder), "--queries", str(inputs["Q"]), "--output", str(out)]) == 2
    assert one_line(capsys) == (f"retromae: error: {folder}/{shown(name)}:2: malformed JSON (Expecting value at "
                                "column 22)")
    assert not out.exists()


@pytest.mark.parametrize("control", CONTROLS)
def test_a_corpus_path_recorded_in_index_json_is_shown_printable(control, inputs, tmp_path, capsys):
    """(a) index.json's corpus path, moved away: the warning of `search --query` and the refusal where the texts
    are needed."""
    index = tmp_path / "idx"
    shutil.copytree(inputs["I"], index)
    info = json.loads((index / "index.json").read_text())
    recorded = f"{tmp_path}/gone{CONTROLS[control]}.jsonl"
    info["corpus"]["path"] = recorded
    (index / "index.json").write_text(json.dumps(info))
    assert main(["search", "--index", str(index), "--model", str(inputs["M"]), "--query", "a cat"]) == 0
    assert one_line(capsys) == (f"retromae: warning: the corpus recorded in {index / 'index.json'} ({shown(recorded)}) "
                                "is not there any more (moved or deleted); showing ids and scores only (--corpus FILE "
                                "names the corpus)")
    with pytest.raises(DataError) as caught:
        corpus_path(info["corpus"], str(index / "index.json"), "--corpus")
    assert f"({shown(recorded)}) is not there any more" in str(caught.value)
    assert document_texts(["d0"], info["corpus"], "index.json", "--corpus") is None
    assert one_line(capsys).startswith(f"retromae: warning: the corpus recorded in index.json ({shown(recorded)})")


def marked(folder: Path, marker: dict) -> Path:
    folder.mkdir()
    (folder / MARKER).write_text(json.dumps(marker))
    np.save(folder / "embeddings.npy", np.zeros((1, 2), dtype=np.float32))
    return folder


@pytest.mark.parametrize("control", CONTROLS)
def test_a_marker_recording_no_command_of_ours_is_no_marker(control, inputs, tmp_path, capsys):
    """(b) The marker's command is one of MARKER_COMMANDS or the marker is none of ours: its text is never shown."""
    folder = marked(tmp_path / "mk", {"command": f"pretrain{CONTROLS[control]}", "identity": {}})
    assert read_marker(folder) is None
    assert main(["encode", "--model", str(inputs["M"]), "--corpus", str(inputs["C"]), "--output", str(folder)]) == 2
    assert one_line(capsys) == (f"retromae: error: {folder}: holds embeddings.npy, which no retromae run recorded "
                                "writing (not outputs of `retromae encode`), so even --overwrite keeps them: move "
                                "them, or choose another --output")
    assert json.loads((folder / MARKER).read_text())["command"] == f"pretrain{CONTROLS[control]}"


@pytest.mark.parametrize("marker", [[], {"command": "encode"}, {"command": "encode", "identity": []},
                                    {"command": ["encode"], "identity": {}}, {"command": "search", "identity": {}}])
def test_a_marker_without_a_command_of_ours_and_an_identity_is_no_marker(marker, tmp_path):
    (tmp_path / MARKER).write_text(json.dumps(marker))
    assert read_marker(tmp_path) is None


def test_a_marker_is_written_only_for_a_command_it_can_be_read_back_for(tmp_path):
    assert set(MARKER_COMMANDS) - {"checkpoint", "Encoder.save"} <= {command.name for command in discover_commands()}
    with pytest.raises(ValueError, match="'search' is not one of MARKER_COMMANDS"):
        write_marker(tmp_path, "search", {})
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("control", CONTROLS)
def test_the_option_names_of_a_markers_identity_are_shown_printable(control, tmp_path):
    name = f"pooling{CONTROLS[control]}"
    folder = marked(tmp_path / "mk", {"command": "encode", "identity": {name: "cls"}})
    try:
        with pytest.raises(ConfigError) as caught:
            claim_folder(folder, "encode", {"pooling": "cls"}, ("embeddings.npy",))
    finally:
        release()
    assert str(caught.value) == (f"{folder}: holds the outputs of another run of `retromae encode` (pooling, "
                                 f"{shown(name)} differ); --overwrite replaces it, or choose another --output")


@pytest.mark.parametrize("error", [DataError, ConfigError, ModelLoadError, FileSystemError, NonFiniteError])
@pytest.mark.parametrize("control", CONTROLS)
def test_every_error_of_retromae_is_printable(control, error):
    text = f"/data/a{CONTROLS[control]}b.jsonl:3: malformed JSON"
    assert str(error(text)) == shown(text)


@pytest.mark.parametrize("control", CONTROLS)
def test_an_operating_system_error_and_a_notice_are_printable(control, capsys):
    path = f"/data/a{CONTROLS[control]}b"
    assert os_error_line(FileNotFoundError(2, "No such file or directory", path)) == (
        f"{shown(path)}: No such file or directory")
    notice(f"retromae: warning: {path} moved")
    assert one_line(capsys) == f"retromae: warning: {shown(path)} moved"
