"""The systems of an evaluation table: which columns `retromae evaluate` fills and what they are called.

Owns: naming the systems from the options: each model (the key "model" when there is one, else a short unique name
made from its path), "BM25" (with --bm25 or --hybrid), each model's hybrid ("hybrid" with one model, else
"NAME+BM25"), the labels the picture shows (a model's short name, never "model"), and which two systems a paired
comparison takes (--compare, else the two when there are two, else the hybrid and its model). Does not own running
them (`evaluation.run`) nor the table (`evaluation.table`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath

from retromae.evaluation.config import EvaluateConfig
from retromae.runtime.options import ConfigError

MODEL, BM25, HYBRID = "model", "BM25", "hybrid"


def short_names(paths: list[str]) -> list[str]:
    """A short name per model path (or hub name): its last part; where two clash, as many parent parts as make
    them differ."""
    parts = [PurePath(path.rstrip("/\\")).parts or (path,) for path in paths]
    depths = [1] * len(paths)
    while True:
        names = ["/".join(p[-d:]) for p, d in zip(parts, depths, strict=True)]
        clashing = [i for i, name in enumerate(names) if names.count(name) > 1 and depths[i] < len(parts[i])]
        if not clashing:
            break
        for i in clashing:
            depths[i] += 1
    if len(set(names)) == len(names):
        return names
    return [f"{name}#{number}" for number, name in enumerate(names, start=1)]


@dataclass
class Systems:
    """The table's systems: model key → path, whether BM25 runs, model key → its hybrid's key, shown labels."""

    models: dict[str, str]
    short: dict[str, str]
    bm25: bool = False
    hybrids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config: EvaluateConfig) -> Systems:
        shorts = short_names(config.models)
        keys = [MODEL] if len(shorts) == 1 else shorts
        hybrids = {key: HYBRID if key == MODEL else f"{key}+{BM25}" for key in keys} if config.hybrid else {}
        return cls(dict(zip(keys, config.models, strict=True)), dict(zip(keys, shorts, strict=True)),
                   config.bm25 or config.hybrid, hybrids)

    def names(self) -> list[str]:
        """Every system's key, in the table's order: the models, BM25, the hybrids."""
        return [*self.models, *([BM25] if self.bm25 else []), *self.hybrids.values()]

    def labels(self) -> dict[str, str]:
        """Key → the name the picture shows: a model's short name, "hybrid (NAME + BM25)"."""
        labels = {key: self.short[key] for key in self.models} | ({BM25: BM25} if self.bm25 else {})
        return labels | {hybrid: f"hybrid ({self.short[key]} + {BM25})" for key, hybrid in self.hybrids.items()}

    def _resolve(self, name: str) -> str:
        labels = self.labels()
        for key, label in labels.items():
            if name in (key, label, self.short.get(key)):
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
            return MODEL, HYBRID
        return None
