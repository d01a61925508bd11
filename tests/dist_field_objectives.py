"""Launched by tests/test_field_objectives.py under `torch.distributed.run` with 2 CPU (gloo) processes.

Each process holds its share of a global batch. coCondenser's span loss and supervised SimCSE's loss gather across
processes: the mean of the per-process losses and the average of the per-process gradients (what DDP applies) must
equal the loss and gradient of one process over the whole batch. Contriever's keys of every process must enter
every process's queue, in rank order, as one process pushing the whole batch's keys would. Exits non-zero on a
mismatch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from retromae.losses.losses import info_nce
from retromae.objectives.cocondenser import span_pair_loss
from retromae.objectives.contriever import MoCoQueue, gather_keys
from retromae.objectives.simcse import simcse_loss

PER_PROCESS = 3
DIMENSION = 6


def whole_span_loss(blocks: list[torch.Tensor]) -> torch.Tensor:
    """One process's span loss over every process's (2B, D) block, laid out as the gather lays them out."""
    spans = torch.cat(blocks)  # (W * 2B, D)
    scores = spans @ spans.T
    scores.fill_diagonal_(torch.finfo(scores.dtype).min)
    rows = blocks[0].shape[0]
    local = torch.arange(rows)
    partners = torch.cat([start + (local + rows // 2) % rows for start in range(0, len(spans), rows)])
    return F.cross_entropy(scores, partners)


def compare(name: str, loss: torch.Tensor, whole: torch.Tensor, weight: torch.Tensor, world: int) -> None:
    (grad,) = torch.autograd.grad(loss, weight)
    (whole_grad,) = torch.autograd.grad(whole, weight)
    summed = torch.stack([loss.detach(), *grad.flatten()])
    dist.all_reduce(summed)
    torch.testing.assert_close(summed[0] / world, whole.detach())
    torch.testing.assert_close(summed[1:].view_as(grad) / world, whole_grad)
    assert not torch.allclose(loss.detach(), whole.detach()), "each process should see only its own rows"
    print(f"rank {dist.get_rank()} {name}: gathered loss == single-process {whole.item():.6f}", flush=True)


def check_span_pairs(rank: int, world: int) -> None:
    generator = torch.Generator().manual_seed(1)  # the same tensors on every process
    inputs = torch.randn(world, 2 * PER_PROCESS, DIMENSION, generator=generator)
    weight = torch.randn(4, DIMENSION, generator=generator, requires_grad=True)
    whole = whole_span_loss([x @ weight.T for x in inputs])
    compare("span pairs", span_pair_loss(inputs[rank] @ weight.T), whole, weight, world)


def check_simcse(rank: int, world: int) -> None:
    generator = torch.Generator().manual_seed(2)
    queries, positives, negatives = torch.randn(3, world * PER_PROCESS, DIMENSION, generator=generator)
    weight = torch.randn(4, DIMENSION, generator=generator, requires_grad=True)
    mine = slice(rank * PER_PROCESS, (rank + 1) * PER_PROCESS)
    loss = simcse_loss(queries[mine] @ weight.T, positives[mine] @ weight.T, 0.05, negatives[mine] @ weight.T)
    candidates = torch.stack([positives @ weight.T, negatives @ weight.T], dim=1).flatten(0, 1)  # (2WB, 4)
    whole = info_nce(F.normalize(queries @ weight.T, dim=-1), F.normalize(candidates, dim=-1), 0.05)  # not gathered
    compare("supervised simcse", loss, whole, weight, world)


def check_moco_queue(rank: int, world: int) -> None:
    keys = torch.randn(world * PER_PROCESS, DIMENSION, generator=torch.Generator().manual_seed(3))
    distributed, single = MoCoQueue(8, DIMENSION), MoCoQueue(8, DIMENSION)
    for _ in range(2):  # the second push wraps around
        distributed.push(gather_keys(keys[rank * PER_PROCESS:(rank + 1) * PER_PROCESS]))
        single.push(keys)
    torch.testing.assert_close(distributed.keys, single.keys)
    assert int(distributed.position) == int(single.position) == (2 * world * PER_PROCESS) % 8
    print(f"rank {rank} moco queue: gathered keys == single-process push", flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    check_span_pairs(rank, world)
    check_simcse(rank, world)
    check_moco_queue(rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
