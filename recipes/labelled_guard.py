"""How close `adapt`'s printed gain comes to a user's gain when its guard scores the user's labelled queries
(`--validation`), by sampling (issue 62, docs/RESULTS.md section 10.9).

Reads the per-query NDCG@10 of the base and of an adapted model on judged queries: two `retromae evaluate --output`
folders (their per-query.json, one data set each) or, with --signals, the real test queries of each line of
`recipes/guard_signals.py`'s output. For each size n, 100 times: n queries drawn at random are what the guard scores
(its own `adaptation.guard.measure_gain`: the gain and its 95% paired bootstrap interval), and the gain on the other
queries is the user's; or, with --real-base/--real-candidate (another split, e.g. SciFact's test beside its train),
the gain on that split. Prints, per size, the mean absolute error of the guard's gain and how often the user's gain
lay inside its interval and at or above its lower end.

Usage (from the repository root):
    PYTHONPATH=src python recipes/labelled_guard.py --base runs/base-eval --candidate runs/adapted-eval
    PYTHONPATH=src python recipes/labelled_guard.py --signals runs/guard-signals.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DRAWS = 100
METRIC = "ndcg@10"


def per_query(folder: Path) -> dict[str, float]:
    """The per-query NDCG@10 of the one system of one data set in an `evaluate --output` folder."""
    sets = json.loads((folder / "per-query.json").read_text())
    (systems,) = sets.values()
    model = next(name for name in systems if name != "BM25" and "+" not in name)
    return {query: scores[METRIC] for query, scores in systems[model].items()}


def pairs(args: argparse.Namespace) -> list[tuple[str, dict[str, float], dict[str, float], float | None]]:
    """(name, the base's and the candidate's per-query scores the guard draws from, the user's gain on another split
    or None) for each run read."""
    if args.signals:
        return [(record["run"], record["real"]["base"], record["real"]["export"], None)
                for record in map(json.loads, args.signals.read_text().splitlines())]
    real = None
    if args.real_base:
        base, candidate = per_query(args.real_base), per_query(args.real_candidate)
        real = float(np.mean([candidate[query] - base[query] for query in base]))
    return [(str(args.candidate), per_query(args.base), per_query(args.candidate), real)]


def sampled(base: dict[str, float], candidate: dict[str, float], real: float | None, size: int) -> list[str]:
    """The errors and hits of the guard's gain on `size` queries drawn DRAWS times: the cells of a table's row."""
    from retromae.adaptation.guard import measure_gain

    queries = sorted(base)
    rng = np.random.default_rng(0)
    errors, inside, at_least = [], 0, 0
    for draw in range(DRAWS):
        drawn = set(rng.choice(len(queries), size, replace=False).tolist())
        scored = [queries[i] for i in sorted(drawn)]
        rest = [queries[i] for i in range(len(queries)) if i not in drawn]
        gain = measure_gain({q: base[q] for q in scored}, {q: candidate[q] for q in scored}, seed=draw)
        users = real if real is not None else float(np.mean([candidate[q] - base[q] for q in rest]))
        errors.append(gain.absolute - users)
        inside += gain.interval[0] <= users <= gain.interval[1]
        at_least += users >= gain.interval[0]
    return [str(size), f"{np.abs(errors).mean():.4f}", f"{np.mean(errors):+.4f}", f"{inside} of {DRAWS}",
            f"{at_least} of {DRAWS}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="`evaluate --output` folder of the base")
    parser.add_argument("--candidate", type=Path, help="`evaluate --output` folder of the adapted model (same split)")
    parser.add_argument("--real-base", type=Path, help="the base on the user's queries (another split)")
    parser.add_argument("--real-candidate", type=Path, help="the adapted model on the same")
    parser.add_argument("--signals", type=Path, help="recipes/guard_signals.py's output instead of the folders")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 300, 500])
    args = parser.parse_args()
    if not args.signals and not (args.base and args.candidate):
        parser.error("give --base and --candidate, or --signals")
    if bool(args.real_base) != bool(args.real_candidate):
        parser.error("--real-base and --real-candidate go together")
    for name, base, candidate, real in pairs(args):
        whose = "the gain on the other split" if real is not None else "the gain on the queries not drawn"
        print(f"\n{name}: {len(base)} labelled queries, {whose}"
              + (f" ({real:+.4f})" if real is not None else ""))
        print("| labelled queries | mean absolute error | mean signed | inside the 95% interval | at or above its "
              "lower end |\n|---:|---:|---:|---:|---:|")
        for size in args.sizes:
            if size < len(base) or (real is not None and size <= len(base)):
                print("| " + " | ".join(sampled(base, candidate, real, size)) + " |")


if __name__ == "__main__":
    main()
