"""The unified-learner paper's two-stage claim at CPU scale: stage 1 RetroMAE (MLM as the control) on English text,
then four stage-2 arms on SNLI pairs and, separately, on the SciFact corpus; every model scored on STS-B test
zero-shot and on SciFact test after the same fine-tuning. Also the from-scratch sum (`retromae+contrastive` from
the random initialisation, at chosen contrastive weights) under the stage-1 budget.

Per seed (the seed sets the initialisation, data order and masks), all through the `retromae` CLI with explicit
options:
  initial model  a WordPiece vocabulary trained on ../shared/data/pretrain (2,000 tokens) and a random 2 x 128 BERT
                 (the quickstart's cpu preset, `retromae.workflows.quickstart.initial_model`)
  stage 1        retromae (enhanced, masks 0.3 / 0.5) and mlm (0.15): 1,200 steps of 32 x 64-token blocks, 2e-3
  stage 2        from each stage-1 model, on SNLI pairs and on SciFact span pairs, 150 steps of 16 pairs (32 rows),
                 1e-3: retromae+contrastive (weight 1), contrastive alone, retromae alone (retromae+contrastive with
                 --contrastive-weight 0: the same batches, the InfoNCE term logged but not trained); the stage-1
                 model itself is the fourth arm (no stage 2). From the MLM model, the two arms with a decoder start
                 it from fresh weights (--init-missing-head), the encoder and MLM head from the MLM run
  scratch        retromae+contrastive from the initial model on span pairs of the stage-1 corpus, stage 1's steps,
                 learning rate and rows per step, once per --scratch-weights value (first stage-1 seed only)
  scoring        STS-B test Spearman of the [CLS] vector zero-shot; SciFact: fine-tuned with in-batch negatives
                 (1 epoch of 32 queries, 5e-4, CLS pooling, normalised), NDCG@10 and Recall@100 on test
With --stage1-seed S, the initial model and stage 1 are trained once (seed S) and every seed of --seeds runs the
stage-2 arms and the fine-tuning from them: the seeds' spread is then that of stage 2 and fine-tuning alone.
STS-B dev is probed zero-shot while every pre-training runs (metrics.jsonl: probe_sts_spearman).
Every job is skipped when its output exists (a killed run resumes; training resumes from its checkpoints). Jobs run
--parallel at a time (one thread each): stage 1 first, then the SNLI arms (the paper's branch before the MLM
control's), then the SciFact arms, so a cut run has finished the most important part. Writes `two-stage.md` (the
table: mean and min..max over the finished seeds; then, paired by seed, the sum minus each other arm and stage-1
RetroMAE minus stage-1 MLM under each stage 2) and `two-stage.png` (bars: the means; dots: each seed) into the
output folder.

Usage (from the repository root; run it under `nice` on a shared machine):
    PYTHONPATH=src nice -n 10 python recipes/two_stage_cpu.py --output runs/two-stage-cpu --seeds 42 1 2 \
        [--stage1-seed 42] [--parallel 2] [--stage1-steps 1200] [--stage2-steps 150] [--report-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from retromae.evaluation.axes import clamp_axis
from retromae.evaluation.experiments import pyplot
from retromae.runtime.io import write_text_atomic

STAGE1 = {"retromae": ["--objective", "retromae", "--decoding", "enhanced", "--encoder-mask-ratio", "0.3",
                       "--decoder-mask-ratio", "0.5"],
          "mlm": ["--objective", "mlm", "--encoder-mask-ratio", "0.15"]}
ARMS = {"retromae+contrastive": ["--objective", "retromae+contrastive", "--contrastive-weight", "1"],
        "contrastive": ["--objective", "contrastive"],
        "retromae": ["--objective", "retromae+contrastive", "--contrastive-weight", "0"]}
STAGE2_DATA = ("snli", "scifact")
ARM_NAMES = {"retromae+contrastive": "RetroMAE + contrastive", "contrastive": "contrastive alone",
             "retromae": "RetroMAE alone"}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes and paths of one grid."""

    output: Path
    data: Path
    corpus: list[str]
    stage1: tuple[str, ...] = tuple(STAGE1)
    stage2_data: tuple[str, ...] = STAGE2_DATA
    stage1_steps: int = 1200
    stage2_steps: int = 150
    batch_size: int = 32
    max_length: int = 64
    vocab_size: int = 2000
    hidden_size: int = 128
    layers: int = 2
    finetune_epochs: float = 1.0
    log_every: int = 50
    probe_every: int = 300


