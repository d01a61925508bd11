"""The training loop's data order at Wikipedia scale: what each micro-batch costs the main process.

Measured in one process on `--blocks` examples (default 10M, Wikipedia's 7M blocks of 512 tokens and more):

- reference: the sampler as it was, one `torch.randperm(blocks)` per micro-batch (`per_micro_batch_order`);
- ours, plain: `ResumableBatchSampler`, one permutation when an epoch starts (its first batch pays it);
- ours, grouped by length (`--group-by-length`, the default): the permutation plus one sort of the epoch by
  window and length, with lengths drawn like a real corpus's blocks (72% full, the rest uniform).

For each: the first micro-batch (the epoch's start) and the median of the next `--batches` micro-batches, in ms,
the cost per micro-batch amortised over an epoch (blocks / B micro-batches), and the reference's over ours. The
GPU step of BERT-base at B=32, L=512 is about 72 ms (issue 20): a stall on the main process longer than a
fraction of it leaves the GPU idle.

Run: PYTHONPATH=src python benchmarks/batch_sampler.py [--blocks 10000000] [--batch-size 32] [--batches 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator

import numpy as np
import torch
from common import machine_header

from retromae.data.batch_sampler import ResumableBatchSampler


def per_micro_batch_order(size: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """The reference: the epoch's permutation drawn again for every micro-batch (the sampler before issue 20)."""
    position, batches_per_epoch = 0, size // batch_size
    while True:
        epoch, offset = divmod(position, batches_per_epoch)
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))
        yield order[offset * batch_size:(offset + 1) * batch_size].tolist()
        position += 1


def block_lengths(blocks: int, longest: int) -> np.ndarray:
    """Lengths like a real corpus cut into blocks: 72% full, the partial rest uniform (issue 20: 28% partial)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, longest, blocks)
    lengths[rng.random(blocks) < 0.72] = longest
    return lengths


def time_batches(batches: Iterator[list[int]], count: int) -> tuple[float, float]:
    """Milliseconds of the first micro-batch and the median of the next `count`."""
    times = []
    for _ in range(count + 1):
        started = time.perf_counter()
        next(batches)
        times.append(1000 * (time.perf_counter() - started))
    return times[0], statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=10_000_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=510, help="tokens of a full block")
    parser.add_argument("--batches", type=int, default=20, help="timed micro-batches after the first")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    lengths = block_lengths(args.blocks, args.max_length)
    runs = {
        "reference: randperm per micro-batch": per_micro_batch_order(args.blocks, args.batch_size, 0),
        "ours: once per epoch": iter(ResumableBatchSampler(args.blocks, args.batch_size, 0)),
        "ours: grouped by length": iter(ResumableBatchSampler(args.blocks, args.batch_size, 0, lengths=lengths)),
    }
    print(f"blocks={args.blocks:,} B={args.batch_size} threads={torch.get_num_threads()}")
    print(f"{'order':<38}{'first ms':>10}{'next ms (median)':>18}{'amortised ms':>14}{'reference / ours':>18}")
    per_epoch, reference = args.blocks // args.batch_size, None
    for name, batches in runs.items():
        first, median = time_batches(batches, args.batches)
        amortised = (first + (per_epoch - 1) * median) / per_epoch
        reference = reference or amortised
        print(f"{name:<38}{first:>10.1f}{median:>18.4f}{amortised:>14.4f}{reference / amortised:>18,.0f}")


if __name__ == "__main__":
    main()
