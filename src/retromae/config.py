"""Typed configs for every command: dataclasses that validate themselves and become CLI options.

Owns: declaring a documented field (`option`), turning a config dataclass into argparse options,
merging a YAML/JSON config file with command-line flags (flags win), and saving a resolved config as
JSON beside the outputs. Does not own any command's fields: each command declares its own dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from retromae.errors import RetroMAEError
from retromae.io import write_text_atomic

ConfigT = TypeVar("ConfigT")
REQUIRED = dataclasses.MISSING


class ConfigError(RetroMAEError, ValueError):
    """A config file or option that cannot be used; the message names the file or field."""


def option(default: Any = REQUIRED, help: str = "", *, choices: tuple | None = None, short: str | None = None) -> Any:
    """A dataclass field carrying its CLI help text, allowed values and optional short flag."""
    metadata = {"help": help, "choices": choices, "short": short}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _field_kind(field: dataclasses.Field, hints: dict[str, Any]) -> tuple[type, bool]:
    """The scalar type of a field and whether it holds a list (Optional[...] unwrapped)."""
    hint = hints[field.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], True
    return hint, False


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """Add one `--kebab-case` option per field of `config_cls`, plus `--config FILE`."""
    hints = typing.get_type_hints(config_cls)
    parser.add_argument("--config", type=Path, help="YAML or JSON file of options; command-line flags override it")
    for field in dataclasses.fields(config_cls):
        scalar, is_list = _field_kind(field, hints)
        flags = [f"--{field.name.replace('_', '-')}"]
        if field.metadata.get("short"):
            flags.insert(0, field.metadata["short"])
        default = _default_of(field)
        help_text = field.metadata.get("help", "")
        help_text += " (required)" if default is REQUIRED else f" (default: {default})"
        kwargs: dict[str, Any] = {"dest": field.name, "default": argparse.SUPPRESS, "help": help_text}
        if scalar is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = scalar
            kwargs["choices"] = field.metadata.get("choices")
            if is_list:
                kwargs["nargs"] = "+"
        parser.add_argument(*flags, **kwargs)


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return REQUIRED


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON mapping of option names (snake_case or kebab-case) to values."""
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
    """Merge `--config FILE` (if given) with explicit flags into a validated `config_cls`."""
    given = dict(vars(args) if isinstance(args, argparse.Namespace) else args)
    config_path = given.pop("config", None)
    values = load_config_file(config_path) if config_path else {}
    known = {field.name for field in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{config_path}: unknown option(s) {', '.join(unknown)}")
    values.update({key: value for key, value in given.items() if key in known})
    missing = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(config_cls)
               if f.name not in values and _default_of(f) is REQUIRED]
    if missing:
        raise ConfigError(f"missing required option(s): {', '.join(missing)}")
    try:
        return config_cls(**values)
    except TypeError as error:
        raise ConfigError(str(error)) from error


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (paths become strings)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def save_config(config: Any, path: Path) -> None:
    """Write the resolved config as JSON, atomically."""
    write_text_atomic(Path(path), json.dumps(config_to_dict(config), indent=2) + "\n")


def require(condition: bool, field: str, message: str) -> None:
    """Validation helper for `__post_init__`: raise ConfigError naming the field."""
    if not condition:
        raise ConfigError(f"--{field.replace('_', '-')}: {message}")
