"""oneDNN's prepacked linear layers: the same outputs as PyTorch's own, used only inside the context."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from retromae.models.onednn import PackedLinears, available, packed_linears

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


class FeedForward(nn.Module):
    """A transformer's up-projection as BERT writes it: `intermediate_act_fn(dense(x))`."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()
        self.dense = nn.Linear(16, 48)
        self.intermediate_act_fn = activation

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(inputs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_exact_gelu_is_fused_into_its_layer_and_another_activation_is_not(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(FeedForward(nn.GELU()), nn.Linear(48, 16), FeedForward(nn.ReLU()), nn.Linear(48, 16),
                          FeedForward(nn.GELU(approximate="tanh")))
    inputs = torch.randn(2, 5, 16)  # (B, L, D)
    packed = PackedLinears(dtype)
    with torch.inference_mode():
        expected = model(inputs)
        with packed.applied(model):
            assert "forward" in vars(model[0]) and "forward" not in vars(model[2]) and "forward" not in vars(model[4])
            got = model(inputs.to(dtype)).float()
    tolerance = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)
    assert all("forward" not in vars(module) for module in model.modules())


def test_packed_weights_are_kept_between_uses_until_forgotten():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8))
    inputs = torch.randn(3, 8)
    packed = PackedLinears()
    with torch.inference_mode():
        with packed.applied(model):
            first = model[0].forward
        with packed.applied(model):
            assert model[0].forward is first  # not packed again
        with torch.no_grad():
            model[0].weight.mul_(2)  # an optimizer step
        packed.forget()
        with packed.applied(model):
            assert model[0].forward is not first
            torch.testing.assert_close(model(inputs), inputs @ model[0].weight.T + model[0].bias)
