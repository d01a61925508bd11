"""Typed configs for every command: dataclasses that validate themselves and become CLI options.

Owns: declaring a documented field (`option`), turning a config dataclass into argparse options (required
inputs first, then the command's own options, then one group per shared config class that names itself in
`OPTION_GROUP`, or that a field's `group` names; each default printed once), old spellings of renamed options
(hidden aliases that still work for one release, with a note saying the new name), merging a YAML/JSON config file
(its options flat, or nested in the sections the config class names: `option_sections`) with command-line flags
(flags win) and, for `--resume`, with the options the run saved, and saving a resolved config as JSON beside the
outputs. Does not own any command's fields: each command declares its own dataclass. The vocabulary the names
follow is in docs/cli.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from retromae.data.lines import check_regular_file
from retromae.errors import RetroMAEError
from retromae.io import write_text_atomic

ConfigT = TypeVar("ConfigT")
REQUIRED = dataclasses.MISSING
SAVED_CONFIG = "config.json"  # the resolved options a training run saves in its output folder


class ConfigError(RetroMAEError, ValueError):
    """A config file or option that cannot be used; the message names the file or field."""


def option(default: Any = REQUIRED, help: str = "", *, choices: tuple | None = None, short: str | None = None,
           aliases: tuple[str, ...] = (), required_unless: str | None = None, deprecated: str | None = None) -> Any:
    """A dataclass field carrying its CLI help text, allowed values and optional short flag.

    `aliases`: old spellings (e.g. `("--k",)`) accepted, hidden from `--help`, with a note naming the new flag.
    `required_unless`: the option(s) that can stand in for this one (listed with the required inputs).
    `deprecated`: a field kept for one release only, hidden from `--help`; using it prints this message.
    """
    metadata = {"help": help, "choices": choices, "short": short, "aliases": tuple(aliases),
                "required_unless": required_unless, "deprecated": deprecated}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def renamed_note(old: str, new: str) -> str:
    """What an old spelling prints: the new name, and that the old one goes in the next release."""
    return f"retromae: note: {old} is now {new}; the old spelling will be removed in the next release"


class _OldSpelling(argparse.Action):
    """Stores like the option it stands for, after one note on stderr (`message`) per parse."""

    def __init__(self, option_strings: list[str], dest: str, message: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.message, self.noted = message, False

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not self.noted:
            print(self.message, file=sys.stderr)
            self.noted = True
        setattr(namespace, self.dest, values)


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
    scalar, is_list = _field_kind(field, hints)
    if scalar is bool:
        return {"action": argparse.BooleanOptionalAction}
    kwargs: dict[str, Any] = {"type": scalar, "choices": field.metadata.get("choices")}
    if scalar in (int, float) and not field.metadata.get("choices"):
        kwargs["metavar"] = "N" if scalar is int else "X"
    if is_list:  # `--data A B` and `--data A --data B` alike
        kwargs.update(nargs="+", action="extend")
    return kwargs


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """Add one `--kebab-case` option per field of `config_cls` (and its hidden old spellings), plus `--config FILE`.

    Groups, in this order in `--help` and in the usage line: "required" (inputs without a default, or needed
    unless another option stands in; --output last), "options" (the command's own, with --config), then one
    per shared config class (its `OPTION_GROUP`), in field order.
    """
    hints = typing.get_type_hints(config_cls)
    placed: dict[str | None, list[dataclasses.Field]] = {"required": [], None: []}
    for field in dataclasses.fields(config_cls):
        title = "required" if is_required(field) else _group_title(config_cls, field)
        placed.setdefault(title, []).append(field)
    placed["required"].sort(key=lambda field: field.name == "output")  # inputs first, the output last
    for title, fields in placed.items():
        group = parser.add_argument_group(title or "options")
        if title is None:
            group.add_argument("--config", type=Path, help="YAML or JSON file of options; command-line flags "
                                                            "override it")
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


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON mapping of option names (snake_case or kebab-case) to values."""
    check_regular_file(Path(path), "config file", missing_ok=True)  # a FIFO or /dev/zero would never end
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is skipped
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error
    try:
        values = json.loads(text) if Path(path).suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: not valid {'JSON' if Path(path).suffix == '.json' else 'YAML'}: {error}") from error
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of option names to values")
    return {key.replace("-", "_"): value for key, value in values.items()}


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
    values.update({key: value for key, value in given.items() if key in known})
    require_finite(values)
    missing = [_flag(f.name) for f in dataclasses.fields(config_cls)
               if f.name not in values and _default_of(f) is REQUIRED]
    if missing:
        raise ConfigError(f"missing required option(s): {', '.join(missing)}")
    try:
        return config_cls(**values)
    except TypeError as error:
        raise ConfigError(str(error)) from error


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
                print(renamed_note(key, field.name), file=sys.stderr)
                values[field.name] = values.pop(key)
        if field.metadata.get("deprecated") and field.name in values:
            print(f"retromae: note: {field.metadata['deprecated']}", file=sys.stderr)
    return values


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (paths become strings)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def save_config(config: Any, path: Path) -> None:
    """Write the resolved config as JSON, atomically."""
    write_text_atomic(Path(path), json.dumps(config_to_dict(config), indent=2) + "\n")


def require_finite(values: Any) -> None:
    """ConfigError naming the first option whose number (or one of whose numbers) is NaN or infinite: a config
    dataclass (call it first thing in the `__post_init__` of a config the Python API builds) or a mapping of option
    names to values. `inf` and `nan` parse as floats, pass every `> 0` and would train a NaN model."""
    items = vars(values).items() if dataclasses.is_dataclass(values) else values.items()
    for name, value in items:
        for number in value if isinstance(value, list | tuple) else (value,):
            if isinstance(number, float) and not math.isfinite(number):
                raise ConfigError(f"{_flag(name)}: must be a finite number, got {number}")


def require(condition: bool, field: str, message: str) -> None:
    """Validation helper for `__post_init__`: raise ConfigError naming the field."""
    if not condition:
        raise ConfigError(f"{_flag(field)}: {message}")
