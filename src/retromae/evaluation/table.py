"""The table of one model (and BM25 beside it) over many retrieval sets, as the BEIR papers and leaderboards report.

Owns: checking the metrics a table shows (ranking keys such as `ndcg@10`, `recall@100`, `mrr@10`, `map@100`,
`p@10`; by default the reported ones), the row of each data set and the average row (the mean over data sets, each
weighing the same), and writing the table as Markdown, CSV, JSON and a bar plot. Does not own the metrics, their
titles and formats (`evaluation.metric_registry`), computing them (`evaluation.metrics`) nor running a model
(`evaluation.run`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retromae.evaluation.axes import clamp
from retromae.evaluation.metric_registry import RANKING, canonical_key, metrics, parse_key, reported_keys, show, title
from retromae.runtime.io import atomic_path, write_text_atomic
from retromae.runtime.options import ConfigError

DEFAULT_METRICS = tuple(reported_keys(RANKING))
AVERAGE = "average"
RUNS_DIR, PER_QUERY_FILE = "runs", "per-query.json"  # every system's run files; every query's scores
REPORT_FILES = ("results.md", "results.csv", "results.json", "results.png", PER_QUERY_FILE, RUNS_DIR)


def metric_k(metric: str) -> int:
    """The cut-off of a ranking metric's key such as `ndcg@10` (`ranking_key`)."""
    return parse_key(ranking_key(metric))[1]


def ranking_key(metric: str) -> str:
    """The canonical key (`metric_registry.canonical_key`: ndcg@010 is ndcg@10) of a ranking metric a user names;
    ConfigError for a key `evaluate_run` does not compute."""
    try:
        return canonical_key(metric, RANKING)
    except ValueError as error:
        raise ConfigError(f"--metrics: {metric!r} is not a metric; use NAME@K with NAME one of "
                          f"{', '.join(entry.name for entry in metrics(RANKING))}, e.g. ndcg@10 recall@100") from error


@dataclass
class SetRow:
    """One data set's line: its size and every system's metrics (system name → metric → value)."""

    name: str
    queries: int
    documents: int
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    per_query: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # system → query → metric → value

    def values(self, system: str, metric: str) -> dict[str, float]:
        """One system's `metric` per query (query id → value)."""
        return {query: scores[metric] for query, scores in self.per_query[system].items()}


@dataclass
class Table:
    """Rows of data sets for the systems (the models, BM25, the hybrids) and the metrics shown; `labels`: the name
    the picture shows for a system (its key when absent); `comparison`: a paired comparison of two systems."""

    systems: list[str]
    metrics: list[str]
    rows: list[SetRow]
    labels: dict[str, str] = field(default_factory=dict)
    comparison: dict[str, Any] | None = None

    def label(self, system: str) -> str:
        return self.labels.get(system, system)

    def compare(self, first: str, second: str) -> None:
        """Compare `second` with `first` query by query on every data set, on the table's first metric (its primary
        one): per-query differences, their bootstrap interval and the sign test (`evaluation.paired`)."""
        from retromae.evaluation.paired import paired_comparison  # numpy: only when a table compares

        metric = self.metrics[0]
        per_set = {row.name: paired_comparison(*(row.values(system, metric) for system in (first, second)))
                   for row in self.rows}
        self.comparison = {"first": first, "second": second, "metric": metric, "sets": per_set}

    def comparison_text(self) -> str:
        """The comparison as lines of text (empty without one)."""
        if self.comparison is None:
            return ""
        first, second, metric = (self.comparison[key] for key in ("first", "second", "metric"))
        lines = [f"paired comparison, {second} − {first}, {title(metric)} per query:"]
        for name, result in self.comparison["sets"].items():
            lines.append(f"  {name}: mean {result['mean_difference']:+.4f}, {result['confidence']:.0%} bootstrap "
                         f"interval [{result['ci_low']:+.4f}, {result['ci_high']:+.4f}] ({result['resamples']:,} "
                         f"resamples, seed {result['seed']}); {second} better on {result['wins']}, worse on "
                         f"{result['losses']}, tied on {result['ties']} of {result['queries']} queries; sign test "
                         f"p = {result['sign_test_p']:.3g}")
        return "\n".join(lines) + "\n"

    def average(self) -> dict[str, dict[str, float]]:
        """Each system's mean of every metric it has over the data sets (a macro average, as BEIR reports)."""
        return {system: {metric: math.fsum(row.scores[system][metric] for row in self.rows) / len(self.rows)
                         for metric in self.rows[0].scores[system]}
                for system in self.systems}

    def header(self) -> list[str]:
        return ["data set", "queries", "documents"] + [f"{system} {title(metric)}" for system in self.systems
                                                       for metric in self.metrics]

    def lines(self) -> list[list[str]]:
        """The rows as text (values in their metric's format: 4 decimals), the average last (with several rows)."""
        average = self.average()
        lines = [[row.name, str(row.queries), str(row.documents)]
                 + [show(metric, row.scores[system][metric]) for system in self.systems for metric in self.metrics]
                 for row in self.rows]
        if len(self.rows) > 1:
                lines.append([AVERAGE, "", ""] + [show(metric, average[system][metric]) for system in self.systems
                                              for metric in self.metrics])
        return lines

    def markdown(self) -> str:
        header = self.header()
        rule = ["---"] + ["---:"] * (len(header) - 1)
        return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *self.lines()]) + "\n"

    def text(self) -> str:
        """The Markdown table, then the comparison when one was made (results.md, and what `evaluate` prints)."""
        comparison = self.comparison_text()
        return self.markdown() + (f"\n{comparison}" if comparison else "")

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.header())
        writer.writerows(self.lines())
        return buffer.getvalue()

    def as_dict(self) -> dict:
        """Every metric computed (not only those shown) per data set and system, their averages, the systems' labels
        and the paired comparison when one was made."""
        return {"systems": self.systems, "labels": {system: self.label(system) for system in self.systems},
                "metrics": self.metrics,
                "sets": {row.name: {"queries": row.queries, "documents": row.documents, **row.scores}
                         for row in self.rows},
                AVERAGE: self.average(), **({"comparison": self.comparison} if self.comparison else {})}


