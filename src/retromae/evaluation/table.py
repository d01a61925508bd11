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

from retromae.config import ConfigError
from retromae.evaluation.metric_registry import RANKING, metrics, parse_key, reported_keys, show, title
from retromae.io import atomic_path, write_text_atomic

DEFAULT_METRICS = tuple(reported_keys(RANKING))
AVERAGE = "average"
REPORT_FILES = ("results.md", "results.csv", "results.json", "results.png")


def metric_k(metric: str) -> int:
    """The cut-off of a ranking metric's key such as `ndcg@10`; ConfigError for a key `evaluate_run` does not
    compute."""
    try:
        return parse_key(metric, RANKING)[1]
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


@dataclass
class Table:
    """Rows of data sets for the systems (the model, and BM25 when asked) and the metrics shown."""

    systems: list[str]
    metrics: list[str]
    rows: list[SetRow]

    def average(self) -> dict[str, dict[str, float]]:
        """Each system's mean of every metric it has over the data sets (a macro average, as BEIR reports)."""
        return {system: {metric: math.fsum(row.scores[system][metric] for row in self.rows) / len(self.rows)
                         for metric in self.rows[0].scores[system]}
                for system in self.systems}

    def header(self) -> list[str]:
        return ["data set", "queries", "documents"] + [f"{system} {title(metric)}" for system in self.systems
                                                       for metric in self.metrics]

    def lines(self) -> list[list[str]]:
        """The rows as text (values in their metric's format: 4 decimals), the average last."""
        average = self.average()
        lines = [[row.name, str(row.queries), str(row.documents)]
                 + [show(metric, row.scores[system][metric]) for system in self.systems for metric in self.metrics]
                 for row in self.rows]
        lines.append([AVERAGE, "", ""] + [show(metric, average[system][metric]) for system in self.systems
                                          for metric in self.metrics])
        return lines

    def markdown(self) -> str:
        header = self.header()
        rule = ["---"] + ["---:"] * (len(header) - 1)
        return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *self.lines()]) + "\n"

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.header())
        writer.writerows(self.lines())
        return buffer.getvalue()

    def as_dict(self) -> dict:
        """Every metric computed (not only those shown) per data set and system, and their averages."""
        return {"systems": self.systems, "metrics": self.metrics,
                "sets": {row.name: {"queries": row.queries, "documents": row.documents, **row.scores}
                         for row in self.rows},
                AVERAGE: self.average()}


def write_report(table: Table, folder: Path, about: dict) -> None:
    """results.md, results.csv, results.json (with `about`: model, split, data paths) and results.png in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "results.md", table.markdown())
    write_text_atomic(folder / "results.csv", table.csv())
    write_text_atomic(folder / "results.json", json.dumps({**about, **table.as_dict()}, indent=2) + "\n")
    plot_table(table, folder / "results.png")


def plot_table(table: Table, path: Path) -> None:
    """One panel per metric shown: a group of bars per data set (and the average), a bar per system."""
    from retromae.evaluation.experiments import pyplot  # matplotlib: only when a table is plotted

    plt = pyplot()
    names = [row.name for row in table.rows] + [AVERAGE]
    average = table.average()
    figure, axes = plt.subplots(1, len(table.metrics), figsize=(4 + 1.2 * len(names) * len(table.metrics), 4),
                                squeeze=False)
    width = 0.8 / len(table.systems)
    for axis, metric in zip(axes[0], table.metrics, strict=True):
        for offset, system in enumerate(table.systems):
            values = [row.scores[system][metric] for row in table.rows] + [average[system][metric]]
            axis.bar([i + offset * width for i in range(len(names))], values, width, label=system)
        axis.set_xticks([i + width * (len(table.systems) - 1) / 2 for i in range(len(names))], names, rotation=15)
        axis.set(title=title(metric), ylim=(0, 1))
        axis.legend()
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=120, format="png")
    plt.close(figure)

