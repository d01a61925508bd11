"""A model's weights in bf16 for encoding on the CPU, cast once and kept until a weight changes.

Owns `LowPrecisionWeights`: the forward pass of a model with every floating parameter and buffer cast to a lower
precision (`torch.func.functional_call` over the cast tensors; the model itself keeps its float32 weights, so
training, saving and the float32 path are untouched), its linear layers on oneDNN with their weights packed in that
precision and the feed-forward GELU fused (`retromae.models.onednn.PackedLinears`). Under autocast a CPU pays at
every layer for casting the activations and weights of each linear layer and for its layer norms in float32; with
the weights cast once the whole pass runs in bf16 (all-MiniLM-L6-v2 on an Intel Xeon with AMX: 1.13x the texts a
second of bf16 autocast, 1.46x with the layers packed and fused; its vectors within a cosine of 0.9999 of
float32's: docs/performance.md). The cast and packed tensors are made again when a weight is replaced or changed in
place (an optimizer step, averaging, loading: `onednn.weights_key`). The copy costs the model's size in memory
again. Does not own the choice of precision (`retromae.models.encoder.resolve_dtype`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call

from retromae.models.onednn import PackedLinears, weights_key


class LowPrecisionWeights:
    """`model`'s forward pass on its floating tensors cast to `dtype`, cached until a weight changes."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._key: tuple[tuple[int, int], ...] | None = None
        self._tensors: dict[str, torch.Tensor] = {}
        self._linears = PackedLinears(dtype)

    def tensors(self, model: nn.Module) -> Mapping[str, torch.Tensor]:
        """Every parameter and buffer of `model` by name, the floating ones cast to `dtype` (cast again when a
        weight changed since the last call)."""
        key = weights_key(model)
        if key != self._key:
            self._tensors = {}  # the old copy is freed before the new one is made
            named = [*model.named_parameters(), *model.named_buffers()]
            self._tensors = {name: tensor.detach().to(self.dtype) if tensor.is_floating_point() else tensor
                             for name, tensor in named}
            self._key = key
        return self._tensors

    def forward(self, model: nn.Module, **inputs: torch.Tensor) -> object:
        """`model(**inputs)` computed on the cast tensors, its linear layers on the packed ones."""
        tensors = dict(self.tensors(model))
        with self._linears.applied(model):
            return functional_call(model, tensors, (), inputs)
