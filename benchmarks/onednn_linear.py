"""Benchmark: a float32 MiniLM forward pass with PyTorch's default linear layers against `retromae.models.onednn`'s.

One process, the same model and inputs; rounds alternate (default, oneDNN, default, ...) and the figure is the
median. The largest absolute difference of the mean-pooled outputs is printed beside it, and each layer shape's
GEMM alone (a (B*L, in) input through an (out, in) weight) is timed the same way.

    PYTHONPATH=src python benchmarks/onednn_linear.py [--batch-size 64] [--length 256] [--rounds 4]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable

import torch
from common import machine_header, minilm_path
from transformers import AutoModel

from retromae.models.onednn import packed_linears


def alternate(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each run, rounds alternating between them, after one warm-up call each."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def packed(model: torch.nn.Module, function: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with packed_linears(model):
            return function()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(machine_header(), flush=True)
    model = AutoModel.from_pretrained(str(minilm_path())).eval()
    ids = torch.randint(1000, 30000, (args.batch_size, args.length))
    mask = torch.ones_like(ids)

    def forward() -> torch.Tensor:
        return model(input_ids=ids, attention_mask=mask).last_hidden_state.mean(dim=1)  # (B, D)

    print(f"all-MiniLM-L6-v2, B={args.batch_size} L={args.length}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    with torch.inference_mode():
        difference = (packed(model, forward)() - forward()).abs().max().item()
        seconds = alternate({"default": forward, "oneDNN": packed(model, forward)}, args.rounds)
        print(f"forward: default {seconds['default']:.3f} s, oneDNN {seconds['oneDNN']:.3f} s, "
              f"{seconds['default'] / seconds['oneDNN']:.2f}x; max |diff| of the pooled vectors {difference:.1e}")
        for shape in ((384, 384), (384, 1536), (1536, 384)):
            layer = torch.nn.Linear(*shape)
            call = functools.partial(layer, torch.randn(args.batch_size * args.length, shape[0]))
            seconds = alternate({"default": call, "oneDNN": packed(layer, call)}, args.rounds)
            print(f"linear {shape[0]}->{shape[1]}: default {seconds['default']:.3f} s, oneDNN "
                  f"{seconds['oneDNN']:.3f} s, {seconds['default'] / seconds['oneDNN']:.2f}x")


if __name__ == "__main__":
    main()
