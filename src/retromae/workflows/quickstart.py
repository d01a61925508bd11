"""`retromae quickstart`: the papers' comparison on real text, offline, in minutes.

Owns: the quickstart pipeline (its options and budgets are `retromae.workflows.config`). On the standard library's
docstrings (first line = query, rest = document, split by module; `retromae.data.stdlib_docs`) or on a BEIR folder
the user gives, it trains a WordPiece tokenizer, initialises one small BERT, pre-trains it twice under the same
budget (MLM, and RetroMAE with enhanced decoding), fine-tunes the two pre-trained encoders and the random
initialisation itself the same way (in-batch negatives, CLS pooling: the papers' protocol), and evaluates the three
against BM25 on the test split. It writes a table (`results.md`, `results.json`: NDCG@10, MRR@10, Recall@100 and
minutes per model) and a plot (`results.png`: pre-training losses and NDCG@10 bars). The budget is a preset chosen
from the device (`cpu`: about four minutes on two cores; `cuda`: a larger one, about four minutes on one H100); every
size can be overridden. Does not own any of the training, retrieval or evaluation steps.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from retromae.data.corpus import CorpusTexts, iter_corpus
from retromae.data.held_out import check_held_out
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.data.stdlib_docs import build_stdlib_retrieval_set
from retromae.data.training_groups import load_training_data
from retromae.evaluation.axes import clamp_axis
from retromae.evaluation.experiments import pyplot, read_metrics
from retromae.evaluation.metric_registry import cutoffs, long_title, primary_key
from retromae.evaluation.metrics import evaluate_run, retrieval_depth
from retromae.finetuning.batches import GroupBatchSampler
from retromae.finetuning.run import FinetuneConfig, finetune
from retromae.models.encoder import Encoder
from retromae.models.pretrained import load_tokenizer
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.pretraining.scratch import family_tokenizer, save_random_model
from retromae.retrieval.bm25 import bm25_search
from retromae.retrieval.search import TextOptions, dense_search
from retromae.runtime.console import NOT_LOSSES, Result, Stages, given, say
from retromae.runtime.io import write_text_atomic
from retromae.runtime.options import save_config, steps_from_passes
from retromae.runtime.run_folder import claim_folder, input_paths, mark_started, run_identity
from retromae.workflows.config import Budget, QuickstartConfig

METRICS = {key: long_title(key) for key in ("ndcg@10", "mrr@10", "recall@100")}  # results.md's columns
CUTOFFS = cutoffs(list(METRICS))  # 10, 100: the runs are the top max(CUTOFFS)
OUTPUTS = ("quickstart-config.json", "stdlib-docstrings", "initial-model", "cache", "pretrain-mlm", "pretrain-retromae",
           "finetune-none", "finetune-mlm", "finetune-retromae", "results.md", "results.json", "results.png")
# The tokens the quickstart's models read when it evaluates them (and `retromae evaluate` on them): the passage length
# its published figures were measured with (a quarter of the standard library's docstrings are longer).
EVALUATION_LENGTH = 128
# (table name, pre-training objective or None, its options): each variant starts from the same initialisation.
VARIANTS = (
    ("no pre-training", None, {}),
    ("MLM", "mlm", {"encoder_mask_ratio": 0.15}),
    ("RetroMAE (enhanced)", "retromae", {"decoding": "enhanced"}),
)


def detect_device() -> str:
    """'cuda' when torch sees a CUDA GPU (the training loop then runs there), else 'cpu'."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def planned_stages(budget: Budget, build_data: bool) -> list[tuple[str, float]]:
    """The stages of a run and the seconds each is expected to take."""
    shape = f"{budget.pretrain_steps} steps x {budget.pretrain_batch_size} x {budget.max_length} tokens"
    stages = [("build the standard-library docstring set", 10.0)] if build_data else []
    stages += [("train a WordPiece tokenizer, initialise the encoder", 10.0),
               ("BM25 on the test queries", 5.0)]
    for name, objective, _ in VARIANTS:
        if objective:
            seconds = budget.pretrain_steps * budget.seconds_per_step[objective]
            stages.append((f"pre-train with {name}, {shape}", seconds))
        stages.append((f"fine-tune and evaluate: {name}", budget.seconds_per_finetune + budget.seconds_per_evaluation))
    return stages


