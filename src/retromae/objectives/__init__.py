"""Pre-training objectives, one module each, and the one table that names them.

Every objective is a `PretrainingObjective` (`retromae.objectives.base`): forward(batch, generator) returns a dict
of named losses whose "loss" entry is optimised; the training loop logs every entry. Its class says what it is
(`title`, what it `masks`, its `head` modules, whether it trains the MLM head, its `pooling`, its `options` class);
everything else asks the class, never the objective's name. Its options are a typed dataclass
(`retromae.objectives.options`).

Owns: `OBJECTIVES`, the table of name → "module:Class" and options class, and `register_objective` for an objective
defined elsewhere (a test, a plugin); `flat_options`, the flat fields of `retromae pretrain` made from the options
classes. `build_objective` and `create_objective` (`retromae.objectives.factory`) build one by name; `masking`
holds the masks every objective draws.

Why the table holds the options class beside the "module:Class" string: this package is imported to parse
`retromae pretrain --help`, which must stay instant, so it imports no torch. The names (the `--objective` choices)
and the options (their sections of `--help`) are read from the table; the class, a torch module, is imported only
when an objective is built or asked what it is (`OBJECTIVES[name]`), and its own `options` must be the table's.
Adding an objective is its module, its options class when it has options of its own, and one line here.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from retromae.objectives import options as opts
from retromae.objectives.options import ObjectiveOptions

# Names importable from this package, each loaded on first use (torch): name → "module:attribute".
_LAZY = {
    "PretrainingObjective": "retromae.objectives.base:PretrainingObjective",
    "MaskingSettings": "retromae.objectives.base:MaskingSettings",
    "build_objective": "retromae.objectives.factory:build_objective",
    "create_objective": "retromae.objectives.factory:create_objective",
}


@dataclass(frozen=True)
class ObjectiveEntry:
    """One row of the table: where the class is ("module:Class", or the class itself) and its options class."""

    target: Any
    options: type[ObjectiveOptions] = ObjectiveOptions

    def load(self, name: str) -> type:
        """The objective class, imported on first use; its `options` must be this entry's."""
        cls = self.target
        if isinstance(cls, str):
            module, _, attribute = cls.partition(":")
            cls = getattr(importlib.import_module(module), attribute)
        if cls.options is not self.options:
            raise TypeError(f"objective {name!r}: the table gives {self.options.__name__}, its class "
                            f"{cls.__name__} has {cls.options.__name__}")
        return cls


class ObjectiveTable(Mapping):
    """name → objective class, each imported when first looked up; `entry(name)` reads a row without importing."""

    def __init__(self, entries: dict[str, ObjectiveEntry]) -> None:
        self._entries = entries

    def __getitem__(self, name: str) -> type:
        return self.entry(name).load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, name: str) -> ObjectiveEntry:
        if name not in self._entries:
            raise KeyError(f"unknown objective {name!r}; choose from {', '.join(self._entries)}")
        return self._entries[name]

    def register(self, name: str, entry: ObjectiveEntry) -> None:
        if name in self._entries:
            raise ValueError(f"objective {name!r} is already registered")
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        """Withdraw a registered objective (a test's, a plugin's, when it is done)."""
        self.entry(name)
        del self._entries[name]

    def readers(self, option: str) -> dict[str, type[ObjectiveOptions]]:
        """The objectives whose options declare `option` as a flag, name → options class, in table order."""
        return {name: entry.options for name, entry in self._entries.items()
                if any(field.name == option and field.metadata.get("help") is not None
                       for field in dataclasses.fields(entry.options))}


