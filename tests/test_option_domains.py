"""Every option of every command against values outside its declared domain (issue 50, items 5 and 6).

The walk is built from the CLI's registry, never by hand: `discover_commands`, and for each command the config class
its parser is built from (`parser.config_class`, set by `add_config_arguments`), with each field's type, `choices`
and `domain` as `retromae.runtime.options.option` declared them. Each value goes in three ways, parsed and validated
only (no command runs): on the command line (`build_config` over the parsed flags, as `retromae.cli.main` does), in a
YAML config file, and through the Python API (the config class itself). A value outside the declaration must be refused
by a `ConfigError` of one line naming the option; a value inside it may be accepted or refused by a cross-field check,
never end in any other exception. docs/reliability.md records the counts (`tally`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_beir

import retromae
from retromae.cli import build_parser, discover_commands, main
from retromae.objectives import OBJECTIVES
from retromae.objectives.condenser import Condenser
from retromae.pretraining.config import ObjectiveOptionFields, PretrainConfig
from retromae.runtime.options import (
    FINITE,
    INT64,
    REQUIRED,
    Bare,
    ConfigError,
    _ConfigLoader,
    _field_specs,
    build_config,
    choices_of,
    load_config_file,
    read_texts,
)

CLI_VALUES = ("0", "-1", "2.5", "nan", "inf", "-inf", "1e12", "1e30", "abc")
FILE_VALUES = ("0", "-1", "2.5", ".nan", ".inf", "1e12", "1e-2", "'abc'", "'3'", "true", "[1, 2]", "{a: 1}", "5",
               "null")
API_VALUES = (0, -1, 2.5, math.nan, math.inf, 1e12, 10**30, "abc", "3", True, [1, 2], {"a": 1}, None)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    parser: Any  # the top-level parser with this command's options
    config_cls: type


def commands() -> list[Command]:
    """Every command of the CLI with the config class its options build."""
    found = []
    for info in discover_commands():
        parser = build_parser([info.name])
        sub = next(action for action in parser._actions if action.dest == "command").choices[info.name]
        found.append(Command(info.name, parser, sub.config_class))
    return found


def options(config_cls: type) -> list[dataclasses.Field]:
    """The fields of `config_cls` declared with `option` (a flag each), in field order."""
    return [field for field in dataclasses.fields(config_cls) if field.init and "help" in field.metadata]


def flag(field: dataclasses.Field) -> str:
    return f"--{field.name.replace('_', '-')}"


def required_values(config_cls: type, skip: str) -> dict[str, Any]:
    """A placeholder ("x", or ["x"] for a list) for each required option but `skip`, and for each option required
    unless others are given when none of those is, so that values inside a domain reach the cross-field checks."""
    specs, given = _field_specs(config_cls), {}
    for field in options(config_cls):
        unless = field.metadata.get("required_unless")
        others = {name[2:].replace("-", "_") for name in re.findall(r"--[\w-]+", unless or "")}
        required = field.default is REQUIRED and field.default_factory is dataclasses.MISSING
        if field.name != skip and (required or (unless and not others & {*given, skip})):
            given[field.name] = ["x"] if specs[field.name].is_list else "x"
    return given


def in_domain(field: dataclasses.Field, config_cls: type, value: Any) -> bool:
    """Whether `value` lies inside what the declaration of `field` allows: the oracle of this walk."""
    spec = _field_specs(config_cls)[field.name]
    if value is None:
        return spec.optional
    items = value if spec.is_list and isinstance(value, list) else [value]
    return all(_item_in_domain(field, spec.scalar, item) for item in items)


def _item_in_domain(field: dataclasses.Field, scalar: type, value: Any) -> bool:
    if scalar in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return False
        if scalar is int and (not float(value).is_integer() or abs(value) > INT64):
            return False
        inside = (field.metadata.get("domain") or FINITE).holds(value)
    else:
        inside = isinstance(value, bool) if scalar is bool else isinstance(value, str)
    choices = choices_of(field)
    return inside and (choices is None or value in choices)


@dataclasses.dataclass(frozen=True)
class Case:
    way: str  # "command line", "config file", "python api"
    command: str
    option: str
    value: Any
    refused: bool  # the value lies outside the declaration
    outcome: str  # "accepted", "refused" (one line naming the option), "refused elsewhere", or the failure


def _outcome(call: Any, field: dataclasses.Field) -> str:
    """What `call()` did: accepted, refused naming `field` in one line, refused naming another option, or the
    exception it raised instead."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            call()
    except ConfigError as error:
        message = str(error)
        named = message.startswith(flag(field)) or f" {flag(field)}" in message or f": {field.name}:" in message
        return "refused" if named and "\n" not in message else f"refused elsewhere: {message}"
    except SystemExit as exit_info:  # argparse: a value outside `choices`; its last line names the flag
        last = stderr.getvalue().strip().splitlines()[-1]
        return "refused" if exit_info.code == 2 and flag(field) in last else f"exit {exit_info.code}: {last}"
    except Exception as error:  # noqa: BLE001 - what the walk looks for: anything but a one-line refusal
        return f"{type(error).__name__}: {error}"
    return "accepted"


