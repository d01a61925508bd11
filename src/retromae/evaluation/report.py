"""Reporting evaluation results: an aligned console table and an atomic JSON file.

Owns: how results look on the console and on disk. Does not own: computing them (see `metrics`, `sts`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from retromae.evaluation.metric_registry import show
from retromae.runtime.console import say
from retromae.runtime.io import write_text_atomic


def _format_value(key: str, value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)):
        return show(key, float(value))
    return str(value)


def format_table(results: dict[str, Any], title: str | None = None) -> str:
    """A two-column plain-text table (metric, value), floats in their metric's format (4 decimals), values
    right-aligned."""
    rows = [("metric", "value")] + [(str(key), _format_value(str(key), value)) for key, value in results.items()]
    name_width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = "-" * (name_width + 2 + value_width)
    lines = [f"{name:<{name_width}}  {value:>{value_width}}" for name, value in rows]
    table = [lines[0], rule, *lines[1:]]
    return "\n".join(([title, rule] if title else []) + table)


def print_results(results: dict[str, Any], title: str | None = None) -> None:
    """Show `format_table(results, title)` on standard output (`runtime.console.say`)."""
    say(format_table(results, title))


def _to_json(value: Any) -> Any:
    """Make numpy scalars and arrays, and paths, JSON-serialisable."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def save_results(results: dict, path: Path) -> None:
    """Write `results` as indented JSON, atomically (numpy values become plain numbers)."""
    write_text_atomic(Path(path), json.dumps(results, indent=2, default=_to_json) + "\n")
