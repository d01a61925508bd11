"""`retromae quickstart`: the whole system on real text, offline, in minutes on a laptop CPU.

Owns: the quickstart pipeline. On the standard library's docstrings (first line = query, rest = document,
split by module; `retromae.data.stdlib_docs`) or on a BEIR folder the user gives, it trains a WordPiece
tokenizer and initialises a small BERT, pre-trains it with RetroMAE, fine-tunes it, fine-tunes the same random
initialisation without pre-training, and evaluates both against BM25 on the test split; it writes a table
(`results.md`, `results.json`) and a plot of the losses (`losses.png`). Does not own any of those steps.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from retromae.config import option, require, save_config
from retromae.console import Stages
from retromae.data.corpus import iter_corpus
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.data.stdlib_docs import build_stdlib_retrieval_set
from retromae.encoder import Encoder
from retromae.evaluation import evaluate_run
from retromae.evaluation.experiments import pyplot, read_metrics
from retromae.finetune.run import FinetuneConfig, finetune
from retromae.io import write_text_atomic
from retromae.pretrain import PretrainConfig, pretrain
from retromae.retrieval.bm25 import bm25_search
from retromae.retrieval.search import TextOptions, dense_search
from retromae.run_folder import OutputOptions, claim_folder, run_identity
from retromae.scratch import save_random_bert, train_wordpiece

METRICS = ("ndcg@10", "mrr@10", "recall@100")
# Mean pooling: a small encoder trained from scratch for minutes and fine-tuned with CLS pooling stays at chance
# (measured on the standard-library set, docs/RESULTS.md); the mean of its token vectors learns.
FINETUNE_POOLING = "mean"
OUTPUTS = ("quickstart-config.json", "stdlib-docstrings", "initial-model", "cache", "pretrain", "finetune-retromae",
           "finetune-scratch", "results.md", "results.json", "losses.png")


@dataclasses.dataclass(kw_only=True)
class QuickstartConfig(OutputOptions):
    """Options of `retromae quickstart`; defaults fit ten minutes on a 2-core CPU."""

    output: str = option("runs/quickstart", "output folder")
    data: str | None = option(None, "a BEIR folder with qrels/train.tsv and qrels/test.tsv "
                                    "(default: the Python standard library's docstrings, built offline)")
    corpus: list[str] | None = option(None, "pre-training corpus files (default: the retrieval corpus itself)")
    vocab_size: int = option(8000, "WordPiece vocabulary trained on the corpus")
    hidden_size: int = option(256, "hidden size of the small BERT encoder")
    layers: int = option(4, "transformer layers of the encoder")
    max_length: int = option(128, "tokens per pre-training block and per passage")
    pretrain_steps: int = option(200, "RetroMAE pre-training steps")
    pretrain_batch_size: int = option(16, "pre-training blocks per step")
    finetune_epochs: float = option(2.0, "fine-tuning epochs over the train queries")
    finetune_batch_size: int = option(32, "queries per fine-tuning step (in-batch negatives)")
    seed: int = option(42, "random seed")

    def __post_init__(self) -> None:
        require(self.pretrain_steps > 0, "pretrain_steps", "must be positive")
        require(self.finetune_epochs > 0, "finetune_epochs", "must be positive")
        require(self.hidden_size % 64 == 0, "hidden_size", "must be a multiple of 64 (heads of 64)")


def prepare_data(config: QuickstartConfig, output: Path) -> Path:
    """The BEIR folder to use: the user's, or the standard library's docstrings built under `output`."""
    if config.data:
        return Path(config.data)
    folder = output / "stdlib-docstrings"
    if not (folder / "corpus.jsonl").exists():
        counts = build_stdlib_retrieval_set(folder)
        print(f"standard-library docstrings: {counts['documents']} documents, {counts['train']} train and "
              f"{counts['test']} test queries → {folder}")
    return folder


def initial_model(corpus: list[str], config: QuickstartConfig, folder: Path) -> Path:
    """A WordPiece tokenizer trained on the corpus and a randomly initialised small BERT, saved together."""
    tokenizer = train_wordpiece((document.text for document in iter_corpus(corpus)), config.vocab_size,
                                config.max_length)
    return save_random_bert(tokenizer, folder, hidden_size=config.hidden_size, layers=config.layers,
                            max_positions=max(512, config.max_length), seed=config.seed)


def _finetune(model: str, data: Path, output: Path, config: QuickstartConfig) -> Path:
    return finetune(FinetuneConfig(
        model=model, data=str(data), split="train", negatives="none", output=str(output),
        epochs=config.finetune_epochs, batch_size=config.finetune_batch_size, learning_rate=5e-4,
        pooling=FINETUNE_POOLING, normalize=True, passage_max_length=config.max_length, query_max_length=32,
        log_every=5, save_every=0, seed=config.seed))


def _dense_results(model: Path, corpus: dict[str, str], data) -> dict[str, float]:
    encoder = Encoder.load(str(model))
    run = dense_search(encoder, corpus, data.queries, k=100, passages=TextOptions(max_length=128),
                       questions=TextOptions(max_length=32))
    return evaluate_run(data.qrels, run, (10, 100))


def evaluate_all(data_dir: Path, models: dict[str, Path]) -> dict[str, dict[str, float]]:
    """BM25 and each dense model on the test split."""
    data = load_retrieval_set(data_dir, "test")
    corpus = data.corpus_texts()
    results = {"BM25": evaluate_run(data.qrels, bm25_search(corpus, data.queries, k=100), (10, 100))}
    for name, model in models.items():
        results[name] = _dense_results(model, corpus, data)
    return results


def results_table(results: dict[str, dict[str, float]]) -> str:
    """A Markdown table of the metrics that matter here."""
    lines = ["| model | " + " | ".join(METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    lines += [f"| {name} | " + " | ".join(f"{scores[m]:.3f}" for m in METRICS) + " |"
              for name, scores in results.items()]
    return "\n".join(lines) + "\n"


def plot_losses(runs: dict[str, Path], path: Path) -> None:
    """One panel per training run: its loss components against the step."""
    plt = pyplot()
    figure, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.5))
    for axis, (title, folder) in zip(axes, runs.items(), strict=True):
        records = read_metrics(folder / "metrics.jsonl")
        for key in sorted(k for k in records[0] if k != "step" and not k.startswith("tokens") and not k.endswith("lr")):
            axis.plot([r["step"] for r in records], [r[key] for r in records], label=key)
        axis.set(title=title, xlabel="step", ylabel="loss")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def quickstart(config: QuickstartConfig) -> dict[str, dict[str, float]]:
    """Run the whole pipeline; returns the test metrics per model."""
    started = time.perf_counter()
    output = Path(config.output)
    claim_folder(output, "quickstart", run_identity(config), OUTPUTS, overwrite=config.overwrite, resumable=False)
    save_config(config, output / "quickstart-config.json")
    stages = Stages(5)
    stages.start(f"preparing data, a {config.vocab_size:,}-token WordPiece tokenizer and a random "
                 f"{config.layers}-layer BERT")
    data = prepare_data(config, output)
    corpus = config.corpus or [str(data / "corpus.jsonl")]
    initial = initial_model(corpus, config, output / "initial-model")
    stages.start(f"pre-training RetroMAE ({config.pretrain_steps:,} steps)")
    pretrained = pretrain(PretrainConfig(
        model=str(initial), corpus=corpus, output=str(output / "pretrain"), max_steps=config.pretrain_steps,
        batch_size=config.pretrain_batch_size, max_length=config.max_length, learning_rate=5e-4,
        log_every=10, save_every=0, seed=config.seed, cache_dir=str(output / "cache")))
    epochs = f"{config.finetune_epochs:g} epoch{'s' if config.finetune_epochs != 1 else ''}"
    stages.start(f"fine-tuning the pre-trained encoder ({epochs})")
    with_pretraining = _finetune(str(pretrained / "encoder"), data, output / "finetune-retromae", config)
    stages.start(f"fine-tuning the same initialisation without pre-training ({epochs})")
    without_pretraining = _finetune(str(initial), data, output / "finetune-scratch", config)
    stages.start("evaluating BM25 and both encoders on the test split")
    results = evaluate_all(data, {
        "RetroMAE pre-trained + fine-tuned": with_pretraining / "encoder",
        "fine-tuned without pre-training": without_pretraining / "encoder",
    })
    table = results_table(results)
    minutes = (time.perf_counter() - started) / 60
    write_text_atomic(output / "results.md", f"Test split of {data} ({minutes:.1f} min)\n\n{table}")
    write_text_atomic(output / "results.json", json.dumps(results, indent=2) + "\n")
    plot_losses({"RetroMAE pre-training": pretrained, "fine-tuning (pre-trained)": with_pretraining,
                 "fine-tuning (no pre-training)": without_pretraining}, output / "losses.png")
    print(f"\n{table}\nresults: {output / 'results.md'}   losses: {output / 'losses.png'}   ({minutes:.1f} min)")
    return results
