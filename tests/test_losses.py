"""InfoNCE against a hand computation, its positive indexing, and cross-device gathering on 2 CPU processes."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import run_two_processes

from retromae.losses.losses import gather_with_grad, gathered_positive_index, info_nce


def hand_info_nce(queries: list[list[float]], passages: list[list[float]], temperature: float,
                  positives: list[int]) -> float:
    """-mean_i log(exp(s_i,pos / t) / sum_j exp(s_ij / t)) with plain Python arithmetic."""
    total = 0.0
    for query, positive in zip(queries, positives, strict=True):
        scores = [sum(a * b for a, b in zip(query, passage, strict=True)) / temperature for passage in passages]
        total -= scores[positive] - math.log(sum(math.exp(s) for s in scores))
    return total / len(queries)


def test_info_nce_matches_a_hand_computation():
    queries = [[1.0, 0.0], [0.6, 0.8], [0.0, -1.0]]
    passages = [[0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]]
    loss = info_nce(torch.tensor(queries), torch.tensor(passages), temperature=0.5)
    assert loss.item() == pytest.approx(hand_info_nce(queries, passages, 0.5, [0, 1, 2]), rel=1e-6)


def test_groups_put_each_positive_first_and_index_can_be_given():
    generator = torch.Generator().manual_seed(0)
    queries, passages = torch.randn(2, 3, generator=generator), torch.randn(6, 3, generator=generator)
    expected = hand_info_nce(queries.tolist(), passages.tolist(), 0.05, [0, 3])
    assert info_nce(queries, passages, 0.05).item() == pytest.approx(expected, rel=1e-5)
    given = info_nce(queries, passages, 0.05, positive_index=torch.tensor([5, 1]))
    assert given.item() == pytest.approx(hand_info_nce(queries.tolist(), passages.tolist(), 0.05, [5, 1]), rel=1e-5)


def test_info_nce_rejects_bad_arguments():
    with pytest.raises(ValueError, match="temperature"):
        info_nce(torch.ones(2, 3), torch.ones(2, 3), 0.0)
    with pytest.raises(ValueError, match="positive_index"):
        info_nce(torch.ones(2, 3), torch.ones(3, 3), 0.05)


def test_gathering_is_the_identity_in_one_process():
    tensor = torch.randn(3, 4, requires_grad=True)
    assert gather_with_grad(tensor) is tensor
    assert gathered_positive_index(3, 2, tensor.device).tolist() == [0, 2, 4]


def test_gathered_loss_and_gradient_equal_one_process_over_the_whole_batch():
    assert run_two_processes("dist_info_nce.py").count("== single-process") == 4