@dataclasses.dataclass
class Job:
    """One step of the grid: commands run in order, done when `marker` exists, after the jobs in `after`."""

    name: str
    commands: list[list[str]]
    marker: Path
    after: list[str]
    priority: int
    log: Path


def cli(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "retromae", *arguments]


def training_options(settings: Settings, seed: int, steps: int, batch_size: int, learning_rate: str,
                     warmup: str) -> list[str]:
    """The options every pre-training run of the grid shares (STS-B dev probed zero-shot as it trains)."""
    return ["--max-length", str(settings.max_length), "--batch-size", str(batch_size), "--max-steps", str(steps),
            "--learning-rate", learning_rate, "--warmup-ratio", warmup, "--log-every", str(settings.log_every),
            "--save-every", str(settings.probe_every), "--mixed-precision", "no", "--seed", str(seed),
            "--cache-dir", str(settings.output / "cache"), "--resume",
            "--probe-sts", str(settings.data / "sts" / "stsbenchmark" / "sts-dev.csv"),
            "--probe-every", str(settings.probe_every)]


def scoring_job(name: str, encoder: Path, folder: Path, settings: Settings, seed: int, after: list[str],
                priority: int) -> Job:
    """STS-B test zero-shot on `encoder` ([CLS]); SciFact test after fine-tuning it (results in folder/eval/)."""
    scifact = settings.data / "beir" / "scifact"
    finetune = cli("finetune", "--model", str(encoder), "--output", str(folder / "finetune"),
                   "--data", str(scifact), "--split", "train", "--negatives", "none", "--group-size", "1",
                   "--pooling", "cls", "--normalize", "--epochs", str(settings.finetune_epochs), "--batch-size", "32",
                   "--learning-rate", "5e-4", "--query-max-length", "64", "--passage-max-length", "128",
                   "--log-every", "5", "--save-every", "0", "--mixed-precision", "no", "--seed", str(seed),
                   "--overwrite")
    evaluate = ["evaluate", "--split", "test", "--overwrite", "--output"]
    commands = [cli(*evaluate, str(folder / "eval" / "stsb.json"), "--model", str(encoder), "--pooling", "cls",
                    "--data", str(settings.data / "sts" / "stsbenchmark")),
                finetune,
                cli(*evaluate, str(folder / "eval" / "scifact.json"), "--model",
                    str(folder / "finetune" / "sentence-transformer"), "--data", str(scifact),
                    "--query-max-length", "64", "--passage-max-length", "128")]
    return Job(f"score {name}", commands, folder / "eval" / "scifact.json", after, priority, folder / "score.log")


def initial_job(settings: Settings, seed: int) -> Job:
    folder = settings.output / f"seed{seed}" / "initial-model"
    code = ("import dataclasses, sys; from pathlib import Path\n"
            "from retromae.workflows.quickstart import initial_model\nfrom retromae.workflows.config import PRESETS\n"
            "sizes = dict(zip(('vocab_size', 'hidden_size', 'layers', 'max_length'), map(int, sys.argv[2:6])))\n"
            "initial_model(sys.argv[7:], dataclasses.replace(PRESETS['cpu'], **sizes), Path(sys.argv[1]), "
            "seed=int(sys.argv[6]))")
    command = [sys.executable, "-c", code, str(folder), str(settings.vocab_size), str(settings.hidden_size),
               str(settings.layers), str(settings.max_length), str(seed), *settings.corpus]
    return Job(f"initial model {seed}", [command], folder / "config.json", [], 0, folder.parent / "initial-model.log")


def stage1_jobs(settings: Settings, seed: int) -> list[Job]:
    """The initial model of one seed and both stage-1 runs from it."""
    root = settings.output / f"seed{seed}"
    jobs = [initial_job(settings, seed)]
    for stage1 in settings.stage1:
        command = cli("pretrain", "--model", str(root / "initial-model"), "--corpus", *settings.corpus, "--output",
                      str(root / stage1 / "pretrain"), *STAGE1[stage1],
                      *training_options(settings, seed, settings.stage1_steps, settings.batch_size, "2e-3", "0.05"))
        jobs.append(Job(f"stage 1 {stage1} {seed}", [command], root / stage1 / "pretrain" / "sentence-transformer",
                        [f"initial model {seed}"], 0, root / stage1 / "pretrain.log"))
    return jobs


