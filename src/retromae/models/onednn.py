"""Float32 linear layers on oneDNN with prepacked weights, on the CPU: a model's layers for inference, and the
vocabulary projections of the fused training loss (`retromae.losses.fused_loss` packs its own weights through
`available`).

Owns `packed_linears(model)`: a context in which every `nn.Linear` of a model runs through PyTorch's oneDNN linear
(`torch.ops.mkldnn._linear_pointwise`) on a copy of its weight reordered once into oneDNN's blocked layout, instead
of PyTorch's default float32 GEMM (MKL's sgemm). On the development machine's AMD EPYC (AVX-512) MKL runs its AVX2
kernels and oneDNN its AVX-512 ones: the MiniLM forward pass took 0.63-0.69 of the time in two runs, its outputs
equal to 3.3e-7 (docs/benchmarks.md, Encoding). This is the layout PyTorch's own compiler uses on CPU; here it needs no
compilation. `packed_linears` is inference only (no autograd), float32 on CPU only: anywhere else, or with a
PyTorch without these ops, the context changes nothing. Does not own models, pooling or precision choices
(`retromae.models.encoder`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import nn


def available() -> bool:
    """Whether this PyTorch has oneDNN and its prepacked linear ops."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._linear_pointwise and torch.ops.mkldnn._reorder_linear_weight)
    except (AttributeError, RuntimeError):
        return False


def _packed_forward(weight: torch.Tensor, bias: torch.Tensor | None, inputs: torch.Tensor) -> torch.Tensor:
    """`inputs @ W.T + b` from the prepacked `weight`: (..., in) → (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(inputs.contiguous(), weight, bias, "none", [], "")


@contextlib.contextmanager
def packed_linears(model: nn.Module) -> Iterator[None]:
    """Within the context, run `model`'s float32 CPU `nn.Linear` layers on oneDNN with prepacked weights.

    The weights are packed on entry, so a model trained between two uses is packed afresh; on exit every layer is
    back to its own forward. Layers on another device or in another dtype are left alone."""
    linears = [module for module in model.modules() if type(module) is nn.Linear
               and module.weight.device.type == "cpu" and module.weight.dtype == torch.float32] if available() else []
    for linear in linears:
        weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        bias = None if linear.bias is None else linear.bias.detach()
        linear.forward = functools.partial(_packed_forward, weight, bias)
    try:
        yield
    finally:
        for linear in linears:
            del linear.forward
