"""What the command line answers before any heavy import (`retromae.preflight`): a missing `--model` folder, a
missing input file and a missing required option, each in one line with torch and transformers never imported
(checked in the command's own process, through `sys.modules`); a hub name with no network is tried once, with a
bounded wait, and refused saying the hub was unreachable unless the model is cached (then the process goes
offline); with HF_HUB_OFFLINE set the hub is not tried at all."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
import typing

import pytest

from retromae.preflight import check_arguments, check_model, hub_cache, hub_unreachable
from retromae.runtime.errors import DataError, ModelLoadError
from retromae.runtime.options import reading_options

HEAVY = ("torch", "transformers", "numpy", "sentence_transformers", "faiss")


def run_cli(*argv: str) -> tuple[int, str, list[str]]:
    """`retromae ARGV` in a fresh interpreter: its exit code, its standard error, and the heavy modules it had
    imported when the command returned."""
    code = ("import io, sys; from contextlib import redirect_stderr; from retromae.cli import main\n"
            "err = io.StringIO()\n"
            f"with redirect_stderr(err): code = main({list(argv)!r})\n"
            f"print(code); print(err.getvalue().strip()); print(sorted(set({HEAVY!r}) & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, message, heavy = done.stdout.strip().split("\n")
    return int(status), message, eval(heavy)  # noqa: S307 (a list of names printed by the child above)


@pytest.fixture
def model_folder(tmp_path):
    """A folder `resolve_model` takes for a Hugging Face model (config.json with a model_type); never loaded."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return folder


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({"_id": "q1", "text": "a question"}) + "\n")
    return path


def test_a_missing_model_folder_is_answered_before_torch(tmp_path, queries):
    status, message, heavy = run_cli("encode", "--model", str(tmp_path / "runs" / "nonexistent"),
                                     "--queries", str(queries), "--output", str(tmp_path / "out"))
    assert status == 2 and heavy == []
    assert message.startswith(f"retromae: error: --model {tmp_path / 'runs' / 'nonexistent'}: no such folder;")


def test_a_missing_input_file_is_answered_before_torch(tmp_path, model_folder):
    for argv in (["encode", "--model", str(model_folder), "--queries", str(tmp_path / "nope.jsonl"),
                  "--output", str(tmp_path / "out")],
                 ["pretrain", "--model", str(model_folder), "--corpus", str(tmp_path / "nope.jsonl"),
                  "--output", str(tmp_path / "out")]):
        status, message, heavy = run_cli(*argv)
        assert (status, heavy) == (2, [])
        assert message == f"retromae: error: --{argv[3][2:]} {tmp_path / 'nope.jsonl'}: no such file or folder"


# Options whose help speaks of a file or folder but whose value names none (or, --config, that the options' own
# reader opens before torch), and the options a command writes (`OUTPUT_OPTIONS`).
OUTPUT_OPTIONS = {"output", "save_run", "cache_dir"}
NOT_READ_PATHS = {"config", "distill", "k_values", "negatives", "normalize", "overwrite", "per_query", "pooling",
                  "qrels_format", "split", "task", "train_split"} | OUTPUT_OPTIONS


