"""Round nine: one text, one value, in a --config file and on the command line.

PyYAML's YAML 1.1 read `010` as 8, `1:20` as 80, `0x10` as 16, `on` as true and `2001-12-14` as a date, where the
same text as a flag is 10 or refused; and flags took `1_0` (int()), which data files refuse. A config file's bare
value is now the text a flag is given (`runtime.options.Bare`), read by the one reading of an option's text
(`runtime.options.read_texts`, numbers by `number_from_text`: plain decimal notation). Each case below builds the
same option from the same text both ways and compares: the same value, or the same one-line refusal. The same rule
for the other numbers read from an option's text: --threads, and faiss's --params (faiss reads `nprobe=1_0` as 1).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_beir
from test_option_domains import options, required_values

from retromae.cli import build_parser, discover_commands, main
from retromae.runtime.options import Bare, ConfigError, _field_specs, build_config, load_config_file

# YAML 1.1's number, boolean, null and date forms, PyYAML's `.inf`/`.nan`, and what int() and float() alone take.
SPELLINGS = (
    "010", "0o10", "0x10", "0b11", "1:20", "190:20:30", "1_0", "1_000.5", "+5", "-0", "0", "7", "1e3", "1E3", "1.5",
    ".5", "1.", "1e-2", "2.5e400", "1" + "0" * 5_000, ".inf", "-.inf", ".nan", "inf", "nan", "\u0661\u0660",
    "\uff11\uff10", "1,5", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "yes", "no", "on", "off", "y", "n", "Y",
    "On", "true", "false", "True", "FALSE", "=", "abc",
)
NULLS = ("~", "null", "Null", "NULL", "")
SWITCH = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}

# One option of each type, in a command that needs few others: (command, option, what the command needs besides).
OPTIONS = {
    "int": ("bm25", "top_k", {"data": "d", "output": "o"}),
    "float": ("bm25", "k1", {"data": "d", "output": "o"}),
    "bool": ("bm25", "overwrite", {"data": "d", "output": "o"}),
    "str": ("bm25", "tag", {"data": "d", "output": "o"}),
    "path": ("bm25", "output", {"data": "d"}),
    "optional path": ("bm25", "data", {"output": "o"}),
    "int list": ("evaluate", "k_values", {"model": ["m"], "data": ["d"]}),
    "str list": ("evaluate", "name", {"model": ["m"], "data": ["d"]}),
    "path list": ("evaluate", "data", {"model": ["m"]}),
}
WORDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "text", "path": "a path",
         "int list": "a whole number", "str list": "text", "path list": "a path"}
PARSERS: dict[str, argparse.ArgumentParser] = {}


def parser_of(command: str) -> argparse.ArgumentParser:
    if command not in PARSERS:
        PARSERS[command] = build_parser([command])
    return PARSERS[command]


def config_class(command: str) -> type:
    return next(action for action in parser_of(command)._actions if action.dest == "command").choices[
        command].config_class


def built(command: str, argv: list[str]) -> Any:
    """The config `retromae COMMAND ARGV` builds (what `cli.main` does before the command's work), or the
    ConfigError refusing it."""
    args = parser_of(command).parse_args([command, *argv])
    for name in ("handler", "command", "verbose", "threads", "options_class"):
        args.__dict__.pop(name, None)
    try:
        return build_config(config_class(command), args)
    except ConfigError as error:
        return error


def flags(values: dict[str, Any]) -> list[str]:
    return [part for name, value in values.items() if value is not None
            for part in (f"--{name.replace('_', '-')}", *(value if isinstance(value, list) else [value]))]


def from_file(tmp_path: Path, command: str, option: str, text: str, needs: dict[str, Any]) -> Any:
    """The option's value that a config file holding `option: text` gives, or the ConfigError refusing it."""
    path = tmp_path / "run.yaml"
    given = {key: value for key, value in needs.items() if value is not None}
    path.write_text((yaml.safe_dump(given) if given else "") + f"{option}: {text}\n")
    config = built(command, ["--config", str(path)])
    return config if isinstance(config, ConfigError) else getattr(config, option)


def from_flag(command: str, option: str, text: str, needs: dict[str, Any], switch: bool) -> Any:
    """The option's value that `--option=text` gives on the command line (a switch: `--x` for a true text, `--no-x`
    for a false one, `--x=text` otherwise, which argparse refuses), or the ConfigError refusing it."""
    flag = f"--{option.replace('_', '-')}"
    if switch and text in SWITCH:
        given = [flag if SWITCH[text] else f"--no-{flag[2:]}"]
    else:
        given = [f"{flag}={text}"]
    try:
        config = built(command, [*flags(needs), *given])
    except SystemExit as exit_info:
        return ConfigError(f"{flag}: argparse exit {exit_info.code}")
    return config if isinstance(config, ConfigError) else getattr(config, option)


def typed(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, [typed(item) for item in value] if isinstance(value, list) else value)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_a_config_files_text_gives_what_the_same_text_as_a_flag_gives(tmp_path, capsys, kind):
    command, option, needs = OPTIONS[kind]
    flag, accepted = f"--{option.replace('_', '-')}", 0
    for text in SPELLINGS:
        in_file = from_file(tmp_path, command, option, text, needs)
        on_line = from_flag(command, option, text, needs, kind == "bool")
        if isinstance(in_file, ConfigError) or isinstance(on_line, ConfigError):
            said = str(in_file).splitlines()
            assert isinstance(in_file, ConfigError) and isinstance(on_line, ConfigError), (text, in_file, on_line)
            assert len(said) == 1 and said[0].startswith(flag), (text, said)
            if kind != "bool":  # (a switch takes no text on the command line: argparse refuses it)
                assert str(in_file) == str(on_line), text
        else:
            assert typed(in_file) == typed(on_line), text
            accepted += 1
    capsys.readouterr()
    assert accepted >= (2 if kind == "bool" else 6), kind  # the walk compares values, not only refusals


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_a_null_in_a_config_file_is_the_option_not_given_or_refused(tmp_path, kind):
    """YAML's nulls, as JSON's null: the option not given where its default is None, refused where it is not."""
    command, option, needs = OPTIONS[kind]
    not_given = built(command, flags(needs))
    not_given = str(not_given) if isinstance(not_given, ConfigError) else getattr(not_given, option)
    for text in NULLS:
        in_file = from_file(tmp_path, command, option, text, needs)
        said = str(in_file) if isinstance(in_file, ConfigError) else in_file
        if not kind.startswith("optional"):
            assert said == f"--{option.replace('_', '-')}: expected {WORDS[kind]}, got None", (text, said)
        else:
            assert said in (None, not_given), (text, said)


def test_yaml_reads_a_bare_value_as_text_a_quoted_one_as_text_and_nulls_as_none(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("a: 010\nb: '010'\nc: [1:20, on, 2001-12-14, !!int 0x10, !!str 5]\nd: ~\ne:\n")
    values = load_config_file(path)
    assert values == {"a": "010", "b": "010", "c": ["1:20", "on", "2001-12-14", "0x10", "5"], "d": None, "e": None}
    assert [type(values[key]) for key in "ab"] == [Bare, str] and [type(item) for item in values["c"]] == [Bare] * 4 + [
        str]


@pytest.mark.parametrize("text, message", [
    ("k1: 1:20", "--k1: expected a number, got '1:20'"),
    ("top_k: 010", None),
    ("top_k: '10'", "--top-k: expected a whole number, got the text '10'"),  # quoted: text, as JSON's "10"
    ("overwrite: on", "--overwrite: expected true or false, got the text 'on'"),
    ("tag: on", None),
    ("top_k: " + "1" * 5_000, "--top-k: 1.11e+4999 is beyond what a whole-number option holds (2**63 - 1)"),
])
def test_bm25_from_a_config_file_runs_or_refuses_in_one_line(tmp_path, capsys, text, message):
    data = tmp_path / "beir"
    tiny_beir(data)
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {data}\noutput: {tmp_path / 'run.trec'}\n{text}\n")
    code = main(["bm25", "--config", str(config)])
    err = capsys.readouterr().err
    if message is None:
        assert code == 0, err
        written = (tmp_path / "run.trec").read_text().split("\n", 1)[0].split()
        assert written[5] == ("on" if text == "tag: on" else "bm25")
    else:
        assert (code, err.strip().splitlines()) == (2, [f"retromae: error: {message}"])
        assert not (tmp_path / "run.trec").exists()


@pytest.mark.parametrize("text, said", [
    ("1_0", "--top-k: expected a whole number, got '1_0'"),
    ("\u0661\u0660", "--top-k: expected a whole number, got '\u0661\u0660'"),
    ("0x10", "--top-k: expected a whole number, got '0x10'"),
    ("1" + "0" * 5_000, "--top-k: 1.00e+5000 is beyond what a whole-number option holds (2**63 - 1)"),
])
def test_a_flag_reads_numbers_in_plain_decimal_notation_as_data_files_do(text, said):
    assert str(from_flag("bm25", "top_k", text, {"data": "d", "output": "o"}, False)) == said


@pytest.mark.parametrize("body, said", [
    ('{"top_k": 10.0}', None),
    ('{"top_k": "010"}', "--top-k: expected a whole number, got the text '010'"),
    ('{"top_k": NaN}', "run.json: the number NaN is not finite (NaN or infinite)"),
    ('{"k1": 1e400}', "run.json: the number 1e400 is not finite (NaN or infinite)"),
    ('{"top_k": 1, "top_k": 2}', "run.json: top_k given twice"),
    ('{"overwrite": "yes"}', "--overwrite: expected true or false, got the text 'yes'"),
])
def test_a_json_config_file_goes_through_the_same_checks(tmp_path, body, said):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"data": "d", "output": "o"})[:-1] + ", " + body[1:])
    config = built("bm25", ["--config", str(path)])
    if said is None:
        assert config.top_k == 10 and type(config.top_k) is int
    else:
        assert str(config).removeprefix(f"{tmp_path}/") == said