def _parse_and_build(command: Command, argv: list[str]) -> Any:
    """What `retromae.cli.main` does before a command's work: parse, then build the command's config."""
    args = command.parser.parse_args(argv)
    for name in ("handler", "command", "verbose", "threads"):
        args.__dict__.pop(name, None)
    return build_config(command.config_cls, args)


def command_line_cases(command: Command) -> Iterator[Case]:
    specs = _field_specs(command.config_cls)
    for field in options(command.config_cls):
        spec = specs.get(field.name)
        if spec is None or (spec.scalar not in (int, float) and not choices_of(field)):
            continue  # text and switches take any text (or none)
        required = [part for name, value in required_values(command.config_cls, field.name).items()
                    for part in (f"--{name.replace('_', '-')}", *(value if isinstance(value, list) else [value]))]
        for text in CLI_VALUES:
            value = _number_or_text(text) if spec.scalar in (int, float) else text
            argv = [command.name, *required, f"{flag(field)}={text}"]
            yield Case("command line", command.name, field.name, text, not in_domain(field, command.config_cls, value),
                       _outcome(lambda argv=argv: _parse_and_build(command, argv), field))


def _number_or_text(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def config_file_cases(command: Command, folder: Path) -> Iterator[Case]:
    for field in options(command.config_cls):
        if field.name not in _field_specs(command.config_cls):
            continue
        for index, literal in enumerate(FILE_VALUES):
            path = folder / f"{command.name}-{field.name}-{index}.yaml"
            required = required_values(command.config_cls, field.name)
            path.write_text(yaml.safe_dump(required) + f"{field.name}: {literal}\n" if required else
                            f"{field.name}: {literal}\n")
            argv = [command.name, "--config", str(path)]
            yield Case("config file", command.name, field.name, literal,
                       not file_value_in_domain(field, command.config_cls, literal),
                       _outcome(lambda argv=argv: _parse_and_build(command, argv), field))


def file_value_in_domain(field: dataclasses.Field, config_cls: type, literal: str) -> bool:
    """Whether a config file's `name: literal` lies in the option's domain: a bare value read as its flag's text."""
    loaded = yaml.load(f"v: {literal}", _ConfigLoader)["v"]
    try:
        value = read_texts({field.name: loaded}, config_cls, Bare)[field.name]
    except ConfigError:
        return False
    return in_domain(field, config_cls, value)


def python_api_cases(command: Command) -> Iterator[Case]:
    for field in options(command.config_cls):
        if field.name not in _field_specs(command.config_cls):
            continue
        required = required_values(command.config_cls, field.name)
        for value in API_VALUES:
            yield Case("python api", command.name, field.name, value, not in_domain(field, command.config_cls, value),
                       _outcome(lambda values={**required, field.name: value}: command.config_cls(**values), field))


def walk(folder: Path) -> list[Case]:
    cases = []
    for command in commands():
        cases += [*command_line_cases(command), *config_file_cases(command, folder), *python_api_cases(command)]
    return cases


def tally(cases: list[Case]) -> dict[str, tuple[int, int]]:
    """way → (out-of-domain cases tried, refused in one line naming the option): the table of docs/reliability.md."""
    tried = Counter(case.way for case in cases if case.refused)
    held = Counter(case.way for case in cases if case.refused and case.outcome == "refused")
    return {way: (tried[way], held[way]) for way in tried}


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[Case]:
    return walk(tmp_path_factory.mktemp("configs"))


def test_the_walk_covers_every_command_and_option(cases):
    assert {case.command for case in cases} == {info.name for info in discover_commands()}
    walked = {(case.command, case.option) for case in cases if case.way == "python api"}
    for command in commands():
        assert {(command.name, field.name) for field in options(command.config_cls)} <= walked, command.name
    assert len(walked) > 250 and sum(case.refused for case in cases) > 3000


def test_every_number_option_declares_its_domain():
    """A number option without a domain takes any finite number (-1 steps, 0 documents): declare one, a word in its
    `option(...)` (docs/cli.md, "Declaring an option's domain"). FINITE says any finite number is meant."""
    undeclared = [f"{command.name} {flag(field)}" for command in commands() for field in options(command.config_cls)
                  if _field_specs(command.config_cls).get(field.name, None) is not None
                  and _field_specs(command.config_cls)[field.name].scalar in (int, float)
                  and field.metadata.get("domain") is None]
    assert not undeclared, f"declare a domain for: {', '.join(undeclared)}"


@pytest.mark.parametrize("way", ["command line", "config file", "python api"])
def test_every_value_outside_an_options_domain_is_refused_in_one_line_naming_it(cases, way):
    failed = [case for case in cases if case.way == way and case.refused and case.outcome != "refused"]
    assert not failed, "\n".join(f"{c.command} {c.option}={c.value!r}: {c.outcome}" for c in failed[:20])


def test_values_inside_a_domain_never_end_in_another_exception(cases):
    crashed = [case for case in cases if not case.refused
               and not (case.outcome in ("accepted", "refused") or case.outcome.startswith("refused elsewhere"))]
    assert not crashed, "\n".join(f"{c.way}: {c.command} {c.option}={c.value!r}: {c.outcome}" for c in crashed[:20])


# --- the audit's named cases, end to end through `retromae.cli.main` ------------------------------------------------

TRAINING = ["--model", "m", "--corpus", "c.txt", "--output", "out"]


@pytest.mark.parametrize("argv, message", [
    (["pretrain", *TRAINING, "--weight-decay", "-1"], "--weight-decay: must be 0 or positive, got -1.0"),
    (["pretrain", *TRAINING, "--pad-to-multiple-of", "-1"], "--pad-to-multiple-of: must be 0 or positive, got -1"),
    (["pretrain", *TRAINING, "--max-grad-norm", "-1"], "--max-grad-norm: must be 0 or positive, got -1.0"),
    (["pretrain", *TRAINING, "--seed", "-1"], "--seed: must lie in [0, 4294967295], got -1"),
    (["pretrain", *TRAINING, "--max-steps", "2.5"], "--max-steps: expected a whole number, got '2.5'"),
    (["search", "--index", "i", "--queries", "q", "--output", "o", "--top-k", "1000000000000"],
     "--top-k: must lie in [1, 100000], got 1000000000000"),
    (["quickstart", "--learning-rate", "-1"], "--learning-rate: must be positive, got -1.0"),
    (["adapt", *TRAINING, "--head-learning-rate", "-1"], "--head-learning-rate: must be positive, got -1.0"),
    (["finetune", "--model", "m", "--data", "d", "--output", "out", "--encode-batch-size", "0"],
     "--encode-batch-size: must be positive, got 0"),
    (["pretrain", *TRAINING, "--momentum", "0.5"],
     "--momentum: the retromae objective does not read it (read by --objective contriever)"),
    (["pretrain", *TRAINING, "--attention-window", "3"],
     "--attention-window: the retromae objective does not read it (read by --objective seed)"),
    (["pretrain", *TRAINING, "--objective", "mlm", "--bow-weight", "1"],
     "--bow-weight: the mlm objective does not read it (read by --objective dupmae)"),
])
def test_the_audits_cases_are_refused_in_one_line_before_any_work(argv, message, tmp_path, monkeypatch, capsys,
                                                                   tiny_model_dir):
    """The inputs exist (a model folder, a corpus), so only the option can be at fault."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.txt").write_text("a document\n")
    assert main([str(tiny_model_dir) if arg == "m" else arg for arg in argv]) == 2
    assert capsys.readouterr().err == f"retromae: error: {message}\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "c.txt"]  # nothing claimed, nothing written


def test_an_empty_quickstart_corpus_is_refused_before_the_tokenizer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("\n  \n")
    assert main(["quickstart", "--corpus", "empty.txt", "--output", "run"]) == 2
    assert capsys.readouterr().err == ("retromae: error: empty.txt: empty corpus: no document holds any text; give a "
                                       "corpus with documents\n")  # the one refusal (data.corpus.empty_corpus)
    assert not (tmp_path / "run").exists()


def test_every_option_an_objective_does_not_read_is_refused(tmp_path):
    """For each objective, each flat option it does not read, given its readers' default (a value in its domain):
    refused naming it, from the Python API and the command line alike."""
    tried = 0
    for name in OBJECTIVES:
        reads = {field.name for field in dataclasses.fields(OBJECTIVES.entry(name).options)}
        for field in dataclasses.fields(ObjectiveOptionFields):
            if field.name in reads:
                continue
            readers = OBJECTIVES.readers(field.name)
            value = next(option.default for option in dataclasses.fields(next(iter(readers.values())))
                         if option.name == field.name)
            value = 1 if value is None else value  # None is "not given"; 1 lies in skip_from's and the weight's domain
            with pytest.raises(ConfigError, match=f"^{flag(field)}: the {re.escape(name)} objective does not read it"):
                PretrainConfig(model="m", corpus=["c"], output=str(tmp_path), objective=name, **{field.name: value})
            tried += 1
    assert tried > 50


def test_the_python_api_refuses_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"^--max-steps: expected a whole number, got 2.5$"):
        retromae.pretrain(model="m", corpus=["c"], output=str(tmp_path / "out"), max_steps=2.5)
    with pytest.raises(ConfigError, match=r"^--top-k: must lie in \[1, 100000\], got 1000000000000$"):
        retromae.search(index="i", queries="q", output=str(tmp_path / "run"), top_k=10**12)
    assert list(tmp_path.iterdir()) == []


# --- config files: YAML's number spellings, keys given twice, wrong types named ---------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_yaml_exponents_read_as_numbers(tmp_path):
    path = write(tmp_path / "run.yaml", "model: m\ncorpus: [c]\noutput: o\nlearning_rate: 1e-2\nmax_steps: 1E3\n"
                                        "weight_decay: 5e-4\nwarmup_ratio: .5e-1\n")
    config = build_config(PretrainConfig, {"config": path})
    assert (config.learning_rate, config.max_steps, config.weight_decay, config.warmup_ratio) == (0.01, 1000, 5e-4,
                                                                                                  0.05)
    assert isinstance(config.max_steps, int)
    assert load_config_file(write(tmp_path / "text.yaml", "tag: '1e-2'\n")) == {"tag": "1e-2"}  # quoted: text


@pytest.mark.parametrize("name, text, message", [
    ("twice.yaml", "model: m\nseed: 1\nseed: 2\n", "twice.yaml: line 3: seed given twice"),
    ("nested.yaml", "retromae:\n  decoding: basic\n  decoding: enhanced\n",
     "nested.yaml: line 3: decoding given twice"),
    ("twice.json", '{"model": "m", "seed": 1, "seed": 2}', "twice.json: seed given twice"),
])
def test_a_key_given_twice_is_refused(tmp_path, name, text, message):
    with pytest.raises(ConfigError, match=f"^{tmp_path}/{message}$"):
        load_config_file(write(tmp_path / name, text))


@pytest.mark.parametrize("line, message", [
    ("max_steps: 2.5", "--max-steps: expected a whole number, got '2.5'"),
    ("max_steps: '3'", "--max-steps: expected a whole number, got the text '3'"),
    ("learning_rate: abc", "--learning-rate: expected a number, got 'abc'"),
    ("gradient_checkpointing: 'yes'", "--gradient-checkpointing: expected true or false, got the text 'yes'"),
    ("cache_dir: [5]", "--cache-dir: expected text, got a list (['5'])"),
    ("probe: {a: 1}", "--probe: expected text, got a mapping ({'a': '1'})"),
    ("corpus: [c, [7]]", "--corpus: expected text, got a list (['7'])"),
    ("report_to: [nothing]", "--report-to: must be one of"),
])
def test_wrong_types_in_a_config_file_name_the_option_and_the_type(tmp_path, line, message):
    corpus = "" if line.startswith("corpus") else "corpus: [c]\n"
    path = write(tmp_path / "run.yaml", f"model: m\noutput: o\n{line}\n{corpus}")
    with pytest.raises(ConfigError) as error:
        build_config(PretrainConfig, {"config": path})
    assert str(error.value).startswith(message) and "not supported between" not in str(error.value)


def test_a_config_file_json_number_out_of_domain_names_the_option(tmp_path):
    path = write(tmp_path / "run.json", json.dumps({"model": "m", "corpus": ["c"], "output": "o", "seed": -1}))
    with pytest.raises(ConfigError, match=r"^--seed: must lie in \[0, 4294967295\], got -1$"):
        build_config(PretrainConfig, {"config": path})


# --- Condenser's --skip-from against the backbone's depth -------------------------------------------------------------


@pytest.mark.parametrize("layers, skip_from, message", [
    (1, 99, "--skip-from: the backbone has 1 layer and Condenser's head reads one before the last"),
    (2, 5, "--skip-from 5: the backbone has 2 layers; give layer 1"),
    (3, 3, "--skip-from 3: the backbone has 3 layers; give a layer from 1 to 2"),
])
def test_skip_from_names_the_layers_the_backbone_has(layers, skip_from, message):
    from transformers import BertConfig, BertForMaskedLM

    from retromae.objectives.base import MaskingSettings

    model = BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                                       intermediate_size=32, max_position_embeddings=32))
    with pytest.raises(ConfigError) as error:
        Condenser(model, MaskingSettings(4, 50, 0.3, False), skip_from=skip_from)
    assert str(error.value).startswith(message) and "from 1 to 0" not in str(error.value)


# --- text that is no Unicode text, run tags and device names: checked with every other option value ------------------

NOT_UTF8 = b"a\xffb".decode("utf-8", "surrogateescape")  # what Python's argv holds for a byte that is not UTF-8


def text_options(command: Command) -> list[dataclasses.Field]:
    """The options of `command` that take text or a path (one or a list)."""
    specs = _field_specs(command.config_cls)
    return [field for field in options(command.config_cls) if field.name in specs
            and specs[field.name].scalar in (str, Path)]


def value_cases(command: Command, field: dataclasses.Field, text: str, folder: Path) -> dict[str, str]:
    """way → outcome of `text` given to `field` of `command` on the command line, in a JSON config file and through
    the Python API (the config class itself)."""
    required = required_values(command.config_cls, field.name)
    argv = [part for name, value in required.items() for part in (f"--{name.replace('_', '-')}",
                                                                  *(value if isinstance(value, list) else [value]))]
    path = folder / f"{command.name}-{field.name}.json"
    path.write_text(json.dumps({**required, field.name: text}))  # JSON: "\udcff", an escape a file may hold
    value = [text] if _field_specs(command.config_cls)[field.name].is_list else text
    in_file = _outcome(lambda: _parse_and_build(command, [command.name, "--config", str(path)]), field)
    if in_file.startswith(f"refused elsewhere: {path}: field '{field.name}' is not Unicode text"):
        in_file = "refused"  # the JSON reader's own refusal (`runtime.lines`), naming the file and the option
    return {"command line": _outcome(lambda: _parse_and_build(command, [command.name, *argv,
                                                                        f"{flag(field)}={text}"]), field),
            "config file": in_file,
            "python api": _outcome(lambda: command.config_cls(**{**required, field.name: value}), field)}


def test_every_text_or_path_option_refuses_what_is_not_unicode_text_in_one_line_naming_it(tmp_path):
    """`search --query $'apple \\xff'`, `encode --passage-prefix $'\\xff'` and `bm25 --tag $'a\\xff'` ended in
    tracebacks (a TypeError from the tokenizer, a UnicodeEncodeError after the whole search): every option's text,
    a path's too, is refused in one line naming the option, whichever way it is given."""
    failed, tried = [], 0
    for command in commands():
        for field in text_options(command):
            for way, outcome in value_cases(command, field, NOT_UTF8, tmp_path).items():
                tried += 1
                if outcome != "refused":
                    failed.append(f"{way}: {command.name} {flag(field)}: {outcome}")
    assert not failed, "\n".join(failed[:20])
    assert tried > 200


def test_the_refusal_says_which_byte_and_where(tmp_path):
    with pytest.raises(ConfigError, match=r"^--query: holds the byte 0xFF, which is not UTF-8, at character 7: an "
                                          r"option's value must be UTF-8 text"):
        retromae.search(index="i", query="apple \udcff", model="m")
    with pytest.raises(ConfigError, match=r"^--tag: holds the lone surrogate U\+D800 at character 2"):
        retromae.bm25(corpus="c", queries="q", output=str(tmp_path / "run"), tag="a\ud800")
    assert list(tmp_path.iterdir()) == []


def commands_with(name: str) -> list[Command]:
    """The commands that have the option `name`."""
    return [command for command in commands() if name in {field.name for field in options(command.config_cls)}]


def test_the_registry_has_the_commands_with_a_tag_and_a_device():
    assert [command.name for command in commands_with("tag")] == ["bm25", "search"]
    assert {command.name for command in commands_with("device")} >= {"encode", "evaluate", "score", "search"}


@pytest.mark.parametrize("tag", ["a b", "", "a\tb", " a", "a\n"])
def test_every_tag_option_refuses_a_tag_a_trec_run_cannot_hold(tag, tmp_path):
    """`bm25 --tag "a b"` was refused by a ValueError traceback when the run was written, after the search."""
    for command in commands_with("tag"):
        field = next(field for field in options(command.config_cls) if field.name == "tag")
        assert set(value_cases(command, field, tag, tmp_path).values()) == {"refused"}, command.name


@pytest.mark.parametrize("device", ["meta", "", "cpu:99", "gpu", "cuda:-1", "cuda:01", "CUDA", "xla"])
def test_every_device_option_refuses_a_device_no_command_runs_on(device, tmp_path):
    """`encode --device meta` ended in a RuntimeError traceback; `--device ""` was taken as the default and
    `--device cpu:99` as the CPU."""
    for command in commands_with("device"):
        field = next(field for field in options(command.config_cls) if field.name == "device")
        assert set(value_cases(command, field, device, tmp_path).values()) == {"refused"}, command.name


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_every_device_option_takes_the_devices_torch_runs_on(device, tmp_path):
    """Whether this machine has the device is said when the model is placed (`runtime.devices.resolve_device`)."""
    for command in commands_with("device"):
        field = next(field for field in options(command.config_cls) if field.name == "device")
        outcomes = value_cases(command, field, device, tmp_path)
        assert "refused" not in outcomes.values(), (command.name, outcomes)


def test_the_python_api_refuses_a_device_and_a_tag_before_any_work(tmp_path, tiny_model_dir, monkeypatch, capsys):
    import torch

    from retromae.models.encoder import Encoder
    from retromae.retrieval import run as retrieval_run

    with pytest.raises(ConfigError, match=r"^device: 'meta' is not a device a command runs on.* \(as --device\)$"):
        Encoder.load(str(tiny_model_dir), device=torch.device("meta"))
    monkeypatch.setattr(retrieval_run, "bm25_search", lambda *args: pytest.fail("searched before the tag's check"))
    tiny_beir(tmp_path / "beir")
    assert main(["bm25", "--data", str(tmp_path / "beir"), "--output", str(tmp_path / "run.trec"), "--tag",
                 "a b"]) == 2
    assert capsys.readouterr().err == ("retromae: error: --tag: 'a b' cannot be written in a TREC run: it holds a "
                                       "space at character 2\n")
    assert not (tmp_path / "run.trec").exists()
