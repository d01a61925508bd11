"""The order in which the training loop reads its examples: seeded, epoch-wise, resumable at any micro-batch.

Owns `ResumableBatchSampler` and the order of one epoch (`epoch_order`): a permutation drawn from `seed + epoch`,
optionally regrouped by example length so that a batch holds examples of similar length and pays little padding.
Does not own datasets, collation or the loop; the loop builds one sampler per process.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from retromae.runtime.errors import DataError

# Length grouping sorts windows of this many global batches by length, as transformers' `group_by_length` sorts
# "mega-batches" of 50: wide enough that a window holds many lengths, narrow enough that the order stays random.
GROUP_WINDOW_BATCHES = 50


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
    epoch, less padding.
    """

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1, start: int = 0,
                 lengths: np.ndarray | None = None):
        self.global_batch = batch_size * world_size
        if size < self.global_batch:
            raise DataError(f"the data has {size} examples, fewer than one global batch of {self.global_batch}")
        if lengths is not None and len(lengths) != size:
            raise DataError(f"{len(lengths)} example lengths for {size} examples; give one length per example")
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.rank, self.start, self.lengths = rank, start, lengths
        self.batches_per_epoch = size // self.global_batch

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
