"""The systems of an evaluation table: which columns `retromae evaluate` fills and what they are called.

Owns the systems from the options: each model, under its name (`evaluation.names`: `--name`, else a short name made
from its folder), "BM25" (with --bm25 or --hybrid), each model's hybrid ("NAME+BM25" with --hybrid), the labels the
picture shows ("hybrid (NAME + BM25)"), and which two systems a paired comparison takes (--compare, else the two
when there are two, else the hybrid and its model). Does not own running them (`evaluation.run`), naming the models
(`evaluation.names`) nor the table (`evaluation.table`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from retromae.evaluation.config import EvaluateConfig
from retromae.evaluation.names import BM25
from retromae.runtime.options import ConfigError


@dataclass
class Systems:
    """The table's systems: model name → the model as given, whether BM25 runs, model name → its hybrid's name."""

    models: dict[str, str]
    bm25: bool = False
    hybrids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config: EvaluateConfig) -> Systems:
        names = config.model_names()
        hybrids = {name: f"{name}+{BM25}" for name in names} if config.hybrid else {}
        return cls(dict(zip(names, config.models, strict=True)), config.bm25 or config.hybrid, hybrids)

    def names(self) -> list[str]:
        """Every system's key, in the table's order: the models, BM25, the hybrids."""
        return [*self.models, *([BM25] if self.bm25 else []), *self.hybrids.values()]

    def labels(self) -> dict[str, str]:
        """System → the name the picture shows: a model's name, BM25, "hybrid (NAME + BM25)"."""
        labels = {name: name for name in self.models} | ({BM25: BM25} if self.bm25 else {})
        return labels | {hybrid: f"hybrid ({name} + {BM25})" for name, hybrid in self.hybrids.items()}

    def _resolve(self, name: str) -> str:
        labels = self.labels()
        for key, label in labels.items():
            if name in (key, label):
                return key
        raise ConfigError(f"--compare: {name!r} is not a system of this table ({', '.join(labels)})")

    def check_compare(self, names: list[str]) -> None:
        """ConfigError for a --compare name the table does not have, or the same system twice."""
        keys = [self._resolve(name) for name in names]
        if len(set(keys)) != len(keys):
            raise ConfigError("--compare: names the same system twice")

    def compared(self, names: list[str]) -> tuple[str, str] | None:
        """The two systems a paired comparison takes (the first is the reference), or None."""
        if names:
            first, second = (self._resolve(name) for name in names)
            return first, second
        systems = self.names()
        if len(systems) == 2:
            return systems[0], systems[1]
        if len(self.models) == 1 and self.hybrids:
            return next(iter(self.hybrids.items()))
        return None
