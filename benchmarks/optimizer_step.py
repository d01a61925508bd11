"""Benchmark: one AdamW update of MiniLM-L6-sized parameters on the CPU, per-tensor loop against foreach and fused.

The parameters have all-MiniLM-L6-v2's shapes (word embeddings 30,522 x 384, six layers, biases and norms) with
random gradients; each implementation updates its own copy, rounds alternating, median wall and CPU seconds (the
CPU time does not depend on other jobs sharing the machine). Equality: the largest difference between the
per-tensor and fused parameters after three steps.

    PYTHONPATH=src python benchmarks/optimizer_step.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from common import machine_header

SHAPES = [(30522, 384)] + [(384, 384)] * 24 + [(1536, 384), (384, 1536)] * 6 + [(384,)] * 100
KINDS = {"per-tensor (the CPU default)": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def parameters(seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    found = [torch.nn.Parameter(torch.randn(*shape, generator=generator)) for shape in SHAPES]
    for parameter in found:
        parameter.grad = torch.randn(parameter.shape, generator=generator)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    print(machine_header(), flush=True)
    optimizers = {name: torch.optim.AdamW(parameters(), lr=1e-4, **options) for name, options in KINDS.items()}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in optimizers}
    for _ in range(args.rounds):
        for name, optimizer in optimizers.items():
            cpu, wall = time.process_time(), time.perf_counter()
            optimizer.step()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    print(f"{sum(p.numel() for p in parameters()):,} parameters; {torch.get_num_threads()} threads; load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        print(f"{name:30s} wall {statistics.median(w for w, _ in values):.3f} s  "
              f"cpu {statistics.median(c for _, c in values):.3f} s")
    plain, fused = parameters(), parameters()
    steppers = [torch.optim.AdamW(plain, lr=1e-3), torch.optim.AdamW(fused, lr=1e-3, fused=True)]
    for _ in range(3):
        for optimizer in steppers:
            optimizer.step()
    difference = max((a - b).abs().max().item() for a, b in zip(plain, fused, strict=True))
    print(f"max |per-tensor - fused| after 3 steps: {difference:.1e}")


if __name__ == "__main__":
    main()
