"""Gather one experiment run over several seeds: per variant and metric, the mean and the min..max over the seeds.

Reads RUNS/seed-S/VARIANT folders (the layout of the recipes, `retromae.evaluation.experiments.read_variant`) and
writes OUTPUT/seeds.md (a Markdown table: one row per variant, each cell "mean [min, max]", with the seed count),
OUTPUT/seeds.json (every seed's value) and OUTPUT/seeds.png (one panel per metric: a bar per variant at its mean, the
error bar spanning the seeds' min..max, the seeds as dots). A variant or seed with no folder yet is left out.

Usage (from the repository root):
    PYTHONPATH=src python recipes/seeds_table.py --runs runs/field-objectives-cpu --seeds 1 2 3 \
        --variants none mlm retromae-enhanced --output runs/field-objectives-cpu/report [--title TITLE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from retromae.evaluation.axes import clamp_axis
from retromae.evaluation.experiments import pyplot, read_variant
from retromae.runtime.io import write_text_atomic


def gather(runs: Path, seeds: list[str], variants: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """{variant: {metric: {seed: value}}} over the variant folders that exist."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name in variants:
        for seed in seeds:
            folder = runs / f"seed-{seed}" / name
            if not (folder / "eval").is_dir():
                continue
            for metric, value in read_variant(folder).scores.items():
                table.setdefault(name, {}).setdefault(metric, {})[seed] = value
    return table


def cell(values: dict[str, float]) -> str:
    numbers = list(values.values())
    return f"{statistics.mean(numbers):.4f} [{min(numbers):.4f}, {max(numbers):.4f}]"


def markdown(table: dict[str, dict[str, dict[str, float]]], title: str) -> str:
    metrics = list(dict.fromkeys(m for scores in table.values() for m in scores))
    lines = [f"# {title}", "", "Each cell: mean [min, max] over the seeds.", "",
             "| variant | seeds | " + " | ".join(metrics) + " |", "|---|---:|" + "---:|" * len(metrics)]
    for name, scores in table.items():
        seeds = max(len(values) for values in scores.values())
        cells = [cell(scores[m]) if m in scores else "–" for m in metrics]
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(table: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    plt = pyplot()
    metrics = list(dict.fromkeys(m for scores in table.values() for m in scores))
    figure, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 0.4 * len(table) + 1.5), squeeze=False)
    for axis, metric in zip(axes[0], metrics, strict=True):
        names = [name for name in table if metric in table[name]]
        for row, name in enumerate(names):
            values = list(table[name][metric].values())
            mean = statistics.mean(values)
            axis.barh(row, mean, xerr=[[mean - min(values)], [max(values) - mean]], color="C0", alpha=0.6)
            axis.plot(values, [row] * len(values), "k.", markersize=4)
        axis.set_yticks(range(len(names)), names)
        axis.invert_yaxis()
        axis.set(title=metric)
        clamp_axis(axis, metric, "x")  # a fraction's axis ends at 1.0
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--variants", nargs="+", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--title", default="Results over seeds")
    args = parser.parse_args()
    table = gather(args.runs, args.seeds, args.variants)
    if not table:
        raise SystemExit(f"{args.runs}: no variant folder with eval/ results under seed-*/")
    args.output.mkdir(parents=True, exist_ok=True)
    text = markdown(table, args.title)
    write_text_atomic(args.output / "seeds.md", text)
    write_text_atomic(args.output / "seeds.json", json.dumps(table, indent=2) + "\n")
    plot(table, args.output / "seeds.png")
    print(text)


if __name__ == "__main__":
    main()