def stage2_jobs(settings: Settings, seed: int, stage1_seed: int) -> list[Job]:
    """From the initial and stage-1 models of `stage1_seed`: every stage-2 arm, and the scoring of every model, run
    with `seed`. The MLM control's arms with a decoder start it fresh (--init-missing-head). Priorities put the SNLI
    arms of every seed before the SciFact arms, within each the paper's branch (stage-1 RetroMAE) before the MLM
    control, and the random initialisation's reference row of a seed other than `stage1_seed` last."""
    source, root = settings.output / f"seed{stage1_seed}", settings.output / f"seed{seed}"
    jobs = [scoring_job(f"none {seed}", source / "initial-model", root / "none", settings, seed,
                        [f"initial model {stage1_seed}"], 1 if seed == stage1_seed else 6)]
    data_options = {"snli": ["--pairs", str(settings.data / "pairs" / "snli-dev-test.jsonl")],
                    "scifact": ["--corpus", str(settings.data / "beir" / "scifact")]}
    for stage1 in settings.stage1:
        rank = 1 if stage1 == "retromae" else 2
        after, stage1_output = f"stage 1 {stage1} {stage1_seed}", source / stage1 / "pretrain"
        jobs.append(scoring_job(f"{stage1} {seed}", stage1_output / "encoder", root / stage1, settings, seed, [after],
                                rank))
        for data, arm in itertools.product(settings.stage2_data, ARMS):
            folder, name = root / stage1 / data / arm, f"stage 2 {stage1} {data} {arm} {seed}"
            fresh = ["--init-missing-head"] if stage1 == "mlm" and arm != "contrastive" else []
            command = cli("pretrain", "--init-from", str(stage1_output), *fresh, *data_options[data], "--output",
                          str(folder / "pretrain"), *ARMS[arm],
                          *training_options(settings, seed, settings.stage2_steps, settings.batch_size // 2, "1e-3",
                                            "0.1"))
            order = rank + 3 * STAGE2_DATA.index(data)
            jobs.append(Job(name, [command], folder / "pretrain" / "sentence-transformer", [after], order,
                            folder / "pretrain.log"))
            jobs.append(scoring_job(f"{stage1} {data} {arm} {seed}", folder / "pretrain" / "encoder", folder,
                                    settings, seed, [name], order))
    return jobs


def scratch_jobs(settings: Settings, seed: int, weights: list[str]) -> list[Job]:
    """retromae+contrastive from the random initialisation at each weight, on span pairs of the stage-1 corpus, with
    stage 1's steps, learning rate and rows per step; the first weight among the paper's branch, the others last."""
    jobs = []
    initial = settings.output / f"seed{seed}" / "initial-model"
    for weight in weights:
        folder, name = settings.output / f"seed{seed}" / f"scratch-w{weight}", f"scratch w{weight} {seed}"
        command = cli("pretrain", "--model", str(initial), "--corpus", *settings.corpus, "--output",
                      str(folder / "pretrain"), "--objective", "retromae+contrastive", "--contrastive-weight", weight,
                      *training_options(settings, seed, settings.stage1_steps, settings.batch_size // 2, "2e-3",
                                        "0.05"))
        rank = 1 if weight == weights[0] else 7
        jobs.append(Job(name, [command], folder / "pretrain" / "sentence-transformer", [f"initial model {seed}"],
                        rank, folder / "pretrain.log"))
        jobs.append(scoring_job(f"scratch w{weight} {seed}", folder / "pretrain" / "encoder", folder, settings, seed,
                                [name], rank))
    return jobs


def run_jobs(jobs: list[Job], parallel: int) -> list[str]:
    """Run the unfinished jobs, `parallel` at a time, highest priority (lowest number) first; the failed names."""
    done = {job.name for job in jobs if job.marker.exists()}
    waiting = [job for job in jobs if job.name not in done]
    running: dict[str, tuple[subprocess.Popen, Job, list[list[str]]]] = {}
    failed: list[str] = []
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"}
    while waiting or running:
        ready = sorted((job for job in waiting if all(name in done for name in job.after)), key=lambda j: j.priority)
        while ready and len(running) < parallel:
            job = ready.pop(0)
            waiting.remove(job)
            running[job.name] = (start(job.commands[0], job.log, environment), job, job.commands[1:])
            print(f"[{time.strftime('%H:%M:%S')}] start {job.name}", flush=True)
        if not running:
            failed += [job.name for job in waiting]  # their prerequisites failed
            break
        time.sleep(2)
        for name, (process, job, rest) in list(running.items()):
            if process.poll() is None:
                continue
            if process.returncode == 0 and rest:
                running[name] = (start(rest[0], job.log, environment), job, rest[1:])
                continue
            del running[name]
            if process.returncode == 0:
                done.add(name)
                print(f"[{time.strftime('%H:%M:%S')}] done  {name}", flush=True)
            else:
                failed.append(name)
                print(f"[{time.strftime('%H:%M:%S')}] FAILED {name} (see {job.log})", flush=True)
    return failed