@pytest.mark.parametrize("command", [info.name for info in discover_commands()])
def test_every_number_option_of_every_command_reads_a_config_files_text_as_its_flags(tmp_path, capsys, command):
    """Over every command: each number option given `010`, `1:20` and `0x10` in a config file and as its flag."""
    config_cls = config_class(command)
    specs = _field_specs(config_cls)
    numbers = [field for field in options(config_cls) if specs[field.name].scalar in (int, float)]
    for field in numbers:
        needs = required_values(config_cls, field.name)
        for text in ("010", "1:20", "0x10"):
            in_file = from_file(tmp_path, command, field.name, text, needs)
            on_line = from_flag(command, field.name, text, needs, False)
            assert str(in_file) == str(on_line), (field.name, text)
    capsys.readouterr()


@pytest.mark.parametrize("text", ["\u0661", "1_0", "\uff12"])
def test_threads_reads_its_number_in_plain_decimal_notation_too(capsys, text):
    with pytest.raises(SystemExit) as exit_info:  # argparse's refusal, after its usage line
        main(["--threads", text, "bm25", "--help"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"retromae: error: argument --threads: must be a positive whole number, got {text!r}")


@pytest.mark.parametrize("command", ["search", "evaluate", "index"])
@pytest.mark.parametrize("value", ["nprobe=1_0", "nprobe=\u0661\u0660"])
def test_faiss_search_parameters_are_read_in_plain_decimal_notation(command, value):
    """faiss reads `nprobe=1_0` as 1 where float() reads 10: the check now refuses what faiss would misread."""
    config_cls = config_class(command)
    said = from_flag(command, "params", value, required_values(config_cls, "params"), False)
    assert str(said) == f"--params: {value}: must be a whole number from 1 to 16777216"


@pytest.mark.parametrize("metric", ["ndcg@\u0661\u0660", "recall@\uff11"])
def test_a_metrics_cut_off_is_read_in_ascii_digits(metric):
    said = str(from_flag("evaluate", "metrics", metric, {"model": ["m"], "data": ["d"]}, False))
    assert said.startswith(f"--metrics: {metric!r} is not") and "\n" not in said, said