def describe_budget(preset: str, budget: Budget, seconds: float, architecture: str = "bert") -> str:
    """The budget in words: the preset, its expected time, the model, and each stage's size."""
    precision = "" if budget.mixed_precision == "no" else f", in {budget.mixed_precision}"
    minutes = max(1, round(seconds / 60))
    return (f"the {preset} preset, about {minutes} minute{'s' if minutes > 1 else ''} in all: a {budget.layers}-layer "
            f"{architecture} encoder of hidden size {budget.hidden_size} with a vocabulary of {budget.vocab_size:,} "
            "tokens; each objective "
            f"pre-trains it for {budget.pretrain_steps:,} steps of {budget.pretrain_batch_size} blocks of "
            f"{budget.max_length} tokens (peak learning rate {budget.learning_rate:g}{precision}), then each model "
            f"fine-tunes for {budget.finetune_epochs:g} epochs in batches of {budget.finetune_batch_size} queries")


def prepare_data(config: QuickstartConfig, output: Path) -> Path:
    """The BEIR folder to use: the user's, or the standard library's docstrings built under `output`."""
    if config.data:
        return Path(config.data)
    folder = output / "stdlib-docstrings"
    if not (folder / "corpus.jsonl").exists():
        counts = build_stdlib_retrieval_set(folder)
        say(f"standard-library docstrings: {counts['documents']} documents, {counts['train']} train and "
            f"{counts['test']} test queries → {given(folder)}")
    return folder


def check_finetune_steps(data: Path, budget: Budget, seed: int) -> None:
    """--finetune-epochs over the train split counted in steps as each fine-tuning will count them (one process,
    groups of one query and its positive: `finetune_variant`), weighed against the step domain by the one rule
    (`runtime.options.steps_from_passes`) before anything is trained, and so before the run's lasting work begins
    (a refused run leaves its folder as it found it); a split too small for one batch is refused here too."""
    batches = GroupBatchSampler(load_training_data(data, "train"), budget.finetune_batch_size, 1, seed)
    steps_from_passes("--finetune-epochs", budget.finetune_epochs, batches.batches_per_epoch)


def initial_model(corpus: list[str], budget: Budget, folder: Path, seed: int, architecture: str = "bert") -> Path:
    """The family's kind of tokenizer trained on the corpus and a randomly initialised small model of `architecture`
    (BERT: WordPiece), saved together. It records the length it encodes text with (`model_length`), which its
    pre-trained and fine-tuned exports keep: the quickstart evaluates them with it, as `retromae evaluate` does."""
    tokenizer = family_tokenizer(CorpusTexts(corpus), architecture, budget.vocab_size, 512)
    return save_random_model(tokenizer, folder, hidden_size=budget.hidden_size, layers=budget.layers,
                             max_positions=max(512, budget.max_length), seed=seed, architecture=architecture,
                             max_length=model_length(budget))


def model_length(budget: Budget) -> int:
    """The tokens the quickstart's models read: `EVALUATION_LENGTH`, or the pre-training blocks when longer."""
    return max(EVALUATION_LENGTH, budget.max_length)


def unigram_entropy(corpus: list[str], model: Path) -> float:
    """Nats per token of predicting every token of the corpus by its frequency alone: the plateau a pre-training
    loss sits on until the model learns to use context (docs/RESULTS.md, section 1)."""
    tokenizer = load_tokenizer(str(model))
    counts: collections.Counter[int] = collections.Counter()
    for document in iter_corpus(corpus):
        counts.update(tokenizer(document.text, add_special_tokens=False)["input_ids"])
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values())


def final_losses(pretraining: dict[str, Path]) -> dict[str, dict[str, float]]:
    """Each pre-training run's last logged loss components (encoder_mlm, decoder)."""
    final = {}
    for name, folder in pretraining.items():
        record = read_metrics(folder / "metrics.jsonl")[-1]
        final[name] = {k: v for k, v in record.items() if k not in (*NOT_LOSSES, "loss")}
    return final


def plateau_note(losses: dict[str, dict[str, float]], entropy: float, margin: float = 0.5) -> str:
    """What the pre-training losses say against the unigram plateau, in words."""
    ended = "; ".join(f"{name} " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
                      for name, parts in losses.items())
    text = (f"Pre-training ended at {ended} nats per predicted token; the corpus's unigram entropy (the loss of "
            f"predicting each token by its frequency alone) is {entropy:.2f}.")
    if min(min(parts.values()) for parts in losses.values()) > entropy - margin:
        text += (f" Every loss is still within {margin:.1f} nats of that plateau: at this budget pre-training has "
                 "not yet learned to use context, so the pre-trained rows say nothing about the objectives. On one "
                 "GPU, 3 minutes of pre-training per objective give RetroMAE (enhanced) 0.52 NDCG@10 on SciFact "
                 "against MLM 0.20 and no pre-training 0.04 (docs/RESULTS.md, section 0).")
    return text


