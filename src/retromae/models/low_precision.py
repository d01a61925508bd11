"""A model's weights in bf16 for encoding on the CPU, cast once and kept until the caller forgets them.

Owns `LowPrecisionWeights`: the forward pass of a model with every floating parameter and buffer cast to a lower
precision (`torch.func.functional_call` over the cast tensors; the model itself keeps its float32 weights, so
training, saving and the float32 path are untouched), its linear layers on oneDNN with their weights packed in that
precision and the feed-forward GELU fused (`retromae.models.onednn.PackedLinears`). Under autocast a CPU pays at
every layer for casting the activations and weights of each linear layer and for its layer norms in float32; with
the weights cast once the whole pass runs in bf16 (all-MiniLM-L6-v2 on an Intel Xeon with AMX: 1.13x the texts a
second of bf16 autocast, 1.46x with the layers packed and fused; its vectors within a cosine of 0.9999 of
float32's: docs/performance.md). The cast and packed tensors are made on the first use and kept until `forget()`
(`retromae.models.encoder.Encoder` forgets them after each `encode` call unless its weights never change); the copy
costs the model's size in memory again meanwhile. Does not own the choice of precision
(`retromae.models.encoder.resolve_dtype`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call

from retromae.models.onednn import PackedLinears


class LowPrecisionWeights:
    """`model`'s forward pass on its floating tensors cast to `dtype`, kept until `forget()`."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._model: int | None = None  # the id of the model cast
        self._tensors: dict[str, torch.Tensor] = {}
        self._linears = PackedLinears(dtype)

    def forget(self) -> None:
        """Free the cast and packed tensors: the next use casts the model's weights as they are then."""
        self._model, self._tensors = None, {}
        self._linears.forget()

    def tensors(self, model: nn.Module) -> Mapping[str, torch.Tensor]:
        """Every parameter and buffer of `model` by name that its packed linear layers do not hold already, the
        floating ones cast to `dtype` (on the first use; the packed layers' own weights are not cast twice)."""
        if self._model != id(model):
            self._tensors = {}  # the old copy is freed before the new one is made
            packed = self._linears.packed_tensors()
            named = [*model.named_parameters(), *model.named_buffers()]
            self._tensors = {name: tensor.detach().to(self.dtype) if tensor.is_floating_point() else tensor
                             for name, tensor in named if id(tensor) not in packed}
            self._model = id(model)
        return self._tensors

    def forward(self, model: nn.Module, **inputs: torch.Tensor) -> object:
        """`model(**inputs)` computed on the cast tensors, its linear layers on the packed ones (a tensor left out of
        the cast ones stays the model's own, which only a packed layer would read, and it reads its packed copy)."""
        with self._linears.applied(model):
            return functional_call(model, dict(self.tensors(model)), (), inputs, strict=False)
