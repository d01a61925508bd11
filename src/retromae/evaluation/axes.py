"""The score axis of every plot retromae draws: never past the range a metric's values can take.

Owns `value_range(key)` (the range of a registered metric's values, `Metric.values`: [0, 1] for the ranking metrics,
fractions, [-1, 1] for correlations; None for what no metric names, such as a loss), `clamp(limits, key)` (axis
limits cut to that range) and `clamp_axis(axis, key, which)` (a drawn axis's limits cut to it). Every plot of a
score sets its axis through here: `evaluate`'s results.png (`evaluation.table`), `report`'s metrics.png
(`evaluation.experiments`) and probe-curves.png (`evaluation.curves`), the quickstart's bars
(`workflows.quickstart`); so Recall@100 near 1 has an axis ending at 1.0, not 1.1. matplotlib-free: each plot
hands its own axis in.
"""

from __future__ import annotations

from typing import Any

from retromae.evaluation.metric_registry import find_key

# What a plotted key may carry before its metric's key: a probe record's `probe_` and a correlation probe's `sts_`
# (`evaluation.probe_options`), a report column's "NAME " (`evaluation.experiments`: "scifact ndcg@10").
KEY_PREFIXES = ("probe_", "sts_")


def value_range(key: str) -> tuple[float, float] | None:
    """The range the values of `key` lie in (a metric key, a probe record key, a report column), or None when no
    registered metric names it."""
    key = key.rsplit(" ", 1)[-1]
    for prefix in ("", *KEY_PREFIXES):
        key = key.removeprefix(prefix)
        found = find_key(key)
        if found is not None:
            return found[0].values
    return None


def clamp(limits: tuple[float, float], key: str) -> tuple[float, float]:
    """`limits` (low, high) cut to the range of `key`'s values (unchanged for a key no metric names)."""
    bounds = value_range(key)
    if bounds is None:
        return limits
    low, high = max(limits[0], bounds[0]), min(limits[1], bounds[1])
    return (low, high) if low < high else bounds


def clamp_axis(axis: Any, key: str, which: str = "y") -> None:
    """Cut a drawn matplotlib axis's `which` ("x" or "y") limits to the range of `key`'s values."""
    get, set_ = (axis.get_ylim, axis.set_ylim) if which == "y" else (axis.get_xlim, axis.set_xlim)
    set_(*clamp(tuple(get()), key))
