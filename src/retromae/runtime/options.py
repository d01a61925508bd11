"""Typed configs for every command: dataclasses that validate themselves and become CLI options.

Owns: declaring a documented field (`option`) with its domain (`Domain`: the numbers it accepts; the named ones
`POSITIVE`, `NON_NEGATIVE`, `PROBABILITY`, `FRACTION`, `OPEN_UNIT`, `SEED`, `TOP_K`, `STEPS`, `FINITE`, and
`at_least`/`between`; a whole number beyond one shown short, `whole_text`), the one count of optimiser steps from a
number of passes, held to the step domain (`steps_from_passes`), the one check of every field against its type, choices,
domain and own `check`, text and paths being Unicode text (`text_problem`: no byte that is not UTF-8, no lone surrogate;
the same rule for a name a command finds by listing a folder, `check_listed_name`)
(`check_fields`, run by `Options` before a config's own cross-field checks, so the command line, config files and the
Python API meet it alike), the conditions under which an option acts (`Acts`, `check_acts`: refused where it would
change nothing), the same checks for the arguments of the Python API's classes (`checked_arguments`), turning a config
dataclass into argparse options (required inputs first, then the command's own options, then one group per shared config
class that names itself in `OPTION_GROUP`, or that a field's `group` names; each default printed once; an option of one
value given twice with two values refused, `store_once`), old spellings of renamed options (hidden aliases that still
work for one release, with a note saying the new name), merging a YAML/JSON config file (its options flat, or nested in
the sections the config class names: `option_sections`) with command-line flags (flags win; a value written bare in
YAML read as the same text given as its flag, `read_texts`; a key given twice refused) and, for `--resume`, with the
options the run saved, and saving a resolved config as JSON beside the outputs. Does not own any command's fields:
each command declares its own dataclass. The vocabulary the names follow is in docs/cli.md.
"""

from __future__ import annotations

import argparse
import codecs
import collections.abc
import dataclasses
import decimal
import fractions
import functools
import inspect
import json
import locale
import math
import numbers
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from retromae.runtime.console import notice
from retromae.runtime.errors import ConfigError, DataError
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import (
    INTEGER_TEXT,
    MAX_NESTING,
    NON_FINITE_TEXT,
    NUMBER_TEXT,
    SURROGATE,
    UnreadableData,
    check_nesting,
    check_own_file,
    check_regular_file,
    loads_finite,
    quoted,
)

ConfigT = TypeVar("ConfigT")
REQUIRED = dataclasses.MISSING
SAVED_CONFIG = "config.json"  # the resolved options a training run saves in its output folder
# What an option reads, declared on its field (`option(..., reads=...)`): an input file or folder ("path"; `hf:NAME`:
# a hub data set), a model (a local folder or a hub name) or a tokenizer (a model, or a folder holding a tokenizer
# alone). `retromae.preflight` checks each before torch is imported; `runtime.run_folder` fingerprints each into a
# run's identity and keeps outputs apart from each (`reading_options`).
READS = ("path", "model", "tokenizer")
MODEL_READS = ("model", "tokenizer")


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "text", bool: "true or false", Path: "a path"}


INT64 = 2**63 - 1  # a whole-number option beyond this fits no tensor or array
MAX_CONFIG_SIZE = 10_000_000  # characters and items of a config file's values, YAML aliases expanded


@dataclasses.dataclass(frozen=True)
class Domain:
    """The numbers an option accepts: from `low` to `high` (None: unbounded), each end included unless `*_open`.
    Every number is also finite, and a whole number within what an int64 holds."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, number: float) -> bool:
        above = self.low is None or (number > self.low if self.low_open else number >= self.low)
        below = self.high is None or (number < self.high if self.high_open else number <= self.high)
        return above and below

    def describe(self) -> str:
        """The rule in words, e.g. "must be positive", "must lie in [0, 1)"."""
        if self.high is None:
            if self.low is None:
                return "must be a finite number"
            if self.low == 0:
                return "must be positive" if self.low_open else "must be 0 or positive"
            return f"must be {'above' if self.low_open else 'at least'} {_bound(self.low)}"
        if self.low is None:
            return f"must be {'below' if self.high_open else 'at most'} {_bound(self.high)}"
        return (f"must lie in {'(' if self.low_open else '['}{_bound(self.low)}, {_bound(self.high)}"
                f"{')' if self.high_open else ']'}")


def _bound(number: float) -> str:
    """A domain's end as written: 4294967295, 0.5."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


FINITE = Domain()  # any finite number: what an option without a declared domain accepts
POSITIVE = Domain(0, low_open=True)  # > 0 (a whole number: 1 or more)
NON_NEGATIVE = Domain(0)  # >= 0
PROBABILITY = Domain(0, 1)  # [0, 1]
FRACTION = Domain(0, 1, high_open=True)  # [0, 1): a share of something that must leave some over
OPEN_UNIT = Domain(0, 1, low_open=True, high_open=True)  # (0, 1)
SEED = Domain(0, 2**32 - 1)  # what numpy's and torch's generators take
MAX_TOP_K = 100_000  # documents per query a search may return: past this, the (queries, k) arrays alone fill memory
TOP_K = Domain(1, MAX_TOP_K)  # a count of ranked documents (top-k, a rank, a cut-off k)
MAX_STEPS = 10**9  # optimiser steps a run may take: at a millisecond a step, eleven days; at 0.05 s, a year and a half
STEPS = Domain(1, MAX_STEPS)  # a count of optimiser steps (--max-steps, and what `steps_from_passes` derives)


