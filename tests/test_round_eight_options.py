"""Round eight of the hostile-input audit: options given twice, and steps counted from a number of passes.

- A scalar option given twice kept its last value without a word (`encode --corpus A --corpus B` encoded B; `--config
  A --config B` read B; `--k 3 --top-k 9`; `--overwrite --no-overwrite`). Every option holding one value is stored by
  one rule (`runtime.options.store_once`): a second, different value, under any spelling, is refused in one line
  naming both; the same value again is that value. List options still collect every occurrence.
- `finetune --epochs`, `quickstart --finetune-epochs` and `adapt --passes` made their steps from a float product: an
  OverflowError at 1e308, 10^301 steps planned at 1e300. One count (`runtime.options.steps_from_passes`) computes
  exactly and refuses a count beyond the step domain (`STEPS`, which --max-steps now declares), before the output is
  claimed.
- A whole number beyond an option's range was quoted whole (309 digits for `--top-k 1e308`): shown short
  (`runtime.options.whole_text`).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pytest
from conftest import error_line, tiny_beir
from test_option_domains import commands

from retromae.adaptation.config import AdaptConfig
from retromae.adaptation.distill import steps_of
from retromae.adaptation.run import budget
from retromae.cli import build_parser, discover_commands, main
from retromae.finetuning.config import FinetuneConfig
from retromae.retrieval.config import BM25Config
from retromae.runtime.options import (
    MAX_STEPS,
    ConfigError,
    StoreOnce,
    build_config,
    check_values,
    steps_from_passes,
    whole_text,
)


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    return {command.name: command.parser for command in commands()}


def spellings(parser: argparse.ArgumentParser, name: str) -> dict[str, list[argparse.Action]]:
    """The command's options by where they store (`dest`): each with its actions (the flag, its old spellings)."""
    sub = next(action for action in parser._actions if action.dest == "command").choices[name]
    found: dict[str, list[argparse.Action]] = {}
    for action in sub._actions:
        if not isinstance(action, argparse._HelpAction | argparse._StoreTrueAction):  # a switch on twice is on
            found.setdefault(action.dest, []).append(action)
    return found


def two_values(action: argparse.Action) -> tuple[str, str] | None:
    """Two different values the option's parser accepts (two of its choices), or None where it has one choice."""
    if action.choices is None:
        return "1", "2"
    choices = list(dict.fromkeys(action.choices))
    return (str(choices[0]), str(choices[1])) if len(choices) > 1 else None


@pytest.mark.parametrize("name", [info.name for info in discover_commands()])
def test_every_option_of_one_value_given_twice_with_two_values_is_refused_naming_both(name, parsers):
    """Generated over each command's parser: every option storing one value, each ordered pair of its spellings
    (its flag, its short and old ones; `--x`/`--no-x` for a switch); `--config` and `--threads` among them."""
    parser, tried, single = parsers[name], 0, []
    for dest, actions in spellings(parser, name).items():
        kinds = {type(action) for action in actions}
        if kinds == {argparse._ExtendAction}:
            continue  # a list: below
        flag = f"--{dest.replace('_', '-')}"
        if any(issubclass(kind, argparse.BooleanOptionalAction) for kind in kinds):
            cases = [([flag, f"--no-{flag[2:]}"], f"{flag}, then --no-{flag[2:]}"),
                     ([f"--no-{flag[2:]}", flag], f"--no-{flag[2:]}, then {flag}")]
        else:
            assert all(issubclass(kind, StoreOnce) for kind in kinds), f"{name} {flag}: {kinds}"
            values = two_values(actions[0])
            if values is None:
                single.append(flag)
                continue
            strings = [string for action in actions for string in action.option_strings]
            cases = [([first, values[0], second, values[1]], f"{values[0]!r}, then {values[1]!r}")
                     for first, second in itertools.product(strings, repeat=2)]
        for argv, shown in cases:
            with pytest.raises(ConfigError) as refused:
                parser.parse_args([name, *argv])
            assert str(refused.value) == f"{flag}: given twice with different values ({shown}): give it once", argv
            tried += 1
    assert tried >= 5 and not single, single