def start(command: list[str], log: Path, environment: dict[str, str]) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as stream:
        stream.write(f"$ {' '.join(command)}\n")
        stream.flush()
        return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=environment)


def read_scores(folder: Path) -> dict[str, float] | None:
    """STS-B Spearman and SciFact NDCG@10 / Recall@100 of a scored model, or None before both exist."""
    sts, scifact = folder / "eval" / "stsb.json", folder / "eval" / "scifact.json"
    if not (sts.exists() and scifact.exists()):
        return None
    sts_scores, retrieval = json.loads(sts.read_text()), json.loads(scifact.read_text())
    return {"stsb": sts_scores["spearman"], "ndcg@10": retrieval["ndcg@10"], "recall@100": retrieval["recall@100"]}


def table_rows(output: Path, seeds: list[int]) -> list[tuple[str, str, str, dict[str, list[float]]]]:
    """(stage 1, stage 2 data, arm, metric → the finished seeds' values) for every cell of the grid."""
    cells = [("none", "–", "no pre-training", Path("none"))]
    cells += [(s1, "–", "no stage 2", Path(s1)) for s1 in STAGE1]
    cells += [(s1, data, ARM_NAMES[arm], Path(s1) / data / arm) for s1 in STAGE1 for data in STAGE2_DATA
              for arm in ARMS]
    scratch = sorted({p.name for p in output.glob("seed*/scratch-w*")})
    cells += [("scratch", "–", f"retromae+contrastive from scratch, weight {name.removeprefix('scratch-w')}",
               Path(name)) for name in scratch]
    rows = []
    for stage1, data, arm, relative in cells:
        found = [s for seed in seeds if (s := read_scores(output / f"seed{seed}" / relative)) is not None]
        if found:
            rows.append((stage1, data, arm, {key: [f[key] for f in found] for key in found[0]}))
    return rows


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def markdown(rows) -> str:
    lines = ["| stage 1 | stage 2 data | stage 2 | seeds | STS-B test Spearman (zero-shot) | SciFact NDCG@10 "
             "(fine-tuned) | SciFact R@100 |", "|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {s1} | {data} | {arm} | {len(v['stsb'])} | {spread(v['stsb'])} | {spread(v['ndcg@10'])} | "
              f"{spread(v['recall@100'])} |" for s1, data, arm, v in rows]
    return "\n".join(lines) + "\n"


def gap_row(output: Path, seeds: list[int], first: Path, second: Path, labels: str) -> list[str]:
    """A table row: `labels`, then `first` minus `second` over the seeds where both are scored (STS-B Spearman,
    SciFact NDCG@10); no row when no seed has both."""
    pairs = [(one, other) for seed in seeds if (one := read_scores(output / f"seed{seed}" / first))
             and (other := read_scores(output / f"seed{seed}" / second))]
    if not pairs:
        return []
    gaps = {key: [one[key] - other[key] for one, other in pairs] for key in ("stsb", "ndcg@10")}
    return [f"| {labels} | {len(pairs)} | {spread(gaps['stsb'])} | {spread(gaps['ndcg@10'])} |"]


def paired_gaps(output: Path, seeds: list[int]) -> str:
    """The paper's claim seed by seed: RetroMAE + contrastive minus each single-objective arm (and minus no stage 2),
    per stage-1 model and stage-2 data."""
    lines = ["| stage 1 | stage 2 data | RetroMAE + contrastive minus | seeds | STS-B Spearman | SciFact NDCG@10 |",
             "|---|---|---|---:|---:|---:|"]
    for stage1, data in itertools.product(STAGE1, STAGE2_DATA):
        both = Path(stage1, data, "retromae+contrastive")
        for other, name in ((Path(stage1, data, "retromae"), "RetroMAE alone"),
                            (Path(stage1, data, "contrastive"), "contrastive alone"), (Path(stage1), "no stage 2")):
            lines += gap_row(output, seeds, both, other, f"{stage1} | {data} | {name}")
    return "\n".join(lines) + "\n"


def stage1_gaps(output: Path, seeds: list[int]) -> str:
    """Stage-1 RetroMAE minus the stage-1 MLM control under the same stage 2 (or none), seed by seed (each seed's
    two stage-1 models start from its one initial model)."""
    lines = ["| stage 2 data | stage 2 | seeds | STS-B Spearman | SciFact NDCG@10 |", "|---|---|---:|---:|---:|"]
    lines += gap_row(output, seeds, Path("retromae"), Path("mlm"), "– | no stage 2")
    for data, arm in itertools.product(STAGE2_DATA, ARMS):
        lines += gap_row(output, seeds, Path("retromae", data, arm), Path("mlm", data, arm),
                         f"{data} | {ARM_NAMES[arm]}")
    return "\n".join(lines) + "\n"