def steps_from_passes(option: str, passes: float, items: int, per_step: int = 1, unit: str = "batches",
                      cap: int | None = None) -> int:
    """The optimiser steps that `passes` (the float option `option`) over data of `items` (batches, or queries or
    blocks: `unit`) make at `per_step` of them a step: at least one, at most `cap` where one is given (adapt's
    --step-cap). Computed exactly from the decimal the option holds, so that no product overflows a float (`1e308`
    passes) or rounds up a step (`0.3` passes of 10 batches are 3 steps); ConfigError naming the option, its value and
    the count it makes when that count lies beyond the step domain (`STEPS`, what --max-steps accepts). The one count
    of steps from a number of passes: finetune's --epochs, quickstart's --finetune-epochs, adapt's --passes."""
    steps = math.ceil(fractions.Fraction(repr(float(passes))) * items / per_step)
    steps = max(1, steps if cap is None else min(cap, steps))
    if not STEPS.holds(steps):
        per = f", {per_step:,} a step" if per_step > 1 else ""
        raise ConfigError(f"{option} {float(passes)!r}: makes {whole_text(steps)} optimiser steps ({items:,} {unit} a "
                          f"pass{per}), beyond the {MAX_STEPS:,} a run may take (the most --max-steps accepts): give "
                          f"a smaller {option}")
    return steps


def whole_text(number: int) -> str:
    """A whole number as a message shows it: grouped by thousands (`12,345`), or past 20 digits to three in
    scientific notation (`1.00e+308`: 1e308 as a whole number has 309 digits), so that it never fills a line."""
    return f"{number:,}" if abs(number) < 10**20 else format(decimal.Decimal(number), ".2e")


def at_least(low: float) -> Domain:
    return Domain(low)


def between(low: float, high: float) -> Domain:
    """[low, high], both included."""
    return Domain(low, high)


def choices_of(field: dataclasses.Field) -> tuple | None:
    """The values a field allows: its `choices`, or what the function given as its choices returns now (a
    registry's names, so that an entry added at run time is allowed too)."""
    choices = field.metadata.get("choices")
    return choices() if callable(choices) else choices


@dataclasses.dataclass(frozen=True)
class Acts:
    """When an option has an effect, declared once with it: `holds(config)` says whether it does under the other
    options of `config`; `says` is the condition in words ("with --hybrid"); `on` holds option values under which
    it does, `off` one mapping of values per way it does not (a generated test builds its cases from them).
    Declared on the option's field (`option(..., acts=...)`) or, for a field a shared group declares, in the
    command's class (`ACTS = {"k1": ...}`); `check_acts` refuses an option given where its condition fails."""

    holds: Callable[[Any], bool]
    says: str
    on: Mapping[str, Any]
    off: tuple[Mapping[str, Any], ...]

    def __and__(self, other: Acts) -> Acts:
        """Both conditions: off when either is (the other one on)."""
        return Acts(lambda config: self.holds(config) and other.holds(config), f"{self.says} and {other.says}",
                    {**self.on, **other.on}, (*self.off, *({**self.on, **off} for off in other.off)))


def acts_with(name: str, *values: Any, on: Any = True, off: Any = False) -> Acts:
    """The option acts only when option `name` is one of `values`, or, without values, when it is set (a switch on,
    a path given): `on` and `off` are a value of each kind (a choice outside `values` for `off`)."""
    if values:
        return Acts(lambda config: getattr(config, name) in values, f"with {_flag(name)} {' or '.join(values)}",
                    {name: values[0]}, ({name: off},))
    return Acts(lambda config: getattr(config, name) not in (None, False, "", []), f"with {_flag(name)}",
                {name: on}, ({name: off},))


def acts_with_folder(name: str) -> Acts:
    """The option acts only when option `name` names a folder (a split of a BEIR folder; a training file has none)."""
    return Acts(lambda config: getattr(config, name) is not None and Path(getattr(config, name)).is_dir(),
                f"with a {_flag(name)} folder", {name: "."}, ({name: "train.jsonl"},))


def option(default: Any = REQUIRED, help: str = "", domain: Domain | None = None, *,
           choices: tuple | Callable[[], tuple] | None = None,
           short: str | None = None, aliases: tuple[str, ...] = (), required_unless: str | None = None,
           deprecated: str | None = None, check: Callable[[Any], None] | None = None,
           acts: Acts | None = None, reads: str | None = None) -> Any:
    """A dataclass field carrying its CLI help text, the numbers it accepts, allowed values and optional short flag.

    `domain`: the numbers a numeric option accepts (e.g. `POSITIVE`, `between(1, 100)`); without one, any finite
    number. Its type is the field's annotation; `check_fields` enforces both (and `choices`) for every source.
    `aliases`: old spellings (e.g. `("--k",)`) accepted, hidden from `--help`, with a note naming the new flag.
    `required_unless`: the option(s) that can stand in for this one (listed with the required inputs).
    `deprecated`: a field kept for one release only, hidden from `--help`; using it prints this message.
    `check`: for a value a library parses itself (a faiss factory string): raises ValueError saying what is wrong
    with it, refused as a ConfigError naming the option, by `check_fields` like the domain.
    `acts`: when the option has an effect (`Acts`); given where it has none, it is refused (`check_acts`).
    `reads`: what the option names that the command reads, one of `READS` (`reading_options`).
    """
    if reads is not None and reads not in READS:
        raise ValueError(f"reads={reads!r}: one of {', '.join(READS)}")
    metadata = {"help": help, "domain": domain, "choices": choices, "short": short, "aliases": tuple(aliases),
                "required_unless": required_unless, "deprecated": deprecated, "check": check, "acts": acts,
                "reads": reads}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def reading_options(config: object, kinds: tuple[str, ...] = READS) -> dict[str, str]:
    """The options of a config (class or instance) that read what `kinds` name: field name → what it reads."""
    if not dataclasses.is_dataclass(config):
        return {}
    return {field.name: field.metadata["reads"] for field in dataclasses.fields(config)
            if field.metadata.get("reads") in kinds}


def path_options(config: object) -> set[str]:
    """The options of a config (class or instance) that name paths: those that read (`reading_options`) and those
    typed `Path`. The rest (a title, a prefix, a factory string) are text, never looked up on disk."""
    if not dataclasses.is_dataclass(config):
        return set()
    config_cls = config if isinstance(config, type) else type(config)
    return set(reading_options(config)) | {name for name, spec in _field_specs(config_cls).items()
                                           if spec.scalar is Path}