def pretrain_variant(initial: Path, corpus: list[str], objective: str, options: dict[str, Any], budget: Budget,
                     output: Path, seed: int) -> Path:
    """Pre-train the initial model with one objective; returns the run folder (encoder/, metrics.jsonl)."""
    return pretrain(PretrainConfig(
        model=str(initial), corpus=corpus, output=str(output), objective=objective, max_steps=budget.pretrain_steps,
        batch_size=budget.pretrain_batch_size, max_length=budget.max_length, learning_rate=budget.learning_rate,
        warmup_ratio=0.05, mixed_precision=budget.mixed_precision, log_every=10, save_every=0, seed=seed,
        cache_dir=str(output.parent / "cache"), **options))


def finetune_variant(model: Path, data: Path, budget: Budget, output: Path, seed: int) -> Path:
    """Fine-tune with in-batch negatives and CLS pooling; returns the run folder (encoder/)."""
    return finetune(FinetuneConfig(
        model=str(model), data=str(data), split="train", negatives="none", output=str(output),
        epochs=budget.finetune_epochs, batch_size=budget.finetune_batch_size, learning_rate=5e-4, pooling="cls",
        normalize=True, passage_max_length=budget.max_length, query_max_length=32,
        mixed_precision=budget.mixed_precision, log_every=10, save_every=0, seed=seed))


def evaluate_dense(model: Path, data_dir: Path, budget: Budget) -> dict[str, float]:
    """A dense encoder's metrics on the test split, queries and passages read up to the length the model records
    (`model_length`), as `retromae evaluate --model` reads them, in the budget's precision (the cpu preset's float32
    also on a CPU where `auto` would encode in bf16, so its figures do not depend on AMX)."""
    data = load_retrieval_set(data_dir, "test")
    dtype = "float32" if budget.mixed_precision == "no" else "auto"
    run = dense_search(Encoder.load(str(model), dtype=dtype), data.corpus_texts(), data.queries,
                       k=retrieval_depth(max(CUTOFFS), data), passages=TextOptions(), questions=TextOptions())
    return evaluate_run(data.qrels, run, CUTOFFS, source=str(data_dir))


def evaluate_bm25(data_dir: Path) -> dict[str, float]:
    """BM25's metrics on the test split."""
    data = load_retrieval_set(data_dir, "test")
    run = bm25_search(data.corpus_texts(), data.queries, k=retrieval_depth(max(CUTOFFS), data))
    return evaluate_run(data.qrels, run, CUTOFFS,
                        source=str(data_dir))


def run_variant(objective: str | None, options: dict[str, Any], initial: Path, corpus: list[str], data: Path,
                budget: Budget, output: Path, seed: int, stages: Stages) -> tuple[dict[str, float], Path | None]:
    """Pre-train (unless `objective` is None), fine-tune and evaluate one variant; its metrics, minutes (in all and
    of pre-training) and pre-training folder."""
    started = time.perf_counter()
    folder, model = None, initial
    if objective:
        stages.next()
        folder = pretrain_variant(initial, corpus, objective, options, budget, output / f"pretrain-{objective}", seed)
        model = folder / "encoder"
    pretrain_minutes = (time.perf_counter() - started) / 60
    stages.next()
    finetuned = finetune_variant(model, data, budget, output / f"finetune-{objective or 'none'}", seed)
    scores = evaluate_dense(finetuned / "encoder", data, budget)
    return {**scores, "minutes": (time.perf_counter() - started) / 60, "pretrain_minutes": pretrain_minutes}, folder


def results_table(results: dict[str, dict[str, float]]) -> str:
    """A Markdown table: the metrics that matter here and the minutes each model took."""
    lines = ["| model | " + " | ".join(METRICS.values()) + " | minutes |", "|---|" + "---:|" * (len(METRICS) + 1)]
    lines += [f"| {name} | " + " | ".join(f"{scores[m]:.3f}" for m in METRICS) + f" | {scores['minutes']:.1f} |"
              for name, scores in results.items()]
    return "\n".join(lines) + "\n"


def model_caption(summary: dict[str, Any], data: Path) -> str:
    """The model every row shares and where it was tested, e.g. "a 2-layer bert encoder of hidden size 128
    (vocabulary 4,000), from random weights; tiny preset; test split of stdlib-docstrings"."""
    budget = summary["budget"]
    return (f"a {budget['layers']}-layer {summary['architecture']} encoder of hidden size {budget['hidden_size']} "
            f"(vocabulary {budget['vocab_size']:,}), from random weights; {summary['preset']} preset; test split of "
            f"{Path(data).name}")


