"""Launched by tests/test_losses.py under `torch.distributed.run` with 2 CPU (gloo) processes.

Each process holds its share of a global batch of queries and their passage groups; `cross_device_info_nce`
gathers the passages across processes. The mean of the per-process losses and the average of the per-process
gradients (what DDP applies) must equal the loss and the gradient of one process holding the whole batch.
Checked with one passage per query and with groups of two (positive, hard negative). Exits non-zero on a mismatch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from retromae.losses.losses import cross_device_info_nce, info_nce

QUERIES_PER_PROCESS = 3
TEMPERATURE = 0.1


def check(group_size: int, rank: int, world: int) -> float:
    generator = torch.Generator().manual_seed(group_size)  # the same tensors on every process
    queries = torch.randn(world * QUERIES_PER_PROCESS, 6, generator=generator)  # (W * B, 6)
    passages = torch.randn(world * QUERIES_PER_PROCESS * group_size, 6, generator=generator)  # (W * B * G, 6)
    weight = torch.randn(4, 6, generator=generator, requires_grad=True)

    def embed(x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x @ weight.T, dim=-1)

    whole = info_nce(embed(queries), embed(passages), TEMPERATURE)
    (whole_grad,) = torch.autograd.grad(whole, weight)

    mine = slice(rank * QUERIES_PER_PROCESS, (rank + 1) * QUERIES_PER_PROCESS)
    my_passages = slice(mine.start * group_size, mine.stop * group_size)
    loss = cross_device_info_nce(embed(queries[mine]), embed(passages[my_passages]), TEMPERATURE, group_size)
    (grad,) = torch.autograd.grad(loss, weight)
    summed = torch.stack([loss.detach(), *grad.flatten()])
    dist.all_reduce(summed)
    torch.testing.assert_close(summed[0] / world, whole.detach())
    torch.testing.assert_close(summed[1:].view_as(grad) / world, whole_grad)
    assert not torch.allclose(loss.detach(), whole.detach()), "each process should see only its own queries"
    return whole.item()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for group_size in (1, 2):
        value = check(group_size, rank, world)
        print(f"rank {rank} group {group_size}: gathered loss == single-process {value:.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