def renamed_note(old: str, new: str) -> str:
    """What an old spelling prints: the new name, and that the old one goes in the next release."""
    return f"retromae: note: {old} is now {new}; the old spelling will be removed in the next release"


def store_once(namespace: argparse.Namespace, dest: str, value: Any, flag: str | None = None) -> None:
    """Store `value` of an option that holds one value (every option but a list's, `--config` too): given a second
    time, under any of its spellings (an old one, `--x`/`--no-x`), with another value, it is refused in one line
    naming both (`--top-k: given twice with different values ('5', then '7'): give it once`), never the first value
    dropped without a word. The same value again is that one value, accepted: a shell alias and the line typed may
    both give it. Options are parsed with no default in the namespace (`argparse.SUPPRESS`), so an attribute there
    is a value given earlier on the line. `flag`: the option's name in the refusal, where its value is kept under
    another `dest` (default: the flag of `dest`)."""
    if hasattr(namespace, dest) and getattr(namespace, dest) != value:
        first = _given(dest, getattr(namespace, dest))
        raise ConfigError(f"{flag or _flag(dest)}: given twice with different values ({first}, then "
                          f"{_given(dest, value)}): give it once")
    setattr(namespace, dest, value)


def _given(dest: str, value: Any) -> str:
    """A value of the command line as `store_once` names it: a switch by its spelling, anything else quoted."""
    if isinstance(value, bool):
        return _flag(dest) if value else f"--no-{_flag(dest)[2:]}"
    return quoted(str(value))


class StoreOnce(argparse.Action):
    """The action of an option holding one value: stores it (`store_once`; `shown_as`, the name a refusal gives it
    where its `dest` is not its flag's)."""

    shown_as: str | None = None

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        store_once(namespace, self.dest, values, self.shown_as)


