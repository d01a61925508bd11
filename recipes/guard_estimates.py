"""How far each estimate of `adapt`'s gain falls from the real gain, per run and left out by collection (issue 62).

Reads the JSON lines of `recipes/guard_signals.py` (one per finished run: the base's and the guard's candidate's
per-query NDCG@10 on the run's held-out passage queries and on the collection's real test queries) and prints a
Markdown table per run, then the summary, of four estimates of the candidate's real gain on the test queries:
- `points`: the gain on the held-out queries in NDCG@10 points (the guard's verdict);
- `share`: the gain as a share of the base's score on the held-out queries (printed beside it), read as a gain on
  the real queries by the base's real score (a user who knows what the base scores there reads it so);
- `fitted points`, `fitted share`: each times a factor fitted, by least squares through 0 of the real gain on the
  estimate, on the runs of the other collections (leave one collection out): what a calibration would gain on a
  collection it was not fitted on.
Each with its 95% interval (the guard's paired bootstrap, `adaptation.guard.measure_gain`), the error (estimate −
real) and whether the real gain lies in the interval and above its lower end ("at least").

Usage (from the repository root): PYTHONPATH=src python recipes/guard_estimates.py runs/guard-signals.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SEED = 0  # the guard's bootstrap seed is the run's; the intervals here use one seed for every run
ESTIMATES = ("points", "share")


def run_row(record: dict) -> dict:
    """The figures of one run: the real gain and the held-out estimates with their intervals."""
    from retromae.adaptation.guard import measure_gain

    held_out, real = record["held_out"]["passage"], record["real"]
    estimate = measure_gain(held_out["base"], held_out["export"], SEED)
    real_base = float(np.mean(list(real["base"].values())))
    return {"collection": record["collection"], "seed": Path(record["run"]).name.rsplit("-s", 1)[1],
            "exported": record["guard"]["chosen"] != "base",
            "held_out_base": float(np.mean(list(held_out["base"].values()))), "real_base": real_base,
            "real_gain": float(np.mean(list(real["export"].values()))) - real_base,
            "points": (estimate.absolute, estimate.interval),
            "share": (estimate.relative * real_base, tuple(end * real_base for end in estimate.relative_interval)),
}


def fitted(rows: list[dict], name: str) -> None:
    """Each row's `name` estimate times the factor fitted on the other collections' rows (least squares through 0 of
    the real gain on the estimate), under "fitted NAME"."""
    for row in rows:
        others = [other for other in rows if other["collection"] != row["collection"]]
        estimate, real = np.array([o[name][0] for o in others]), np.array([o["real_gain"] for o in others])
        factor = float(estimate @ real / (estimate @ estimate))
        gain, (low, high) = row[name]
        row.setdefault("factors", {})[name] = factor
        row[f"fitted {name}"] = (gain * factor, (low * factor, high * factor))


def table(rows: list[dict], estimates: tuple[str, ...]) -> str:
    """One row per run, then the mean absolute error, the mean signed error and the counts per estimate."""
    head = "| collection | seed | exported | base (held-out → real) | real gain | " + " | ".join(
        f"{name} (95% interval) | error" for name in estimates) + " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        cells = [row["collection"], row["seed"], "candidate" if row["exported"] else "base",
                 f"{row['held_out_base']:.3f} → {row['real_base']:.3f}", f"{row['real_gain']:+.4f}"]
        for name in estimates:
            gain, (low, high) = row[name]
            cells += [f"{gain:+.4f} [{low:+.4f}, {high:+.4f}]", f"{gain - row['real_gain']:+.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for name in estimates:
        errors = np.array([row[name][0] - row["real_gain"] for row in rows])
        inside = sum(row[name][1][0] <= row["real_gain"] <= row[name][1][1] for row in rows)
        at_least = sum(row["real_gain"] >= row[name][1][0] for row in rows)
        lines.append(f"- {name}: mean absolute error {np.abs(errors).mean():.4f}, mean signed {errors.mean():+.4f}, "
                     f"the largest {errors[np.abs(errors).argmax()]:+.4f}; the real gain inside the interval "
                     f"{inside} of {len(rows)}, at or above its lower end {at_least} of {len(rows)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("signals", type=Path, help="the JSON lines of recipes/guard_signals.py")
    args = parser.parse_args()
    rows = [run_row(json.loads(line)) for line in args.signals.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda row: (row["collection"], row["seed"]))
    for name in ESTIMATES:
        fitted(rows, name)
    print(table(rows, (*ESTIMATES, *(f"fitted {name}" for name in ESTIMATES))))
    for collection in sorted({row["collection"] for row in rows}):
        factors = next(row["factors"] for row in rows if row["collection"] == collection)
        print(f"- factors fitted without {collection}: "
              + ", ".join(f"{name} {factor:.2f}" for name, factor in factors.items()))


if __name__ == "__main__":
    main()
