"""The quickstart's frontier: the NDCG@10 gap RetroMAE (enhanced) opens over MLM and over no pre-training against the
pre-training budget (steps, and the minutes they took), for a few budgets x seeds.

Runs `retromae quickstart` once per (steps, seed) on one standard-library docstring set, then writes
`frontier.md` (mean and spread over the seeds per budget, with the minutes RetroMAE's pre-training took) and
`frontier.png` (the two gaps against the pre-training steps, one error bar per budget: the seeds' min..max) into the
output folder.

Usage (from the repository root; one run at a time, so on a shared machine its minutes are upper bounds):
    PYTHONPATH=src python recipes/quickstart_frontier.py --output runs/quickstart-frontier --steps 600 1200 2400 \
        --seeds 42 1 2 [--preset cpu] [--report-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from retromae.data.stdlib_docs import build_stdlib_retrieval_set
from retromae.evaluation.experiments import pyplot
from retromae.runtime.io import write_text_atomic
from retromae.workflows.quickstart import QuickstartConfig, quickstart

RETROMAE, MLM, NONE = "RetroMAE (enhanced)", "MLM", "no pre-training"


def run_grid(output: Path, steps: list[int], seeds: list[int], preset: str | None) -> None:
    """One quickstart per (steps, seed) that has no results.json yet."""
    data = output / "stdlib-docstrings"
    if not (data / "corpus.jsonl").exists():
        build_stdlib_retrieval_set(data)
    for step_count in steps:
        for seed in seeds:
            folder = output / f"steps{step_count}-seed{seed}"
            if not (folder / "results.json").exists():
                quickstart(QuickstartConfig(output=str(folder), data=str(data), preset=preset,
                                            pretrain_steps=step_count, seed=seed))


def frontier_rows(summaries: list[dict]) -> list[dict]:
    """Per pre-training budget: seeds, RetroMAE pre-training minutes, the NDCG@10 of each variant and both gaps,
    each as (mean, min, max) over the seeds."""
    by_steps: dict[int, list[dict]] = {}
    for summary in summaries:
        by_steps.setdefault(summary["budget"]["pretrain_steps"], []).append(summary)
    rows = []
    for step_count, group in sorted(by_steps.items()):
        ndcg = {name: [s["results"][name]["ndcg@10"] for s in group] for name in (NONE, MLM, RETROMAE)}
        values = {"pretrain minutes": [s["results"][RETROMAE]["pretrain_minutes"] for s in group],
                  **{f"{name} NDCG@10": scores for name, scores in ndcg.items()},
                  "RetroMAE - MLM": [r - m for r, m in zip(ndcg[RETROMAE], ndcg[MLM], strict=True)],
                  "RetroMAE - none": [r - n for r, n in zip(ndcg[RETROMAE], ndcg[NONE], strict=True)]}
        rows.append({"steps": step_count, "seeds": len(group),
                     **{key: (statistics.fmean(v), min(v), max(v)) for key, v in values.items()}})
    return rows


def frontier_table(rows: list[dict]) -> str:
    """Markdown: one row per budget, each cell the seeds' mean and range."""
    keys = [k for k in rows[0] if k not in ("steps", "seeds")]
    lines = ["| steps | seeds | " + " | ".join(keys) + " |", "|---:|---:|" + "---:|" * len(keys)]
    for row in rows:
        cells = [f"{row[k][0]:.3f} ({row[k][1]:.3f}..{row[k][2]:.3f})" for k in keys]
        lines.append(f"| {row['steps']} | {row['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_frontier(rows: list[dict], path: Path) -> None:
    """Both gaps against the pre-training steps of each objective (minutes depend on what else the machine runs;
    the table has them); bars span the seeds' min..max."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    steps = [row["steps"] for row in rows]
    for key in ("RetroMAE - MLM", "RetroMAE - none"):
        means = [row[key][0] for row in rows]
        spread = [[m - row[key][1] for m, row in zip(means, rows, strict=True)],
                  [row[key][2] - m for m, row in zip(means, rows, strict=True)]]
        axis.errorbar(steps, means, yerr=spread, marker="o", capsize=4, label=key)
    axis.axhline(0.0, color="grey", linewidth=0.8)
    axis.set(xlabel="pre-training steps per objective", ylabel="NDCG@10 gap (test queries)",
             title="quickstart frontier (standard-library docstrings)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(output: Path) -> str:
    """frontier.md and frontier.png from every finished run under `output`."""
    summaries = [json.loads(p.read_text()) for p in sorted(output.glob("steps*-seed*/results.json"))]
    if not summaries:
        raise SystemExit(f"{output}: no finished quickstart runs (steps*-seed*/results.json)")
    rows = frontier_rows(summaries)
    table = frontier_table(rows)
    write_text_atomic(output / "frontier.md", table)
    plot_frontier(rows, output / "frontier.png")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("runs/quickstart-frontier"))
    parser.add_argument("--steps", type=int, nargs="+", default=[600, 1200, 2400])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--preset", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--report-only", action="store_true", help="only aggregate the finished runs")
    args = parser.parse_args()
    if not args.report_only:
        run_grid(args.output, args.steps, args.seeds, args.preset)
    print(report(args.output))


if __name__ == "__main__":
    main()
