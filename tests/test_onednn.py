"""oneDNN's prepacked linear layers: the same outputs as PyTorch's own, used only inside the context."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from retromae.models.onednn import available, packed_linears

pytestmark = pytest.mark.skipif(not available(), reason="this PyTorch has no oneDNN prepacked linear ops")


def test_packed_linears_give_the_same_outputs_and_are_undone_on_exit():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16, bias=False))
    inputs = torch.randn(3, 7, 32)  # (B, L, D)
    with torch.inference_mode():
        expected = model(inputs)
        with packed_linears(model):
            assert all(isinstance(model[i].forward, functools.partial) for i in (0, 2))
            got = model(inputs)
            transposed = model(inputs.transpose(0, 1))  # a non-contiguous input
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(transposed, expected.transpose(0, 1), atol=1e-5, rtol=1e-5)
    assert "forward" not in vars(model[0]) and "forward" not in vars(model[2])


def test_other_dtypes_are_left_alone():
    model = nn.Sequential(nn.Linear(8, 8).double(), nn.Linear(8, 8))
    with packed_linears(model):
        assert "forward" not in vars(model[0]) and "forward" in vars(model[1])
