"""The order in which the training loop reads its examples: seeded, epoch-wise, resumable at any micro-batch.

Owns `ResumableBatchSampler` and the order of one epoch (`epoch_order`): a permutation drawn from `seed + epoch`,
optionally regrouped by example length so that a batch holds examples of similar length and pays little padding; and
how far one optimiser step may wrap round the data (`check_step`, shared with finetune's `GroupBatchSampler`).
Does not own datasets, collation or the loop; the loop builds one sampler per process.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from retromae.runtime.errors import DataError

# Length grouping sorts windows of this many global batches by length, as transformers' `group_by_length` sorts
# "mega-batches" of 50: wide enough that a window holds many lengths, narrow enough that the order stays random.
GROUP_WINDOW_BATCHES = 50
# An optimiser step reads --gradient-accumulation-steps global batches in order, wrapping round the data from one epoch
# to the next; one that reads the data more than this many times over only repeats it, for hours (1e8 never ended).
MAX_PASSES_PER_STEP = 100


def check_step(batches_per_epoch: int, accumulation: int, data: str) -> None:
    """DataError when one optimiser step of `accumulation` global batches would read `data` (which makes
    `batches_per_epoch` of them) more than MAX_PASSES_PER_STEP times over."""
    if accumulation > MAX_PASSES_PER_STEP * batches_per_epoch:
        passes = math.ceil(accumulation / batches_per_epoch)
        raise DataError(f"{data} make {batches_per_epoch:,} global batches; --gradient-accumulation-steps "
                        f"{accumulation} reads {accumulation:,} in one optimiser step, the data {passes:,} times over "
                        f"(a step may wrap round the data at most {MAX_PASSES_PER_STEP} times): lower "
                        "--gradient-accumulation-steps")


def epoch_order(size: int, global_batch: int, seed: int, epoch: int, lengths: np.ndarray | None = None) -> torch.Tensor:
    """The example indices of one epoch, (batches_per_epoch * global_batch,) int64, in reading order.

    Without `lengths`: the first full global batches of a permutation drawn from `seed + epoch` (the remainder is
    left out). With `lengths` (one per example): the same examples, regrouped: the permutation is cut into windows
    of `GROUP_WINDOW_BATCHES` global batches, each window sorted by decreasing length and cut into global batches,
    and the epoch's global batches are then shuffled (from the same generator), so that long and short batches
    alternate at random rather than in waves."""
    generator = torch.Generator().manual_seed(seed + epoch)
    used = size // global_batch * global_batch
    order = torch.randperm(size, generator=generator)[:used]  # (N,)
    if lengths is None:
        return order
    window = GROUP_WINDOW_BATCHES * global_batch
    window_id = torch.arange(used) // window  # (N,)
    longest = int(lengths.max()) if len(lengths) else 0
    shortness = longest - torch.from_numpy(np.asarray(lengths, dtype=np.int64))[order]  # (N,): 0 for the longest
    order = order[torch.argsort(window_id * (longest + 1) + shortness, stable=True)]  # by window, then length
    batches = order.view(-1, global_batch)  # (batches, global_batch)
    return batches[torch.randperm(batches.shape[0], generator=generator)].flatten()


class ResumableBatchSampler:
    """Seeded, epoch-wise shuffled micro-batches of one process's shard, starting at any position.

    Epoch e is `epoch_order(..., seed, e)`, computed once when the epoch starts; each global batch of
    `batch_size * world_size` indices is split by rank, so every process sees distinct examples and the order does
    not depend on restarts. With `lengths`, batches are grouped by length (`epoch_order`): the same examples each
    epoch, less padding. An optimiser step of `accumulation` global batches may wrap round the data (`check_step`).
    """

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1, start: int = 0,
                 lengths: np.ndarray | None = None, accumulation: int = 1):
        self.global_batch = batch_size * world_size
        if size < self.global_batch:
            raise DataError(f"the data has {size} examples, fewer than one global batch of {self.global_batch}")
        if lengths is not None and len(lengths) != size:
            raise DataError(f"{len(lengths)} example lengths for {size} examples; give one length per example")
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.rank, self.start, self.lengths = rank, start, lengths
        self.batches_per_epoch = size // self.global_batch
        check_step(self.batches_per_epoch, accumulation, f"the data's {size:,} examples")

    def __iter__(self) -> Iterator[list[int]]:
        position = self.start
        epoch, order = None, torch.empty(0, dtype=torch.int64)
        while True:
            current, offset = divmod(position, self.batches_per_epoch)
            if current != epoch:
                epoch, order = current, epoch_order(self.size, self.global_batch, self.seed, current, self.lengths)
            first = offset * self.global_batch + self.rank * self.batch_size
            yield order[first:first + self.batch_size].tolist()
            position += 1
