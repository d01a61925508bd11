"""Losses shared by pre-training and fine-tuning: InfoNCE with in-batch negatives, and cross-device gathering.

Owns: `info_nce` (contrastive cross-entropy over query-passage scores, with a temperature), `gather_with_grad`
(all_gather whose backward returns every process's gradient to the owner of each slice),
`gathered_positive_index` (where the local queries' positives sit in a gathered passage tensor) and
`cross_device_info_nce` (the three together: every process's passages are negatives of every query), and the two
distillation losses over each query's candidate list: `listwise_kl` (KL divergence from the teacher's distribution
to the student's, RocketQAv2/Tamber et al.'s listwise distillation) and `margin_mse` (the teacher's margins between
the first candidate and each other one, Hofstätter et al. 2020, GPL's loss).
Does not own similarity choices (callers normalise for cosine similarity) or models.

References: InfoNCE (van den Oord et al., 2018); in-batch negatives as in DPR (Karpukhin et al., 2020) and the
unified-learner paper's Eq. 8 (RetroMAE second stage, following SimCSE, Gao et al., 2021); cross-device
negatives as in coCondenser (Gao and Callan, 2021b) and RocketQA (Qu et al., 2021).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def info_nce(queries: torch.Tensor, passages: torch.Tensor, temperature: float,
             positive_index: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over queries of -log softmax(q_i · p_j / temperature)[positive of i], every other passage a negative.

    queries (B, D), passages (N, D): scores are plain dot products, so pass L2-normalised vectors for cosine
    similarity. `positive_index` (B,) long gives the column of each query's positive; by default passages are
    B groups of N // B (positive first, then its hard negatives), so query i's positive is passage
    i * (N // B). Scores are computed in float32. Returns a scalar.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    batch, count = queries.shape[0], passages.shape[0]
    if positive_index is None:
        if batch == 0 or count % batch:
            raise ValueError(f"{count} passages do not split into groups for {batch} queries; give positive_index")
        positive_index = torch.arange(batch, device=queries.device) * (count // batch)  # (B,)
    scores = queries.float() @ passages.float().T / temperature  # (B, N)
    return F.cross_entropy(scores, positive_index)


def listwise_kl(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over queries of KL(softmax(teacher) ‖ softmax(student)), each row a query's candidate list.

    student (B, L) and teacher (B, L) are logits (scores already divided by their temperatures); computed in float32;
    the teacher's side carries no gradient. Returns a scalar."""
    target = F.softmax(teacher.detach().float(), dim=-1)
    return F.kl_div(F.log_softmax(student.float(), dim=-1), target, reduction="batchmean")


def margin_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean squared difference between the student's and the teacher's margins s[:, 0] − s[:, j] (j ≥ 1), over every
    query and every other candidate: column 0 is each list's positive. student (B, L), teacher (B, L), in the same
    scale. Returns a scalar."""
    student_margins = student.float()[:, :1] - student.float()[:, 1:]  # (B, L - 1)
    teacher_margins = teacher.detach().float()[:, :1] - teacher.detach().float()[:, 1:]
    return F.mse_loss(student_margins, teacher_margins)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherWithGrad(torch.autograd.Function):
    """all_gather along dim 0; backward sums the gradient over processes and returns the local slice."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        ctx.start, ctx.size = dist.get_rank() * tensor.shape[0], tensor.shape[0]
        return torch.cat(parts)  # (W * n, ...)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.start:ctx.start + ctx.size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Every process's `tensor` (n, ...) concatenated in rank order, (W * n, ...); identity when not distributed.

    Unlike `torch.distributed.all_gather`, the result stays in the graph: each process's loss sends its gradient
    back to the process owning the slice. With a loss that is the mean over the local queries and DDP's averaging
    of parameter gradients, the update equals that of one process holding the whole global batch. Every process
    must pass the same shape (equal micro-batches) and run backward.
    """
    return _GatherWithGrad.apply(tensor) if _distributed() else tensor


def gathered_positive_index(num_queries: int, group_size: int, device: torch.device) -> torch.Tensor:
    """(B,) columns of the local queries' positives in passages gathered by `gather_with_grad`.

    Each process holds B queries and B * group_size passages (positive first in each group); after gathering,
    local query i's positive is passage (rank * B + i) * group_size.
    """
    rank = dist.get_rank() if _distributed() else 0
    return (rank * num_queries + torch.arange(num_queries, device=device)) * group_size


def cross_device_info_nce(queries: torch.Tensor, passages: torch.Tensor, temperature: float,
                          group_size: int = 1) -> torch.Tensor:
    """InfoNCE of the local queries (B, D) against the passages (B * group_size, D) of every process.

    Passages come in groups of `group_size` per query, positive first. One process: `info_nce` over the local
    batch. Several: the passages are gathered with `gather_with_grad`, so the mean of the processes' losses and
    their averaged gradients equal those of one process holding the global batch.
    """
    gathered = gather_with_grad(passages)  # (W * B * group_size, D)
    positives = gathered_positive_index(queries.shape[0], group_size, queries.device)  # (B,)
    return info_nce(queries, gathered, temperature, positives)


def distillation_kl(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """Mean over queries of KL(softmax(teacher / T) ‖ softmax(student / T)) over each query's candidates.

    student_scores, teacher_scores (B, G): the bi-encoder's logits (e.g. q · p / its InfoNCE temperature) and a
    cross-encoder teacher's, for the same G passages of each query. A teacher score of -inf marks a passage the
    teacher did not score: it gets probability 0 (it adds nothing to the divergence but still competes in the
    student's softmax). Knowledge distillation from a cross-encoder as in RocketQAv2 (Ren et al., 2021) and
    TAS-B / margin-MSE's successors; no T² factor (Hinton et al., 2015) is applied. Computed in float32; a scalar.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if student_scores.shape != teacher_scores.shape:
        raise ValueError(f"student scores {tuple(student_scores.shape)} and teacher scores "
                         f"{tuple(teacher_scores.shape)} differ in shape")
    student_log = F.log_softmax(student_scores.float() / temperature, dim=-1)  # (B, G)
    teacher_log = F.log_softmax(teacher_scores.float() / temperature, dim=-1)  # (B, G)
    teacher = teacher_log.exp()  # (B, G)
    scored = teacher > 0
    log_ratio = torch.where(scored, teacher_log, student_log) - student_log  # 0 where unscored, never -inf
    return (teacher * log_ratio).sum(dim=-1).mean()