@pytest.mark.parametrize("name", [info.name for info in discover_commands()])
def test_the_same_value_twice_is_that_value_and_a_list_collects_every_occurrence(name, parsers):
    parser = parsers[name]
    for dest, actions in spellings(parser, name).items():
        value = "1" if actions[0].choices is None else str(next(iter(actions[0].choices)))
        strings = [string for action in actions for string in action.option_strings if not string.startswith("--no-")]
        if isinstance(actions[0], argparse._ExtendAction):
            items = ["a", "b", "c"] if actions[0].choices is None else list(actions[0].choices)[:3]
            parsed = getattr(parser.parse_args([name, strings[0], items[0], strings[0], *items[1:]]), dest)
            assert list(map(str, parsed)) == items
        elif actions[0].nargs == 0:
            assert getattr(parser.parse_args([name, strings[0], strings[0]]), dest) is True
        else:
            parsed = getattr(parser.parse_args([name, strings[0], value, strings[-1], value]), dest)
            assert str(parsed) == value, (name, dest)


@pytest.mark.parametrize("argv, message", [
    (["encode", "--model", "m", "--corpus", "a.jsonl", "--corpus", "b.jsonl", "--output", "out"],
     "--corpus: given twice with different values ('a.jsonl', then 'b.jsonl'): give it once"),
    (["bm25", "--data", "d", "--config", "a.yaml", "--config", "b.yaml", "--output", "out"],
     "--config: given twice with different values ('a.yaml', then 'b.yaml'): give it once"),
    (["bm25", "--data", "d", "--k", "3", "--top-k", "9", "--output", "out"],
     "--top-k: given twice with different values ('3', then '9'): give it once"),
    (["bm25", "--data", "d", "--overwrite", "--no-overwrite", "--output", "out"],
     "--overwrite: given twice with different values (--overwrite, then --no-overwrite): give it once"),
    (["--threads", "1", "--threads", "2", "bm25", "--data", "d", "--output", "out"],
     "--threads: given twice with different values ('1', then '2'): give it once"),
    (["--threads", "2", "bm25", "--data", "d", "--output", "out", "--threads", "4"],  # before and after the command
     "--threads: given twice with different values ('2', then '4'): give it once"),
])
def test_the_audits_cases_are_refused_in_one_line_before_anything(argv, message, tmp_path, monkeypatch, capsys):
    """One line, after the note an old spelling prints (`--k`)."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    *notes, last = capsys.readouterr().err.splitlines()
    assert last == f"retromae: error: {message}"
    assert notes == (["retromae: note: --k is now --top-k; the old spelling will be removed in the next release"]
                     if "--k" in argv else [])
    assert list(tmp_path.iterdir()) == []


def test_a_flag_still_overrides_the_config_file(tmp_path):
    """Not an option given twice: the file gives the defaults, the command line what differs."""
    (tmp_path / "a.yaml").write_text("top_k: 3\n")
    args = build_parser(["bm25"]).parse_args(["bm25", "--data", "d", "--output", "o", "--config",
                                              str(tmp_path / "a.yaml"), "--top-k", "5"])
    for name in ("handler", "command", "options_class", "verbose"):
        args.__dict__.pop(name, None)
    assert build_config(BM25Config, args).top_k == 5


# --- steps from a number of passes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("passes, items, per_step, cap, steps", [
    (0.3, 10, 1, None, 3),  # the decimal given: 0.3 x 10 is 3 (the float product, 3.0000000000000004, made 4)
    (1.5, 7, 1, None, 11),
    (2.0, 7, 3, None, 5),
    (1e-9, 7, 1, None, 1),  # at least one step
    (1e308, 26, 8, 2000, 2000),  # adapt: capped, never an OverflowError
    (1e300, 26, 1, 2000, 2000),
])
def test_steps_from_passes_are_exact(passes, items, per_step, cap, steps):
    assert steps_from_passes("--passes", passes, items, per_step, cap=cap) == steps


@pytest.mark.parametrize("passes, shown", [(1e308, "1.30e+309"), (1e300, "1.30e+301"), (1e8, "1,300,000,000")])
def test_steps_beyond_the_step_domain_are_refused_naming_the_option_and_the_count(passes, shown):
    with pytest.raises(ConfigError) as refused:
        steps_from_passes("--epochs", passes, 26, 2)
    assert str(refused.value) == (f"--epochs {passes!r}: makes {shown} optimiser steps (26 batches a pass, 2 a step), "
                                  f"beyond the {MAX_STEPS:,} a run may take (the most --max-steps accepts): give a "
                                  "smaller --epochs")


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("steps") / "beir"
    tiny_beir(folder)
    return folder


@pytest.mark.parametrize("value", ["1e308", "1e300"])
@pytest.mark.parametrize("command, option", [("finetune", "--epochs"), ("quickstart", "--finetune-epochs")])
def test_a_count_of_passes_beyond_the_step_domain_is_refused_before_the_output_is_claimed(
        command, option, value, beir, tiny_model_dir, tmp_path, capsys):
    """finetune: 36 train queries in 4 batches of 8; quickstart: in 1 batch of 32 (its cpu preset's size)."""
    argv = {"finetune": ["finetune", "--model", str(tiny_model_dir), "--data", str(beir), "--batch-size", "8"],
            "quickstart": ["quickstart", "--data", str(beir), "--preset", "cpu"]}[command]
    assert main([*argv, "--output", str(tmp_path / "out"), option, value]) == 2
    batches = {"finetune": 4, "quickstart": 1}[command]
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {option} {float(value)!r}: makes "
                           f"{whole_text(int(float(value)) * batches)} optimiser steps ({batches} batches a pass)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("passes", [1e308, 1e300, 1.0])
def test_adapts_passes_are_capped_by_its_step_cap_never_an_overflow(passes):
    config = AdaptConfig(model="m", corpus=["c"], output="o", passes=passes)
    assert budget(config, 200) == (2000 if passes > 1 else 4)  # 200 blocks at 64 a step: 4
    assert steps_of(config, 200) == (2000 if passes > 1 else 25)  # 200 lists at 64 // 8 a step: 25


@pytest.mark.parametrize("config_cls, option", [(FinetuneConfig, "max_steps"), (AdaptConfig, "step_cap"),
                                                (AdaptConfig, "max_steps")])
def test_a_step_count_option_holds_the_step_domain(config_cls, option):
    check_values(config_cls, {option: MAX_STEPS})
    with pytest.raises(ConfigError, match=rf"^--{option.replace('_', '-')}: must lie in \[1, {MAX_STEPS}\], got "):
        check_values(config_cls, {option: MAX_STEPS + 1})


# --- a whole number beyond an option's range, shown short ---------------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "1" + "0" * 308])
def test_a_whole_number_beyond_an_option_is_shown_short(value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bm25", "--data", "d", "--output", "o", "--top-k", value]) == 2
    assert error_line(capsys) == ("retromae: error: --top-k: 1.00e+308 is beyond what a whole-number option holds "
                                  "(2**63 - 1)")


@pytest.mark.parametrize("option, said", [("--top-k", "a whole-number option holds (2**63 - 1)"),
                                          ("--k1", "a number option holds (1.80e+308)")])
def test_digits_beyond_a_float_are_read_exactly_not_as_infinite(option, said, tmp_path, monkeypatch, capsys):
    """400 digits were read through a float: `must be a finite number, got inf` for a number the user wrote whole."""
    monkeypatch.chdir(tmp_path)
    assert main(["bm25", "--data", "d", "--output", "o", option, "1" + "0" * 400]) == 2
    assert error_line(capsys) == f"retromae: error: {option}: 1.00e+400 is beyond what {said}"


@pytest.mark.parametrize("option, value, message", [
    ("top_k", 10**5000, "--top-k: 1.00e+5000 is beyond what a whole-number option holds (2**63 - 1)"),
    ("top_k", -(10**30), "--top-k: -1.00e+30 is beyond what a whole-number option holds (2**63 - 1)"),
    ("k1", 10**400, "--k1: 1.00e+400 is beyond what a number option holds (1.80e+308)"),
], ids=["10**5000", "-10**30", "10**400"])
def test_the_python_apis_huge_integers_are_refused_in_one_short_line(option, value, message):
    with pytest.raises(ConfigError) as refused:
        check_values(BM25Config, {option: value})
    assert str(refused.value) == message