class _SwitchOnce(argparse.BooleanOptionalAction):
    """`--x` / `--no-x`, stored by `store_once`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        store_once(namespace, self.dest, not option_string.startswith("--no-"))


class _OldSpelling(StoreOnce):
    """Stores like the option it stands for (`store_once`, sharing its value), after one note on stderr (`message`)
    per parse."""

    def __init__(self, option_strings: list[str], dest: str, message: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.message, self.noted = message, False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not self.noted:
            notice(self.message)
            self.noted = True
        super().__call__(parser, namespace, values, option_string)


def _field_kind(field: dataclasses.Field, hints: dict[str, Any]) -> tuple[type, bool]:
    """The scalar type of a field and whether it holds a list (Optional[...] unwrapped)."""
    hint = hints[field.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True
    return hint, False


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def is_required(field: dataclasses.Field) -> bool:
    """Whether the field has no default, or is needed unless another option stands in for it."""
    return _default_of(field) is REQUIRED or field.metadata.get("required_unless") is not None


def _group_title(config_cls: type, field: dataclasses.Field) -> str | None:
    """The field's own `group`, else `OPTION_GROUP` of the most basic class declaring it, or None for the command's
    own options."""
    if field.metadata.get("group"):
        return _text(field.metadata["group"])
    for cls in reversed(config_cls.__mro__):
        if field.name in getattr(cls, "__annotations__", {}):
            return cls.__dict__.get("OPTION_GROUP")
    return None


def _text(value: str | Callable[[], str]) -> str:
    """A help text or section title, or the function that makes it when `--help` is built (a registry's)."""
    return value() if callable(value) else value


def _help_text(field: dataclasses.Field) -> str:
    """The field's help with, once, whether it is required or its default (unset defaults say nothing)."""
    help_text, default = _text(field.metadata.get("help", "")), _default_of(field)
    if default is REQUIRED:
        return f"{help_text} (required)"
    if field.metadata.get("required_unless"):
        return f"{help_text} (required unless {field.metadata['required_unless']})"
    if default is None or default == []:
        return help_text
    shown = '""' if default == "" else " ".join(map(str, default)) if isinstance(default, list) else default
    return f"{help_text} (default: {shown})"


def _argument_kwargs(field: dataclasses.Field, hints: dict[str, Any]) -> dict[str, Any]:
    """The argparse keywords of a field's flag: a switch (`--x`/`--no-x`), a list collecting every occurrence (`--data
    A B` and `--data A --data B` alike), or one value, given once (`store_once`)."""
    scalar, is_list = _field_kind(field, hints)
    if scalar is bool:
        return {"action": _SwitchOnce}
    # Numbers stay text here: `build_config` reads them (`number_from_text`) and checks them with the config file's
    # and the Python API's values, so that every refusal is one line naming the option.
    kwargs: dict[str, Any] = {"type": str if scalar in (int, float) else scalar, "choices": choices_of(field),
                              "action": StoreOnce}
    if scalar in (int, float) and not choices_of(field):
        kwargs["metavar"] = "N" if scalar is int else "X"
    if is_list:
        kwargs.update(nargs="+", action="extend")
    return kwargs


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """Add one `--kebab-case` option per field of `config_cls` (and its hidden old spellings), plus `--config FILE`.

    Groups, in this order in `--help` and in the usage line: "required" (inputs without a default, or needed
    unless another option stands in; --output last), "options" (the command's own, with --config), then one
    per shared config class (its `OPTION_GROUP`), in field order. `--config` takes one file, as any option of one
    value (`store_once`): two would need an order of their own against each other and a resumed run's saved options,
    where one file under the flags keeps the one rule, flags win.
    """
    hints = typing.get_type_hints(config_cls)
    parser.config_class = config_cls  # the command's registry entry: which config its options build (tests walk it)
    placed: dict[str | None, list[dataclasses.Field]] = {"required": [], None: []}
    for field in dataclasses.fields(config_cls):
        title = "required" if is_required(field) else _group_title(config_cls, field)
        placed.setdefault(title, []).append(field)
    placed["required"].sort(key=lambda field: field.name == "output")  # inputs first, the output last
    for title, fields in placed.items():
        group = parser.add_argument_group(title or "options")
        if title is None:
            group.add_argument("--config", type=Path, action=StoreOnce, default=argparse.SUPPRESS,
                               help="YAML or JSON file of options; command-line flags override it")
        for field in fields:
            _add_field(group, field, hints)
    parser.usage = " ".join(["%(prog)s", *map(_usage_part, placed["required"]), "[options]"])


def _usage_part(field: dataclasses.Field) -> str:
    part = f"{_flag(field.name)} {field.name.upper()}"
    return f"[{part}]" if field.metadata.get("required_unless") else part


def _add_field(group: argparse._ArgumentGroup, field: dataclasses.Field, hints: dict[str, Any]) -> None:
    flag, kwargs = _flag(field.name), _argument_kwargs(field, hints)
    old_kwargs = {key: value for key, value in kwargs.items() if key != "action"}  # they act as `_OldSpelling`
    deprecated = field.metadata.get("deprecated")
    if deprecated:
        group.add_argument(flag, dest=field.name, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                           action=_OldSpelling, message=f"retromae: note: {deprecated}", **old_kwargs)
        return
    flags = [field.metadata["short"], flag] if field.metadata.get("short") else [flag]
    group.add_argument(*flags, dest=field.name, default=argparse.SUPPRESS, help=_help_text(field), **kwargs)
    for alias in field.metadata.get("aliases", ()):
        group.add_argument(alias, dest=field.name, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                           action=_OldSpelling, message=renamed_note(alias, flag), **old_kwargs)


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return REQUIRED


class Bare(str):
    """A config file's value written bare in YAML (`top_k: 010`, `k1: 1:20`, `prefix: on`, `name: 2001-12-14`): the
    text a flag would be given, which `build_config` reads as the command line reads that flag's text (`read_texts`),
    so that one text has one value wherever it is written. YAML 1.1 would read these as octal 8, base-60 80, true and
    a date: PyYAML's own types are never resolved (`_ConfigLoader`)."""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, resolving no type of YAML 1.1's own: a bare value is `Bare` text, read by the option it
    is given to as its flag's text; a bare `~`, `null` (`Null`, `NULL`) or nothing is null, JSON's null (an option's
    "not given", where its default is None, refused elsewhere); a quoted value is text. A value tagged with a type
    (`!!int 0x10`) is `Bare` too. Refuses a key given twice in one mapping (PyYAML keeps the last silently), and a
    merge key (`<<: *anchor`, bare or tagged `!!merge`): a config file holds its options itself."""

    yaml_implicit_resolvers: dict[str | None, list[tuple[str, re.Pattern]]] = {}

    def construct_bare(self, node: yaml.ScalarNode) -> Bare:
        return Bare(self.construct_scalar(node))

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: a merge key (<<) is not read: a config file "
                                  "is one mapping of options; write each option there")
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | type(None)):  # `? [a, b]`: a list can name nothing
                raise ConfigError(f"line {key_node.start_mark.line + 1}: a key must be a name, not a "
                                  f"{type(key).__name__}")
            if key in seen:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: {key} given twice")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_BARE_TAG = "tag:retromae:bare"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_ConfigLoader.add_implicit_resolver(_MERGE_TAG, re.compile(r"<<\Z"), ["<"])
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"(?:~|null|Null|NULL|)\Z"),
                                    ["~", "n", "N", ""])
_ConfigLoader.add_implicit_resolver(_BARE_TAG, re.compile(""), None)  # after null: any other bare value
for _tag in (_BARE_TAG, *(f"tag:yaml.org,2002:{kind}" for kind in ("bool", "int", "float", "timestamp"))):
    _ConfigLoader.add_constructor(_tag, _ConfigLoader.construct_bare)


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON mapping of option names (snake_case or kebab-case) to values; a key given twice, a key
    that is not a name, and what the parser cannot turn into a value (`_parsed_config`) are refused naming the file."""
    check_regular_file(Path(path), "config file", missing_ok=True)  # a FIFO or /dev/zero would never end
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is skipped
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error
    values = _parsed_config(Path(path), text)
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of option names to values")
    return {str(key).replace("-", "_"): value for key, value in values.items()}


def _expanded_size(value: Any, sizes: dict[int, int]) -> int:
    """The characters and items of a config file's value with its YAML aliases expanded (`sizes`: id → the size of
    a list or mapping already counted), counted without expanding them: a few lines of aliases can stand for 10**9
    items, which any message showing the value would print."""
    if isinstance(value, str):
        return len(value) + 1
    if not isinstance(value, dict | list):
        return 1
    if id(value) not in sizes:
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        sizes[id(value)] = 1 + sum(_expanded_size(item, sizes) for item in items)
    return sizes[id(value)]


def _parsed_config(path: Path, text: str) -> Any:
    """The value of a config file's `text`: JSON by the one JSON parser (`loads_finite`), else YAML, nested at most
    `MAX_NESTING` deep; ConfigError naming `path` for text that is not JSON or YAML or that its parser cannot turn
    into a value (nested thousands deep, an integer of thousands of digits, a date that is none)."""
    is_json = path.suffix == ".json"
    try:
        values = loads_finite(text) if is_json else yaml.load(text, _ConfigLoader)
        if not is_json:  # (JSON: `loads_finite` checked it)
            check_nesting(values)
        if _expanded_size(values, {}) > MAX_CONFIG_SIZE:
            raise ConfigError(f"its values, with YAML aliases expanded, hold more than {MAX_CONFIG_SIZE:,} characters "
                              "and items")
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {error}") from error
    except (ConfigError, UnreadableData) as error:
        raise ConfigError(f"{path}: {error}") from error
    except RecursionError:
        raise ConfigError(f"{path}: mappings or lists nested more than {MAX_NESTING} levels deep") from None
    except ValueError as error:  # YAML: int() of thousands of digits, a date out of range
        raise ConfigError(f"{path}: not valid YAML: {str(error).split(';')[0][:200]}") from None
    return values


def build_config(config_cls: type[ConfigT], args: argparse.Namespace | dict[str, Any]) -> ConfigT:
    """Merge the options a resumed run saved (`--resume`), `--config FILE` (if given) and explicit flags, each
    overriding the one before, into a validated `config_cls`."""
    given = dict(vars(args) if isinstance(args, argparse.Namespace) else args)
    config_path = given.pop("config", None)
    values = _new_spellings(_flat_values(load_config_file(config_path), config_cls, config_path, given),
                            config_cls) if config_path else {}
    known = {field.name for field in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{config_path}: unknown option(s) {', '.join(unknown)}")
    values = {**_saved_options(given, known), **values}
    flags = read_texts(given, config_cls, str) if isinstance(args, argparse.Namespace) else given
    values.update({key: value for key, value in flags.items() if key in known})
    values = read_texts(values, config_cls, Bare)
    check_values(config_cls, values)  # a bad value is named even where a required option is missing too
    missing = [_flag(f.name) for f in dataclasses.fields(config_cls)
               if f.name not in values and _default_of(f) is REQUIRED]
    if missing:
        raise ConfigError(f"missing required option(s): {', '.join(missing)}")
    try:
        config = config_cls(**values)
    except TypeError as error:
        raise ConfigError(str(error)) from error
    if not isinstance(config, Options):  # a config class of its own (a test's): the same checks, after its own
        check_fields(config)
        check_acts(config)
    return config


def check_command_line(config_cls: type, args: argparse.Namespace) -> None:
    """The command line's own values checked against their options' domains (`check_values`), as `build_config`
    will check them, so that the command line answers a value out of its domain before any other check."""
    given = {key: value for key, value in vars(args).items() if key != "config"}
    check_values(config_cls, read_texts(given, config_cls, str))


def read_texts(values: dict[str, Any], config_cls: type, kind: type) -> dict[str, Any]:
    """`values` with each text of `kind` (`str`: the command line's, `Bare`: a config file's bare values) read as
    its option's type, one by one in a list: a number's by `number_from_text`, a switch's `true` or `false` (`True`,
    `TRUE`, ...; any other text is left to be refused) as True or False, text as text. The one reading of an
    option's text, wherever it is written."""
    specs = _field_specs(config_cls)
    read = {}
    for name, value in values.items():
        spec = specs.get(name)
        if spec is not None and (isinstance(value, kind) or isinstance(value, list) and spec.is_list):
            value = ([_text_read(name, spec.scalar, kind, item) for item in value] if isinstance(value, list)
                     else _text_read(name, spec.scalar, kind, value))
        read[name] = value
    return read


def _text_read(name: str, scalar: type, kind: type, value: Any) -> Any:
    if not isinstance(value, kind):
        return value
    if scalar in (int, float):
        return number_from_text(name, scalar, value)
    if scalar is bool and value in _SWITCH_TEXTS:
        return value.lower() == "true"
    return str(value)


_SWITCH_TEXTS = ("true", "True", "TRUE", "false", "False", "FALSE")  # YAML 1.2's and JSON's spellings


def number_from_text(name: str, scalar: type, text: Any) -> Any:
    """A number given as text (a flag's, a config file's bare value): `3`, `-2.5`, `1e-2` in plain decimal
    notation (`lines.NUMBER_TEXT`, the rule of numbers in data files: int() and float() would also take `1_0`,
    `٣` or `１`, and YAML 1.1 `010` as octal and `1:20` in base 60), or `nan`/`inf` (refused later by its domain); a
    whole number may be written `1e3`, and digits alone are read exactly (400 of them are beyond what the option
    holds, not infinite). Anything else is refused naming the option and the type it takes."""
    if not isinstance(text, str):
        return text
    if INTEGER_TEXT.fullmatch(text):  # exactly, beyond a float's range too
        try:
            return int(text)  # (`_number` makes it the option's type, or refuses it beyond that type's range)
        except ValueError:  # more digits than int() reads (`sys.get_int_max_str_digits()`)
            raise _beyond(_flag(name), scalar, format(decimal.Decimal(text), ".2e")) from None
    if not (NUMBER_TEXT.fullmatch(text) or NON_FINITE_TEXT.fullmatch(text)):
        raise ConfigError(f"{_flag(name)}: expected {_TYPE_WORDS[scalar]}, got {quoted(text)}")
    number = float(text)
    if scalar is int and math.isfinite(number):
        if not number.is_integer():
            raise ConfigError(f"{_flag(name)}: expected {_TYPE_WORDS[int]}, got {quoted(text)}")
        return int(number)
    return number


def _flat_values(values: dict[str, Any], config_cls: type, path: Path, given: dict[str, Any]) -> dict[str, Any]:
    """A config file's values with one section's options moved to the top level, where flat keys also name them.
    A config class with sections names them (`option_sections()`: a section → the options it may hold, e.g. an
    objective's) and the field that chooses one (`SECTION_FIELD`, e.g. "objective"): the chosen section applies (the
    flag's choice, else the file's, else the default); the others are checked and left unused, so that one file can
    hold several objectives' options."""
    if not hasattr(config_cls, "option_sections"):
        return values
    sections = config_cls.option_sections()  # a section is a mapping: `seed: 42` is --seed, `seed: {...}` SEED's
    nested = {key for key, value in values.items() if key in sections and isinstance(value, dict)}
    flat = {key: value for key, value in values.items() if key not in nested}
    chooser = next(field for field in dataclasses.fields(config_cls) if field.name == config_cls.SECTION_FIELD)
    chosen = given.get(chooser.name, flat.get(chooser.name, _default_of(chooser)))
    for name in sorted(nested):
        options = {key.replace("-", "_"): value for key, value in values[name].items()}
        unknown = sorted(set(options) - sections[name])
        if unknown:
            raise ConfigError(f"{path}: {name}: unknown option(s) {', '.join(unknown)} (it reads "
                              f"{', '.join(sorted(sections[name])) or 'none'})")
        if name == chosen:
            clashes = sorted(key for key in options if key in flat and flat[key] != options[key])
            if clashes:
                raise ConfigError(f"{path}: {', '.join(clashes)} given twice, flat and under {name}, with "
                                  "different values")
            flat.update(options)
    return flat


def _saved_options(given: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """With `--resume --output DIR`: the options the run saved in DIR/config.json (`save_config`), so that a resume
    needs no option repeated; nothing otherwise."""
    if not (given.get("resume") and given.get("output") and "resume" in known):
        return {}
    path = Path(given["output"]) / SAVED_CONFIG
    check_own_file(path)  # the run's own record: a link there is not read through
    if not path.is_file():
        return {}
    saved = load_config_file(path)
    return {key: value for key, value in saved.items() if key in known and key not in ("resume", "overwrite")}


def _new_spellings(values: dict[str, Any], config_cls: type) -> dict[str, Any]:
    """A config file's values with old option names renamed (a note for each), deprecated ones noted."""
    for field in dataclasses.fields(config_cls):
        for alias in field.metadata.get("aliases", ()):
            key = alias.lstrip("-").replace("-", "_")
            if key in values:
                notice(renamed_note(key, field.name))
                values[field.name] = values.pop(key)
        if field.metadata.get("deprecated") and field.name in values:
            notice(f"retromae: note: {field.metadata['deprecated']}")
    return values


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (paths become strings)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def save_config(config: Any, path: Path) -> None:
    """Write the resolved config as JSON, atomically, as a file of the run's own (`runtime.io.atomic_path`'s `own`:
    a link or FIFO put in the run folder is refused, never written through)."""
    write_text_atomic(Path(path), json.dumps(config_to_dict(config), indent=2) + "\n", own=True)


def require(condition: bool, field: str, message: str) -> None:
    """Validation helper for `__post_init__`: raise ConfigError naming the field."""
    if not condition:
        raise ConfigError(f"{_flag(field)}: {message}")


@dataclasses.dataclass(frozen=True)
class _FieldSpec:
    """What a field's annotation says it holds: `scalar` (int, float, str, bool or Path), a list of them, or None."""

    scalar: type
    is_list: bool
    optional: bool


@functools.cache
def _field_specs(config_cls: type) -> dict[str, _FieldSpec]:
    """name → `_FieldSpec` of each field of `config_cls` whose annotation is one `check_fields` knows."""
    hints = typing.get_type_hints(config_cls)
    specs = {}
    for field in dataclasses.fields(config_cls):
        hint, optional = hints.get(field.name), False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            kinds = [arg for arg in typing.get_args(hint) if arg is not type(None)]
            optional = len(kinds) < len(typing.get_args(hint))
            hint = kinds[0] if len(kinds) == 1 else None
        is_list = typing.get_origin(hint) is list
        scalar = typing.get_args(hint)[0] if is_list else hint
        if scalar in _TYPE_WORDS:
            specs[field.name] = _FieldSpec(scalar, is_list, optional or field.default is None)
    return specs


def check_fields(config: Any) -> None:
    """ConfigError naming the first option of the dataclass `config` whose value is not of its annotated type, not
    among its `choices` or outside its `domain` (`option`); non-finite numbers are refused everywhere. Values are
    normalised in place: a whole float for an int (`1e3` from YAML), an int for a float, text for a Path, one value
    for a list of one. The one check of every option, whichever way the config was built (`Options`)."""
    for field in dataclasses.fields(config):
        if field.init:
            object.__setattr__(config, field.name, _checked_value(type(config), field, getattr(config, field.name)))


def check_values(config_cls: type, values: dict[str, Any]) -> None:
    """`check_fields` over a mapping of some of the options of `config_cls` (those it declares), before the config
    is built."""
    for field in dataclasses.fields(config_cls):
        if field.init and field.name in values:
            _checked_value(config_cls, field, values[field.name])


def conditions(config_cls: type) -> dict[str, Acts]:
    """Each option of `config_cls` that acts only under a condition, with it: declared on its field (`option(...,
    acts=)`) or, for a field of a shared group, in the `ACTS` of a class of the command (the most derived wins)."""
    found = {field.name: field.metadata["acts"] for field in dataclasses.fields(config_cls)
             if field.metadata.get("acts") is not None}
    for cls in reversed(config_cls.__mro__):
        found.update(cls.__dict__.get("ACTS", {}))
    return found


def check_acts(config: Any) -> None:
    """ConfigError naming the first option of `config` that is given (not at its default) where its condition
    (`conditions`) says it has no effect: an option either acts or is refused. The one check, for every source."""
    fields = {field.name: field for field in dataclasses.fields(config)}
    for name, acts in conditions(type(config)).items():
        value = getattr(config, name)
        if value not in (None, _default_of(fields[name])) and not acts.holds(config):
            raise ConfigError(f"{_flag(name)}: acts only {acts.says}; here it would change nothing: drop it (or "
                              f"give what it needs)")


def _checked_value(config_cls: type, field: dataclasses.Field, value: Any) -> Any:
    spec = _field_specs(config_cls).get(field.name)
    if spec is None or (value is None and spec.optional):
        return value
    if spec.is_list:
        return [_checked(field, spec.scalar, item) for item in (value if isinstance(value, list | tuple) else [value])]
    return _checked(field, spec.scalar, value)


def _checked(field: dataclasses.Field, scalar: type, value: Any) -> Any:
    """`value` as `scalar`, within the field's choices and domain; ConfigError naming the field otherwise."""
    flag = _flag(field.name)
    if scalar in (int, float):
        value = _number(flag, scalar, value, field.metadata.get("domain"))
    elif not isinstance(value, bool if scalar is bool else str | os.PathLike):
        raise ConfigError(f"{flag}: expected {_TYPE_WORDS[scalar]}, got {_shown(value)}")
    elif isinstance(value, os.PathLike):  # its `__fspath__` asked once: what is checked is what is used
        value = _path_text(flag, value)
    if scalar is Path and not isinstance(value, Path):
        value = Path(value)
    if scalar in (str, Path) and (problem := text_problem(str(value))) is not None:
        raise ConfigError(f"{flag}: {problem}")
    choices = choices_of(field)
    if choices is not None and value not in choices:
        raise ConfigError(f"{flag}: must be one of {', '.join(map(str, choices))}, got {_shown(value)}")
    if field.metadata.get("check") is not None:
        try:
            field.metadata["check"](value)
        except ValueError as error:
            raise ConfigError(f"{flag}: {error}") from None
    return value


def _path_text(flag: str, value: os.PathLike) -> str | Path:
    """A path-like's path, asked of it once (a Path kept as it is); ConfigError naming the option when its
    `__fspath__` gives no text."""
    if isinstance(value, Path):
        return value
    try:
        text = os.fspath(value)
    except Exception as error:  # noqa: BLE001  (a user's `__fspath__` may raise anything)
        raise ConfigError(f"{flag}: expected a path, got {_shown(value)[:80]} ({type(error).__name__})") from None
    if not isinstance(text, str):
        raise ConfigError(f"{flag}: expected a path of text, got {_shown(value)[:80]}, whose __fspath__ gives "
                          f"{_shown(text)[:80]}")
    return text


def text_problem(text: str) -> str | None:
    """Why `text` is no Unicode text (a lone surrogate: Python's stand-in for a byte of a command-line argument that
    is not UTF-8, or a JSON `\\ud800` escape), which no tokenizer takes and no UTF-8 file can hold; None when it is.
    Bytes that are UTF-8, read in a locale whose encoding is not, are said to be so (`_locale_misreading`)."""
    found = SURROGATE.search(text)
    if found is None:
        return None
    if (misread := _locale_misreading(text)) is not None:
        return misread
    code = ord(found.group())
    what = f"the byte 0x{code - 0xDC00:02X}, which is not UTF-8," if 0xDC80 <= code <= 0xDCFF else (
        f"the lone surrogate U+{code:04X}")
    return (f"holds {what} at character {found.start() + 1}: an option's value must be UTF-8 text (a file's name "
            "too: rename it, or link to it under a UTF-8 name)")


def _locale_misreading(text: str) -> str | None:
    """Why `text`, which holds bytes Python could not decode, is UTF-8 all the same, when it is: the locale's encoding
    (`sys.getfilesystemencoding()`, which Python decodes the command line and file names with: ASCII under LC_ALL=C
    with PYTHONUTF8=0) is not UTF-8, and the bytes as given are. None otherwise: the value itself is not UTF-8."""
    encoding = sys.getfilesystemencoding()
    if codecs.lookup(encoding).name == "utf-8":
        return None
    try:
        text.encode(encoding, "surrogateescape").decode("utf-8")
    except UnicodeError:
        return None
    return (f"is UTF-8, but the locale ({locale.setlocale(locale.LC_CTYPE)}) decodes the command line and file names "
            f"as {encoding}: run retromae under a UTF-8 locale (e.g. LC_ALL=C.UTF-8) or with PYTHONUTF8=1")


def check_listed_name(path: Path) -> None:
    """DataError naming the folder and the name of `path` (as repr shows it: a byte that is not UTF-8 as `\\udcff`),
    found by listing a folder that a command reads (a corpus folder, a folder of data sets), when that name is no UTF-8
    text (`text_problem`): the rule of a name given as an option, for the names a command finds itself, so that no
    command reads such a file and no other fails on its name."""
    problem = text_problem(path.name)
    if problem is not None:
        raise DataError(f"{path.parent}: the name {path.name!r} {problem}")


def _number(flag: str, scalar: type, value: Any, domain: Domain | None) -> int | float:
    """`value` as the option's number (`scalar`) in its domain; a whole number beyond what the option holds shown
    short (`whole_text`), an integer of the Python API too large for a float refused, never an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{flag}: expected {_TYPE_WORDS[scalar]}, got {_shown(value)}")
    whole = isinstance(value, numbers.Integral)
    if not whole and not math.isfinite(value):
        raise ConfigError(f"{flag}: must be a finite number, got {float(value)}")
    if scalar is int:
        if not whole and not float(value).is_integer():
            raise ConfigError(f"{flag}: expected {_TYPE_WORDS[int]}, got {value}")
        value = int(value)
        if abs(value) > INT64:
            raise _beyond(flag, int, whole_text(value))
    elif whole and abs(int(value)) > sys.float_info.max:
        raise _beyond(flag, float, whole_text(int(value)))
    else:
        value = float(value)
    if domain is not None and not domain.holds(value):
        raise ConfigError(f"{flag}: {domain.describe()}, got {value}")
    return value


def _beyond(flag: str, scalar: type, shown: str) -> ConfigError:
    """The refusal of a whole number (`shown` short) beyond what an option of `scalar` holds."""
    holds = "a whole-number option holds (2**63 - 1)" if scalar is int else (
        f"a number option holds ({sys.float_info.max:.2e})")
    return ConfigError(f"{flag}: {shown} is beyond what {holds}")


def _shown(value: Any) -> str:
    """A wrong value in a refusal: text quoted and called text (`"3"` is not the number 3), a list or mapping named."""
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list | tuple | dict):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} ({value!r})"[:120]
    return repr(value)


def checked_arguments(config_cls: type, unchecked: tuple[str, ...] = (), text_lists: tuple[str, ...] = (),
                      checks: Mapping[str, Callable[[str, Any, Mapping[str, Any]], Any]] | None = None,
                      **options: str | tuple[str, Callable[[Any], Any]]) -> Callable[[Callable], Callable]:
    """A method of the Python API whose arguments are options of a command: `argument="option"` (or `(option, how
    to read the argument's values)`), each given argument checked by the one check of that option (`check_values`
    against `config_cls`) before the method runs, and refused naming the argument and the option, in one line, as
    the command line would be (`Searcher.search("x", k="3")`: `k: expected a whole number, got the text '3' (as
    --top-k)`). None is refused where the argument's default is not None. The method then runs on the values as
    checked, as a config's fields hold them: a whole number given as `3.0` (or `numpy.float32(3)`) as the int 3, a
    path-like as the one path its `__fspath__` gave the check (an argument read through its own function is passed as
    given: the function only says what to check). `text_lists`: the arguments that are a list of texts (an encoder's
    `texts`), each checked by `checked_texts` and passed on as the list checked. `checks`: the arguments that are the
    method's own data (query ids, vectors, scores), each checked after the options, given or not, by its function
    `check(argument, value, arguments)` (`arguments`: the method's, as bound and checked so far, self included),
    which refuses in one line naming the argument or returns the value the method gets. `unchecked`: the arguments
    that are nothing to check (a progress bar); the decorated method records them (`checked_options`, `text_lists`,
    `checks`, `unchecked`, `config_class`) and its check alone (`check`, which returns the arguments as the method
    gets them)."""
    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        def check(*args: Any, **kwargs: Any) -> inspect.BoundArguments:
            bound = signature.bind(*args, **kwargs)
            _check_bound(bound, config_cls, text_lists, options, checks or {})
            return bound

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            bound = check(*args, **kwargs)
            return function(*bound.args, **bound.kwargs)

        checked.checked_options, checked.unchecked, checked.check = dict(options), tuple(unchecked), check
        checked.text_lists, checked.checks, checked.config_class = tuple(text_lists), dict(checks or {}), config_cls
        return checked

    return decorate


def _check_bound(bound: inspect.BoundArguments, config_cls: type, text_lists: tuple[str, ...],
                 options: Mapping[str, str | tuple[str, Callable[[Any], Any]]],
                 checks: Mapping[str, Callable[[str, Any, Mapping[str, Any]], Any]]) -> None:
    """`checked_arguments`' check of one call, in place: the text lists, then the options given, then the method's own
    data arguments (given or not), each replaced by the value the method gets."""
    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    parameters = bound.signature.parameters
    for argument in text_lists:
        if argument in bound.arguments:
            bound.arguments[argument] = checked_texts(argument, bound.arguments[argument])
    for argument, spec in options.items():
        if argument in bound.arguments:
            none_ok = parameters[argument].default is None
            bound.arguments[argument] = _checked_argument(config_cls, fields, argument, spec, none_ok,
                                                          bound.arguments[argument])
    for argument, own in checks.items():
        given = bound.arguments.get(argument, parameters[argument].default)
        bound.arguments[argument] = own(argument, given, bound.arguments)


def _checked_argument(config_cls: type, fields: dict[str, dataclasses.Field], argument: str,
                      spec: str | tuple[str, Callable[[Any], Any]], none_ok: bool, value: Any) -> Any:
    """`value` of the API's `argument` as its option's check makes it (`checked_arguments`); ConfigError naming the
    argument and the option otherwise. One value given for a list option stays one value."""
    name, read = (spec, None) if isinstance(spec, str) else spec
    if value is None and not none_ok:
        raise ConfigError(f"{argument}: must be given, got None (as {_flag(name)})")
    try:
        if read is not None:  # its reader says what to check; the method reads the value itself
            check_values(config_cls, {name: read(value) if value is not None else value})
            return value
        checked = _checked_value(config_cls, fields[name], value)
    except ConfigError as error:
        said = str(error).removeprefix(f"{_flag(name)}: ")
        raise ConfigError(f"{argument}: {said} (as {_flag(name)})") from None
    one = isinstance(checked, list) and not isinstance(value, list | tuple)
    return checked[0] if one else checked


def checked_texts(argument: str, texts: Any) -> list[str]:
    """`texts` as a list of texts (a list, a tuple or another sequence, a one-dimensional numpy array of text); a
    ConfigError naming `argument`, in one line, for one str (which would be read as its characters), bytes, a mapping,
    an iterator (read once, and of no length), or an item that is no text or holds a lone surrogate
    (`text_problem`)."""
    if isinstance(texts, str):
        raise ConfigError(f"{argument}: expected a list of texts, got one text ({_shown(texts)[:100]}): pass "
                          "[text] for one")
    if isinstance(texts, bytes | bytearray | Mapping) or not (isinstance(texts, collections.abc.Sequence) or (
            type(texts).__module__ == "numpy" and getattr(texts, "ndim", None) == 1)):
        raise ConfigError(f"{argument}: expected a list of texts, got {_shown(texts)[:100]}")
    checked = list(texts)
    for number, text in enumerate(checked):
        if not isinstance(text, str):
            raise ConfigError(f"{argument}: expected a list of texts, got {_shown(text)[:100]} at position {number}")
        if (problem := text_problem(text)) is not None:
            raise ConfigError(f"{argument}: text {number} {problem.split(':')[0]}: no tokenizer reads it")
        if type(text) is not str:  # numpy.str_ and other subclasses: the tokenizers take plain text
            checked[number] = str(text)
    return checked


class Options:
    """The base of every command's config dataclass: each field is checked (`check_fields`) before the class's own
    `__post_init__` runs its cross-field checks, whichever way the config is built (the command line through
    `build_config`, a config file, the Python API), and whether or not that `__post_init__` calls `super()`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "checks_fields", False):
            cls.__post_init__ = _checking_fields_first(own)

    def __post_init__(self) -> None:
        if type(self).__post_init__ is Options.__post_init__:  # no class of its own checks anything more
            check_fields(self)
            check_acts(self)


def _checking_fields_first(post_init: Callable[[Any], None]) -> Callable[[Any], None]:
    """`post_init`, preceded by `check_fields` and followed by `check_acts` when it is the instance's own (outermost)
    `__post_init__`, so that fields are checked once and before any cross-field check."""

    @functools.wraps(post_init)
    def checked(self: Any) -> None:
        outermost = type(self).__post_init__ is checked
        if outermost:
            check_fields(self)
        post_init(self)
        if outermost:
            check_acts(self)

    checked.checks_fields = True
    return checked
