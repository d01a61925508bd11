"""Gather the quickstart comparison over backbone families and seeds (recipes/backbone_families.sh).

Reads RUNS/FAMILY-seed-S/results.json (written by `retromae quickstart`) and writes RUNS/families.md: per family and
model, NDCG@10, MRR@10 and Recall@100 as the mean and min..max over the seeds; RetroMAE minus MLM and minus no
pre-training paired by seed; and each family's unigram entropy beside the pre-training runs' final encoder MLM
losses (the plateau check). RUNS/families.json holds every seed's figures. A run with no results.json is left out.

Usage (from the repository root):
    PYTHONPATH=src python recipes/families_table.py --runs runs/backbone-families --families modernbert xlm-roberta \
        --seeds 42 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from retromae.runtime.io import write_text_atomic

METRICS = {"ndcg@10": "NDCG@10", "mrr@10": "MRR@10", "recall@100": "Recall@100"}
RETROMAE, MLM, NONE = "RetroMAE (enhanced)", "MLM", "no pre-training"


def gather(runs: Path, families: list[str], seeds: list[str]) -> dict[str, dict[str, dict]]:
    """{family: {seed: the quickstart's results.json}} over the runs that finished."""
    found: dict[str, dict[str, dict]] = {}
    for family in families:
        for seed in seeds:
            path = runs / f"{family}-seed-{seed}" / "results.json"
            if path.exists():
                found.setdefault(family, {})[seed] = json.loads(path.read_text())
    return found


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}..{max(values):.{digits}f})"


def scores_table(found: dict[str, dict[str, dict]]) -> list[str]:
    lines = ["| family | model | seeds | " + " | ".join(METRICS.values()) + " |",
             "|---|---|---:|" + "---:|" * len(METRICS)]
    for family, runs in found.items():
        models = list(next(iter(runs.values()))["results"])
        for model in models:
            cells = [spread([run["results"][model][key] for run in runs.values()]) for key in METRICS]
            lines.append(f"| {family} | {model} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines


def gaps_table(found: dict[str, dict[str, dict]]) -> list[str]:
    lines = ["| family | RetroMAE minus | seeds | NDCG@10 | Recall@100 |", "|---|---|---:|---:|---:|"]
    for family, runs in found.items():
        for other in (MLM, NONE):
            cells = [spread([run["results"][RETROMAE][key] - run["results"][other][key] for run in runs.values()])
                     for key in ("ndcg@10", "recall@100")]
            lines.append(f"| {family} | {other} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines


def plateau_table(found: dict[str, dict[str, dict]]) -> list[str]:
    lines = ["| family | unigram entropy (nats) | MLM's final encoder MLM | RetroMAE's final encoder MLM | "
             "RetroMAE's final decoder | minutes per run |", "|---|---:|---:|---:|---:|---:|"]
    for family, runs in found.items():
        entropy = spread([run["unigram_entropy"] for run in runs.values()], 2)
        minutes = spread([run["minutes"] for run in runs.values()], 1)
        lines.append(f"| {family} | {entropy} | {final_loss(runs, MLM, 'encoder_mlm')} | "
                     f"{final_loss(runs, RETROMAE, 'encoder_mlm')} | {final_loss(runs, RETROMAE, 'decoder')} | "
                     f"{minutes} |")
    return lines


def final_loss(runs: dict[str, dict], model: str, part: str) -> str:
    return spread([run["pretraining_losses"][model][part] for run in runs.values()], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--families", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    arguments = parser.parse_args()
    found = gather(arguments.runs, arguments.families, arguments.seeds)
    if not found:
        raise SystemExit(f"no finished run under {arguments.runs}")
    text = "\n".join(["# The quickstart on other backbone families", "",
                      "Test split; each cell: mean (min..max) over the seeds.", "", *scores_table(found), "",
                      "Paired by seed:", "", *gaps_table(found), "", "Pre-training against the unigram plateau:", "",
                      *plateau_table(found)]) + "\n"
    write_text_atomic(arguments.runs / "families.md", text)
    write_text_atomic(arguments.runs / "families.json", json.dumps(found, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