def plot_results(pretraining: dict[str, Path], results: dict[str, dict[str, float]], entropy: float,
                 path: Path, caption: str = "") -> None:
    """Left: pre-training loss components against the step, and the unigram plateau; right: NDCG@10 per model;
    `caption` (the model, `model_caption`) above both."""
    plt = pyplot()
    figure, (losses, bars) = plt.subplots(1, 2, figsize=(11, 4))
    figure.suptitle(caption, fontsize=10)
    for name, folder in pretraining.items():
        records = read_metrics(folder / "metrics.jsonl")
        for key in sorted(k for k in records[0] if k not in (*NOT_LOSSES, "loss")):
            losses.plot([r["step"] for r in records], [r[key] for r in records], label=f"{name}: {key}")
    losses.axhline(entropy, color="grey", linestyle="--", label="unigram entropy (plateau)")
    losses.set(title="pre-training", xlabel="step", ylabel="loss (nats per predicted token)")
    losses.legend()
    names = list(results)
    bars.bar_label(bars.bar(range(len(names)), [results[n][primary_key()] for n in names], color="tab:blue"),
                   fmt="%.3f")
    bars.set_xticks(range(len(names)), names, rotation=15)
    bars.set(title="test queries", ylabel=long_title(primary_key()))
    clamp_axis(bars, primary_key())  # a fraction's axis ends at 1.0
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def quickstart(config: QuickstartConfig) -> Result:
    """Run the whole comparison; returns the test metrics (and minutes) per model, and the table to print."""
    started = time.perf_counter()
    check_held_out(config)  # the test queries are not trained on (the command line checked them before torch)
    output = Path(config.output)
    device = detect_device()
    preset, budget = config.budget(device)
    claim_folder(output, "quickstart", run_identity(config), OUTPUTS, overwrite=config.overwrite, resumable=False,
                 inputs=input_paths(config), started=False)
    save_config(config, output / "quickstart-config.json")
    plan = planned_stages(budget, build_data=config.data is None)
    say(f"device: {device}; budget: "
        f"{describe_budget(preset, budget, sum(seconds for _, seconds in plan), config.architecture)}")
    stages = Stages.planned(plan)
    if config.data is None:
        stages.next()
    data = prepare_data(config, output)
    check_finetune_steps(data, budget, config.seed)
    corpus = config.corpus or [str(data)]  # the folder stands for its corpus file (`data.corpus.corpus_files`)
    stages.next()
    initial = initial_model(corpus, budget, output / "initial-model", config.seed, config.architecture)
    entropy = unigram_entropy(corpus, initial)
    stages.next()
    bm25_started = time.perf_counter()
    results = {"BM25": {**evaluate_bm25(data), "minutes": (time.perf_counter() - bm25_started) / 60}}
    pretraining: dict[str, Path] = {}
    mark_started(output)
    for name, objective, options in VARIANTS:
        results[name], folder = run_variant(objective, options, initial, corpus, data, budget, output, config.seed,
                                            stages)
        if folder is not None:
            pretraining[name] = folder
    summary = {"device": device, "preset": preset, "architecture": config.architecture,
               "budget": dataclasses.asdict(budget),
               "minutes": (time.perf_counter() - started) / 60, "unigram_entropy": entropy,
               "pretraining_losses": final_losses(pretraining), "results": results}
    return Result(results, (write_outputs(summary, pretraining, output, data),))


def write_outputs(summary: dict[str, Any], pretraining: dict[str, Path], output: Path, data: Path) -> str:
    """results.md, results.json and results.png; returns the table and the plateau note, for the command to print."""
    table = results_table(summary["results"])
    body = (f"device {summary['device']}, {summary['preset']} preset; {summary['minutes']:.1f} min in all.\n\n"
            f"{table}\n{plateau_note(summary['pretraining_losses'], summary['unigram_entropy'])}\n")
    write_text_atomic(output / "results.md", f"Test split of {data}; {body}")
    write_text_atomic(output / "results.json", json.dumps(summary, indent=2) + "\n")
    plot_results(pretraining, summary["results"], summary["unigram_entropy"], output / "results.png",
                 model_caption(summary, data))
    return (f"\nTest split of {given(data)}; {body}\nresults: {given(output / 'results.md')}   "
            f"plot: {given(output / 'results.png')}")