def plot(rows, path: Path) -> None:
    """One panel per metric: a bar per cell (mean over the seeds), each seed's value a dot."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 1.5))
    labels = [f"{s1} · {data} · {arm}" if data != "–" else f"{s1} · {arm}" for s1, data, arm, _ in rows]
    colours = {"none": "tab:grey", "retromae": "tab:blue", "mlm": "tab:orange", "scratch": "tab:red"}
    for axis, (key, title) in zip(axes, (("stsb", "STS-B test Spearman, [CLS] zero-shot"),
                                         ("ndcg@10", "SciFact test NDCG@10 after fine-tuning")), strict=True):
        axis.barh(range(len(rows)), [statistics.fmean(v[key]) for *_, v in rows],
                  color=[colours[r[0]] for r in rows], alpha=0.7)
        for position, (*_, values) in enumerate(rows):
            axis.plot(values[key], [position] * len(values[key]), "k.", markersize=5)
        axis.set_yticks(range(len(rows)), labels if key == "stsb" else [""] * len(rows), fontsize=8)
        axis.invert_yaxis()
        axis.set(title=title, xlabel="bar: mean over seeds; dots: each seed")
        clamp_axis(axis, "spearman" if key == "stsb" else key, "x")  # within the metric's range
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(output: Path, seeds: list[int]) -> str:
    rows = table_rows(output, seeds)
    if not rows:
        raise SystemExit(f"{output}: no scored model yet")
    table = (markdown(rows) + "\nPaired by seed:\n\n" + paired_gaps(output, seeds)
             + "\nStage-1 RetroMAE minus stage-1 MLM, paired by seed:\n\n" + stage1_gaps(output, seeds))
    write_text_atomic(output / "two-stage.md", table)
    plot(rows, output / "two-stage.png")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("runs/two-stage-cpu"))
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--corpus", nargs="+", default=None,
                        help="stage-1 corpus (default: DATA/pretrain/nltk-english.jsonl and python-docs.jsonl)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--parallel", type=int, default=2, help="jobs at once, one thread each")
    parser.add_argument("--stage1", nargs="+", choices=tuple(STAGE1), default=list(STAGE1),
                        help="stage-1 objectives (default: both)")
    parser.add_argument("--stage2-data", nargs="+", choices=STAGE2_DATA, default=list(STAGE2_DATA),
                        help="stage-2 data (default: both)")
    parser.add_argument("--stage1-steps", type=int, default=1200)
    parser.add_argument("--stage2-steps", type=int, default=150)
    parser.add_argument("--scratch-weights", nargs="*", default=["1", "0.1"],
                        help="contrastive weights of the from-scratch retromae+contrastive runs")
    parser.add_argument("--stage1-seed", type=int, default=None,
                        help="pre-train stage 1 once, with this seed, and run stage 2 and fine-tuning from it with "
                             "each of --seeds (default: every seed its own initial model and stage 1)")
    parser.add_argument("--sizes", type=json.loads, default={},
                        help='other Settings fields as JSON, e.g. \'{"hidden_size": 64, "layers": 1}\' (toy runs)')
    parser.add_argument("--report-only", action="store_true", help="only aggregate the finished runs")
    args = parser.parse_args()
    corpus = args.corpus or [str(args.data / "pretrain" / name) for name in ("nltk-english.jsonl", "python-docs.jsonl")]
    settings = Settings(output=args.output, data=args.data, corpus=corpus, stage1=tuple(args.stage1),
                        stage2_data=tuple(args.stage2_data), stage1_steps=args.stage1_steps,
                        stage2_steps=args.stage2_steps, **args.sizes)
    if not args.report_only:
        args.output.mkdir(parents=True, exist_ok=True)
        stage1_seeds = [args.stage1_seed] if args.stage1_seed is not None else args.seeds
        jobs = [job for seed in stage1_seeds for job in stage1_jobs(settings, seed)]
        if args.scratch_weights:
            jobs += scratch_jobs(settings, stage1_seeds[0], args.scratch_weights)
        jobs += [job for seed in args.seeds
                 for job in stage2_jobs(settings, seed, seed if args.stage1_seed is None else args.stage1_seed)]
        failed = run_jobs(jobs, args.parallel)
        if failed:
            print(f"failed or not run: {', '.join(failed)}", file=sys.stderr)
    print(report(args.output, args.seeds))


if __name__ == "__main__":
    main()