OBJECTIVES = ObjectiveTable({
    "retromae": ObjectiveEntry("retromae.objectives.retromae:RetroMAE", opts.RetroMAEOptions),
    "mlm": ObjectiveEntry("retromae.objectives.mlm:MaskedLanguageModeling"),
    "seed": ObjectiveEntry("retromae.objectives.seed:SEEDEncoder", opts.SEEDOptions),
    "contrastive": ObjectiveEntry("retromae.objectives.contrastive:Contrastive", opts.TemperatureOptions),
    "retromae+contrastive": ObjectiveEntry("retromae.objectives.retromae_contrastive:RetroMAEContrastive",
                                           opts.RetroMAEContrastiveOptions),
    "dupmae": ObjectiveEntry("retromae.objectives.dupmae:DupMAE", opts.DupMAEOptions),
    "condenser": ObjectiveEntry("retromae.objectives.condenser:Condenser", opts.CondenserOptions),
    "cocondenser": ObjectiveEntry("retromae.objectives.cocondenser:CoCondenser", opts.CoCondenserOptions),
    "contriever": ObjectiveEntry("retromae.objectives.contriever:Contriever", opts.ContrieverOptions),
    "simcse": ObjectiveEntry("retromae.objectives.simcse:SimCSE", opts.SimCSEOptions),
    "tsdae": ObjectiveEntry("retromae.objectives.tsdae:TSDAE", opts.TSDAEOptions),
    "cropping": ObjectiveEntry("retromae.objectives.cropping:Cropping", opts.CroppingOptions),
})


def register_objective(name: str, target: Any, options: type[ObjectiveOptions] = ObjectiveOptions) -> None:
    """Offer an objective defined outside this package under `name` (`target`: its class or "module:Class"). It is
    an `--objective` choice from then on; its options must be flags that already exist (the flat fields of
    `PretrainConfig` are made when that module is first imported), and are read under its name in config files."""
    OBJECTIVES.register(name, ObjectiveEntry(target, options))


def flat_options() -> list[tuple[str, Any, dataclasses.Field]]:
    """(name, type, field) of every flag the objectives' options declare, for `make_dataclass`: one per name, in
    table order, with the declaration's domain. Every flat default is None ("the objective's", which its help
    gives), so that a flag given to an objective that does not read it can be told from one left alone and refused
    (`PretrainConfig.check_objective_options`). Its section of `--help` (`group`) and its help name the objectives
    reading it, asked of the table when `--help` is built, so that a registered objective shows there too."""
    flags = dict.fromkeys(field.name for name in OBJECTIVES
                          for field in dataclasses.fields(OBJECTIVES.entry(name).options)
                          if field.metadata.get("help") is not None)
    return [_flat_field(flag) for flag in flags]


def _flat_field(option: str) -> tuple[str, Any, dataclasses.Field]:
    readers = list(OBJECTIVES.readers(option).values())
    first = _field(readers[0], option)
    kind = typing.get_type_hints(readers[0])[option]
    metadata = {**first.metadata, "group": functools.partial(_section, option),
                "help": functools.partial(_help, option, first.metadata["help"])}
    return option, kind | None, dataclasses.field(default=None, metadata=metadata)  # None: "the objective's"


def _section(option: str) -> str:
    """The section of `--help` of an objective's flag: the objectives that read it."""
    return f"--objective {', '.join(OBJECTIVES.readers(option))}"


def _help(option: str, text: str) -> str:
    """The help of a flag with its default, or, where it depends on the objective, those defaults."""
    defaults = {name: _field(options, option).default for name, options in OBJECTIVES.readers(option).items()}
    usual = max(set(defaults.values()), key=list(defaults.values()).count)
    if usual is None:
        return text  # the objectives' own default, which the help text describes
    shown = [f"{name} {default}" for name, default in defaults.items() if default != usual]
    if not shown:
        return f"{text} (default: {usual})"
    return f"{text} (default: the objective's: {', '.join([*shown, f'the others {usual}'])})"


def _field(options: type[ObjectiveOptions], name: str) -> dataclasses.Field:
    return next(field for field in dataclasses.fields(options) if field.name == name)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'retromae.objectives' has no attribute {name!r}")
    module, _, attribute = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
