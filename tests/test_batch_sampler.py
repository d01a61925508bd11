"""The training loop's data order: once-per-epoch permutations, length grouping, exact resumption."""

from itertools import islice

import numpy as np
import pytest
import torch

from retromae.data import batch_sampler
from retromae.data.batch_sampler import ResumableBatchSampler
from retromae.runtime.errors import DataError


def take(sampler: ResumableBatchSampler, count: int) -> list[list[int]]:
    return list(islice(iter(sampler), count))


def count_randperm(monkeypatch) -> list[int]:
    """The size of every permutation the sampler draws."""
    sizes: list[int] = []
    original = torch.randperm

    def randperm(size, *args, **kwargs):
        sizes.append(size)
        return original(size, *args, **kwargs)

    monkeypatch.setattr(batch_sampler.torch, "randperm", randperm)
    return sizes


@pytest.mark.parametrize("grouped", [False, True])
def test_the_corpus_is_permuted_once_per_epoch_not_once_per_micro_batch(monkeypatch, grouped):
    """At 10M blocks one permutation costs about 0.2 s: drawn per micro-batch it stalls every step."""
    lengths = np.random.default_rng(0).integers(1, 50, 1000) if grouped else None
    sizes = count_randperm(monkeypatch)
    take(ResumableBatchSampler(1000, 10, seed=1, lengths=lengths), 250)  # 100 batches an epoch: epochs 0, 1, 2
    assert sizes.count(1000) == 3


def test_grouped_epochs_read_the_same_examples_in_batches_of_similar_length():
    lengths = np.random.default_rng(0).integers(1, 512, 2000)
    plain = ResumableBatchSampler(2000, 8, seed=3)
    grouped = ResumableBatchSampler(2000, 8, seed=3, lengths=lengths)
    for epoch in range(2):
        ours, theirs = (take(s, 250 * (epoch + 1))[250 * epoch:] for s in (grouped, plain))
        assert sorted(i for batch in ours for i in batch) == sorted(i for batch in theirs for i in batch)

    def padded(batches: list[list[int]]) -> int:
        return sum(len(batch) * int(lengths[batch].max()) for batch in batches)

    assert padded(take(grouped, 250)) < 0.7 * padded(take(plain, 250))  # random lengths: about half is padding
    assert take(grouped, 250) != sorted(take(grouped, 250), key=lambda batch: -int(lengths[batch].max()))


def test_grouped_order_resumes_exactly_and_splits_global_batches_by_rank():
    lengths = np.random.default_rng(1).integers(1, 100, 600)
    full = take(ResumableBatchSampler(600, 4, seed=5, world_size=2, lengths=lengths), 200)
    assert take(ResumableBatchSampler(600, 4, seed=5, world_size=2, start=123, lengths=lengths), 77) == full[123:]
    other = take(ResumableBatchSampler(600, 4, seed=5, rank=1, world_size=2, lengths=lengths), 75)
    for ours, theirs in zip(full[:75], other, strict=True):
        assert not set(ours) & set(theirs)


def test_lengths_must_match_the_examples():
    with pytest.raises(DataError, match="3 example lengths for 10 examples"):
        ResumableBatchSampler(10, 2, seed=0, lengths=np.ones(3, dtype=np.int64))


@pytest.mark.parametrize(("batch_size", "world_size"), [(2, 1), (1, 2), (2, 2)])
def test_an_optimiser_step_may_wrap_round_the_data_but_not_without_end(batch_size, world_size):
    """Round six: `--gradient-accumulation-steps 100000000` on 20 examples ran for ever. A step's micro-batches wrap
    round the data from epoch to epoch, at most `MAX_PASSES_PER_STEP` times; the global batch counts every process."""
    batches = 20 // (batch_size * world_size)
    limit = batch_sampler.MAX_PASSES_PER_STEP * batches
    assert len(take(ResumableBatchSampler(20, batch_size, seed=0, world_size=world_size, accumulation=limit),
                    limit)) == limit
    for accumulation in (limit + 1, 100_000_000):
        with pytest.raises(DataError, match=rf"^the data's 20 examples make {batches} global batches; "
                                            rf"--gradient-accumulation-steps {accumulation} reads "):
            ResumableBatchSampler(20, batch_size, seed=0, world_size=world_size, accumulation=accumulation)