def test_every_option_that_reads_a_path_is_answered_before_torch(tmp_path):
    """Over every command: each option whose field declares what it reads (`option(..., reads=...)`: a model, a
    tokenizer, an input path) given a path that does not exist is refused in one line naming the option and the path,
    torch unloaded; and every option whose help speaks of a file or folder declares it, or is known to name no path
    it reads."""
    missing = str(tmp_path / "nope")
    code = ("import argparse, importlib, io, json, sys; from contextlib import redirect_stderr\n"
            "from retromae.cli import discover_commands, main\n"
            "from retromae.runtime.options import reading_options\n"
            "rows = []\n"
            "for command in discover_commands():\n"
            "    parser = argparse.ArgumentParser(); importlib.import_module(command.module).add_arguments(parser)\n"
            "    reads = reading_options(getattr(parser, 'config_class', None))\n"
            "    for action in parser._actions:\n"
            "        if not action.option_strings or action.help == argparse.SUPPRESS: continue\n"
            "        status, err, flag = None, io.StringIO(), action.option_strings[0]\n"
            "        if action.dest in reads:\n"
            f"            with redirect_stderr(err): status = main([command.name, flag, {missing!r}])\n"
            "        rows.append([command.name, action.dest, reads.get(action.dest), flag, action.help or '', status,\n"
            "                     err.getvalue().strip()])\n"
            "print(json.dumps(rows)); print(json.dumps(sorted({'torch', 'transformers'} & set(sys.modules))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    rows, heavy = json.loads(out[-2]), json.loads(out[-1])
    assert heavy == []
    checked = set()
    for command, dest, kind, flag, help_text, status, message in rows:
        if kind == "path":
            assert (status, message) == (2, f"retromae: error: {flag} {missing}: no such file or folder"), command
        elif kind is not None:
            assert status == 2 and message.startswith(f"retromae: error: {flag} {missing}: no such folder;"), command
        else:
            assert not re.search(r"\b(files?|folders?|directory)\b", help_text) or dest in NOT_READ_PATHS, \
                f"{command} {flag} speaks of a file or folder: declare it, option(..., reads=\"path\") (or here)"
            continue
        checked.add(dest)
    declared = {name for cls in command_configs().values() for name in reading_options(cls)}
    assert checked == declared - {"input"}  # --input: hidden (deprecated), checked the same


# What a field's name says it names (`corpus`, `probe_sts`, `init_from`, `teacher`, ...), beside a `Path` annotation.
PATH_NAMES = re.compile(r"(^|_)(corpus|queries|data|pairs|run|index|init_from|embeddings|input|train|validation|probe|"
                        r"sts|variants|model|teacher|tokenizer|file|folder|dir|path)$")


def command_configs() -> dict[str, type]:
    from retromae.cli import build_parser

    return {name: parser.config_class for name, parser in build_parser()._subparsers._group_actions[0].choices.items()}


@pytest.mark.parametrize("command", sorted(command_configs()))
def test_every_field_that_names_a_path_declares_what_it_does(command):
    """Issue 64, over every command's config class: a field whose type (`Path`) or name says it names a file, a
    folder or a model declares what it reads (`option(..., reads=...)`), or is an output (`OUTPUT_OPTIONS`) or known
    to read none (`NOT_READ_PATHS`); and every field that declares `reads` is checked by the preflight."""
    cls = command_configs()[command]
    hints = typing.get_type_hints(cls)
    texts = [field for field in dataclasses.fields(cls) if re.search(r"\b(str|Path)\b", str(hints[field.name]))]
    undeclared = sorted(field.name for field in texts
                        if ("Path" in str(hints[field.name]) or PATH_NAMES.search(field.name))
                        and field.metadata.get("reads") is None and field.name not in NOT_READ_PATHS)
    assert undeclared == [], f"{command}: declare what these read, option(..., reads=...): {undeclared}"


def test_a_missing_required_option_is_answered_before_torch(model_folder, queries):
    status, message, heavy = run_cli("encode", "--model", str(model_folder), "--queries", str(queries))
    assert (status, message, heavy) == (2, "retromae: error: missing required option(s): --output", [])


def test_a_bad_option_is_named_before_a_hub_name_is_tried(tmp_path, queries, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no connection either way
    status, message, heavy = run_cli("encode", "--model", "owner/name", "--queries", str(queries), "--output",
                                     str(tmp_path / "out"), "--batch-size", "0")
    assert status == 2 and "--batch-size" in message and heavy == []
    status, message, heavy = run_cli("encode", "--model", "owner/name", "--queries", str(queries), "--output",
                                     str(tmp_path / "out"))
    assert status == 2 and "HF_HUB_OFFLINE is set" in message and heavy == []


def test_hf_names_and_lists_of_inputs_are_checked_as_given(tmp_path, queries):
    args = type("Args", (), {"corpus": ["hf:wikitext:wikitext-2-raw-v1", str(queries)], "model": None})()
    pretrain = command_configs()["pretrain"]  # --corpus: a list of inputs
    check_arguments(args, pretrain)  # a hub data set is not a path; an existing file passes
    args.corpus.append(str(tmp_path / "gone.txt"))
    with pytest.raises(DataError, match="--corpus .*gone.txt: no such file or folder"):
        check_arguments(args, pretrain)


@pytest.fixture
def no_network(monkeypatch):
    """Every connection fails as it does without a network; the attempts are counted."""
    attempts = []

    def refuse(address, *args, **kwargs):
        attempts.append(address)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(proxy, raising=False)
    return attempts


def test_an_uncached_hub_name_without_network_is_tried_once_and_named_unreachable(no_network):
    with pytest.raises(ModelLoadError, match=r"--model owner/missing-model: the Hugging Face hub is unreachable "
                                             r"\(huggingface.co:443: Name or service not known\) and the model is "
                                             "not in the local cache"):
        check_model("owner/missing-model")
    assert no_network == [("huggingface.co", 443)]


def test_a_cached_hub_name_without_network_runs_offline(no_network, monkeypatch):
    snapshot = hub_cache() / "models--owner--cached-model" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    check_model("owner/cached-model")
    assert os.environ["HF_HUB_OFFLINE"] == "1" and len(no_network) == 1  # the loaders read the cache at once


def test_with_hf_hub_offline_the_hub_is_not_tried(no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache .*HF_HUB_OFFLINE is set"):
        check_model("owner/missing-model")
    assert no_network == []


def test_a_hub_that_never_answers_is_given_up_on_in_bounded_time(monkeypatch):
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    def hang(*args, **kwargs):
        time.sleep(1)
        raise OSError("answered too late")

    monkeypatch.setattr(socket, "create_connection", hang)
    assert hub_unreachable(seconds=0.1) == "huggingface.co:443: no answer within 0.1 s"


def test_a_bad_environment_setting_is_answered_by_every_command_before_torch():
    """$RETROMAE_CPU_BF16 holding neither 0 nor 1: one line naming the variable, from every command, torch unloaded."""
    code = ("import io, os, sys; from contextlib import redirect_stderr\n"
            "from retromae.cli import discover_commands, main\n"
            "os.environ['RETROMAE_CPU_BF16'] = 'yes'\n"
            "for command in discover_commands():\n"
            "    err = io.StringIO()\n"
            "    with redirect_stderr(err): code = main([command.name])\n"
            "    print(command.name, code, err.getvalue().strip().splitlines()[0][:41])\n"
            f"print(sorted(set({HEAVY!r}) & set(sys.modules)))")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) > 10 and lines[-1] == "[]"
    for line in lines[:-1]:
        assert line.split(" ", 2)[1:] == ["2", "retromae: error: $RETROMAE_CPU_BF16: must"], line
