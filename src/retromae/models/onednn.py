"""Linear layers on oneDNN with prepacked weights, on the CPU: a model's layers for inference, and the vocabulary
projections of the fused training loss (`retromae.losses.fused_loss` packs its own weights through `available`).

Owns `PackedLinears` (and the one-off `packed_linears(model)`): every float32 `nn.Linear` of a model run through
PyTorch's oneDNN linear (`torch.ops.mkldnn._linear_pointwise`) on a copy of its weight, in float32 or bf16, reordered
once into oneDNN's blocked layout, its bias added inside the product (PyTorch's `addmm` first copies the bias into
the output) and, in a feed-forward block, its GELU fused too, instead of PyTorch's default GEMM (MKL's sgemm in
float32). On the development machine's AMD EPYC (AVX-512) MKL runs its AVX2 kernels and oneDNN its AVX-512 ones:
the float32 MiniLM forward pass took 0.63-0.69 of the time in two runs, its outputs equal to 3.3e-7 (docs/benchmarks.md,
Encoding); in bf16 on an Intel Xeon with AMX, the bias and GELU fused took 0.77 of the plain bf16 pass's time
(docs/performance.md). This is what PyTorch's own compiler does on a CPU; here it needs no compilation. Inference
only (no autograd), on the CPU only: anywhere else, or with a PyTorch without these ops, nothing changes. Does not
own models, pooling, precision choices or when packed weights are dropped
(`retromae.models.encoder`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def available() -> bool:
    """Whether this PyTorch has oneDNN and its prepacked linear ops."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._linear_pointwise and torch.ops.mkldnn._reorder_linear_weight)
    except (AttributeError, RuntimeError):
        return False


def _packed_forward(weight: torch.Tensor, bias: torch.Tensor | None, activation: str, algorithm: str,
                    inputs: torch.Tensor) -> torch.Tensor:
    """`activation(inputs @ W.T + b)` from the prepacked `weight`, the activation fused: (..., in) → (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(inputs.contiguous(), weight, bias, activation, [], algorithm)


def _is_linear_then_gelu(module: nn.Module) -> bool:
    """Whether `module` is a transformer's feed-forward up-projection, `gelu(dense(x))` with the exact (erf) GELU: its
    children are `dense` and `intermediate_act_fn` (BERT, RoBERTa, ELECTRA and their kin), and its output on a
    random input is that of the exact GELU after the layer."""
    children = dict(module.named_children())
    if set(children) != {"dense", "intermediate_act_fn"} or type(children["dense"]) is not nn.Linear:
        return False
    dense = children["dense"]
    if dense.weight.dtype != torch.float32 or dense.weight.device.type != "cpu":
        return False
    inputs = torch.randn(2, dense.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        return torch.allclose(module(inputs), F.gelu(dense(inputs)), rtol=1e-5, atol=1e-6)


class PackedLinears:
    """A model's float32 CPU `nn.Linear` layers run on oneDNN with their weights cast to `dtype` (float32 or bf16)
    and prepacked, each feed-forward up-projection with its GELU fused (`_is_linear_then_gelu`). The packed weights
    are made on the first use and kept until `forget()`: a caller whose model may train between two uses forgets
    them after each (an optimizer step need not tell: a fused AdamW leaves the tensors' version counters as they
    were). Inference only (no autograd); without oneDNN it changes nothing."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        self.dtype = dtype
        self._model: int | None = None  # the id of the model packed
        self._forwards: list[tuple[nn.Module, nn.Linear, functools.partial]] = []  # module, layer packed, forward

    def forget(self) -> None:
        """Free the packed weights: the next use packs the model's weights as they are then."""
        self._model, self._forwards = None, []

    def packed_tensors(self) -> set[int]:
        """The ids of the weights and biases of the layers packed (those their packed forward reads instead)."""
        return {id(tensor) for _, linear, _ in self._forwards for tensor in (linear.weight, linear.bias)
                if tensor is not None}

    def _pack(self, model: nn.Module) -> list[tuple[nn.Module, nn.Linear, functools.partial]]:
        def packed(linear: nn.Linear, activation: str = "none", algorithm: str = "") -> functools.partial:
            weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach().to(self.dtype), None)
            bias = None if linear.bias is None else linear.bias.detach().to(self.dtype)
            return functools.partial(_packed_forward, weight, bias, activation, algorithm)

        if not available():
            return []
        fused = [(module, module.dense, packed(module.dense, "gelu", "none")) for module in model.modules()
                 if _is_linear_then_gelu(module)]
        inside = {id(linear) for _, linear, _ in fused}  # run by their fused module: not packed twice
        return fused + [(module, module, packed(module)) for module in model.modules() if type(module) is nn.Linear
                        and id(module) not in inside and module.weight.device.type == "cpu"
                        and module.weight.dtype == torch.float32]

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Within the context, `model`'s layers run on the packed weights; on exit each is back to its own forward."""
        if self._model != id(model):
            self.forget()  # the old weights are freed before the new ones are packed
            self._forwards = self._pack(model)
            self._model = id(model)
        for module, _, forward in self._forwards:
            module.forward = forward
        try:
            yield
        finally:
            for module, _, _ in self._forwards:
                del module.forward


@contextlib.contextmanager
def packed_linears(model: nn.Module) -> Iterator[None]:
    """Within the context, run `model`'s float32 CPU layers on oneDNN with weights packed on entry (`PackedLinears`
    keeps them between uses). Layers on another device or in another dtype are left alone."""
    with PackedLinears(torch.float32).applied(model):
        yield