def write_report(table: Table, folder: Path, about: dict) -> None:
    """results.md, results.csv, results.json (with `about`: model, split, data paths), per-query.json (data set →
    system → query → metric → value) and results.png in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "results.md", table.text())
    write_text_atomic(folder / "results.csv", table.csv())
    write_text_atomic(folder / "results.json", json.dumps({**about, **table.as_dict()}, indent=2) + "\n")
    per_query = {row.name: row.per_query for row in table.rows}
    write_text_atomic(folder / PER_QUERY_FILE, json.dumps(per_query, indent=1) + "\n")
    plot_table(table, folder / "results.png")


def plot_table(table: Table, path: Path) -> None:
    """One panel per metric shown: a group of bars per data set (and the average, with several), a bar per system
    labelled by its name, each bar with its value, the axis scaled to the values shown (`value_limits`) and never
    past the metric's range (`evaluation.axes.clamp`: Recall@100 stops at 1.0)."""
    from retromae.evaluation.experiments import pyplot  # matplotlib: only when a table is plotted

    plt = pyplot()
    average = table.average()
    groups = [(row.name, row.scores) for row in table.rows] + ([(AVERAGE, average)] if len(table.rows) > 1 else [])
    bars = len(groups) * len(table.systems)
    figure, axes = plt.subplots(1, len(table.metrics), figsize=(3 + 0.6 * bars * len(table.metrics), 4.5),
                                squeeze=False)
    width = 0.8 / len(table.systems)
    for axis, metric in zip(axes[0], table.metrics, strict=True):
        shown = []
        for offset, system in enumerate(table.systems):
            values = [scores[system][metric] for _, scores in groups]
            shown += values
            drawn = axis.bar([i + offset * width for i in range(len(groups))], values, width, label=table.label(system))
            axis.bar_label(drawn, fmt="%.4f", padding=2, fontsize=7, rotation=90 if len(table.systems) > 2 else 0)
        axis.set_xticks([i + width * (len(table.systems) - 1) / 2 for i in range(len(groups))],
                        [name for name, _ in groups], rotation=15)
        limits = clamp(value_limits(shown), metric)
        axis.set_ylim(*limits)
        # an axis cut at the metric's top leaves the labels of its highest bars above it: the title goes above them
        axis.set_title(title(metric), pad=6 + (36 if limits[1] < value_limits(shown)[1] else 0))
    figure.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=min(len(table.systems), 4),
                  fontsize=8)
    figure.tight_layout(rect=(0, 0.06 * math.ceil(len(table.systems) / 4), 1, 1))
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=120, format="png")
    plt.close(figure)


def value_limits(values: list[float]) -> tuple[float, float]:
    """The bar axis for `values`: from below the lowest (half the values' span under it, never below 0) to half the
    span above the highest (room for the value labels), so that 0.30 against 0.31 shows; a span of 0 gets a span
    of a tenth of the value (or 0.1)."""
    low, high = min(values), max(values)
    span = (high - low) or (abs(high) / 10 or 0.1)
    return max(0.0, low - span / 2) if low >= 0 else low - span / 2, high + span / 2
