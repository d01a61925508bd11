"""Probe curves of several pre-training runs: the values, where one run overtakes another, one figure.

Owns: reading the probe records of a metrics.jsonl (`probe_*` keys written by `evaluation.probe`), the crossover
step (the first probed step from which a run stays above another, or above its own step-0 value), the Markdown
tables `retromae report` adds for them, and `probe-curves.png` (a row per probe metric, against steps and against
tokens). Does not own running probes or the rest of the report (`evaluation.experiments`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from retromae.evaluation.axes import clamp_axis

PROBE_PREFIX = "probe_"
NOT_SCORES = ("probe_seconds",)


@dataclass
class ProbePoint:
    """One probe record: its step, the tokens consumed by then, and every probe score."""

    step: int
    tokens: int | None
    scores: dict[str, float]


def probe_points(records: list[dict]) -> list[ProbePoint]:
    """The records of a metrics.jsonl that hold probe scores, in step order."""
    points = [ProbePoint(int(r["step"]), int(r["tokens"]) if "tokens" in r else None,
                         {k: float(v) for k, v in r.items() if k.startswith(PROBE_PREFIX) and k not in NOT_SCORES})
              for r in records]
    return sorted((p for p in points if p.scores), key=lambda p: p.step)


def probe_metrics(curves: dict[str, list[ProbePoint]]) -> list[str]:
    """Every probe score key of any run, in first-seen order."""
    return list(dict.fromkeys(key for points in curves.values() for point in points for key in point.scores))


def crossover(points: list[ProbePoint], baseline: Callable[[ProbePoint], float | None], key: str) -> ProbePoint | None:
    """The first point from which `key` stays strictly above `baseline(point)` at every later point where both are
    known, or None when it is not above at the last such point."""
    compared = [(p, b) for p in points if key in p.scores and (b := baseline(p)) is not None]
    first = None
    for point, base in compared:
        if point.scores[key] > base:
            first = first or point
        else:
            first = None
    return first


def _at_step(points: list[ProbePoint], key: str) -> Callable[[ProbePoint], float | None]:
    values = {p.step: p.scores[key] for p in points if key in p.scores}
    return lambda point: values.get(point.step)


def _initial(points: list[ProbePoint], key: str) -> Callable[[ProbePoint], float | None]:
    start = next((p.scores.get(key) for p in points if p.step == 0), None)
    return lambda point: start if start is not None and point.step > 0 else None


def _tokens(count: int) -> str:
    return f"{count / 1e6:.2f}M" if count >= 1e6 else f"{count / 1e3:.1f}k" if count >= 1e3 else str(count)


def _cell(point: ProbePoint | None) -> str:
    if point is None:
        return "–"
    return f"{point.step:,}" + (f" ({_tokens(point.tokens)} tokens)" if point.tokens is not None else "")


def crossover_table(curves: dict[str, list[ProbePoint]], key: str) -> str:
    """Markdown: per run, its step-0, best and last value of `key`, and the step (tokens) from which it stays above
    its own step-0 value and above each other run (compared at the steps both probed)."""
    runs = [name for name, points in curves.items() if any(key in p.scores for p in points)]
    lines = ["| run | step 0 | best (step) | last | above its step 0 from | "
             + " | ".join(f"above {other} from" for other in runs) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(runs)]
    for name in runs:
        points = [p for p in curves[name] if key in p.scores]
        start = next((f"{p.scores[key]:.4f}" for p in points if p.step == 0), "–")
        best = max(points, key=lambda p: p.scores[key])
        others = [_cell(crossover(points, _at_step(curves[other], key), key)) if other != name else ""
                  for other in runs]
        lines.append(f"| {name} | {start} | {best.scores[key]:.4f} ({best.step:,}) | {points[-1].scores[key]:.4f} | "
                     f"{_cell(crossover(points, _initial(points, key), key))} | " + " | ".join(others) + " |")
    return "\n".join(lines) + "\n"


def probe_section(curves: dict[str, list[ProbePoint]]) -> str:
    """The report's probe section: one crossover table per probe metric."""
    parts = ["## Probes during pre-training\n",
             "\"above X from\": the first probed step from which the run stays strictly above X at every later step "
             "both probed (– : not above at the last one). One probe sample, one seed per run: differences within "
             "the probe's sampling noise are not findings.\n"]
    for key in probe_metrics(curves):
        parts += [f"### {key}\n", crossover_table(curves, key)]
    return "\n".join(parts)


def plot_probe_curves(curves: dict[str, list[ProbePoint]], path: Path, pyplot: Callable) -> None:
    """One row per probe metric; its value against steps (left) and against tokens (right), a line per run."""
    plt = pyplot()
    metrics = probe_metrics(curves)
    figure, axes = plt.subplots(len(metrics), 2, figsize=(10, 3.2 * len(metrics)), squeeze=False)
    for row, key in zip(axes, metrics, strict=True):
        for name, points in curves.items():
            shown = [p for p in points if key in p.scores]
            if shown:
                row[0].plot([p.step for p in shown], [p.scores[key] for p in shown], marker=".", label=name)
            counted = [p for p in shown if p.tokens is not None]
            if counted:
                row[1].plot([p.tokens for p in counted], [p.scores[key] for p in counted], marker=".", label=name)
        row[0].set(xlabel="step", ylabel=key)
        clamp_axis(row[0], key)  # a fraction's axis stays within [0, 1]
        clamp_axis(row[1], key)
        row[1].set(xlabel="tokens", ylabel=key)
        row[1].ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        row[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
