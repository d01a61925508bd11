"""Gradient caching (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup"): embeddings of a large batch at the memory cost of one chunk, with exact gradients.

Owns `cached_embed(embed, module, input_ids, attention_mask, chunk_size)`. Its forward encodes the batch chunk
by chunk without keeping activations and returns the embeddings (B, D), which stay in the graph; the loss over
the whole batch (every in-batch negative) is then built from them as usual. In the backward pass each chunk is
encoded again, this time with gradients, under the random state (dropout) and autocast of its first encoding,
and the cached embedding gradient (chunk, D) is pushed through it. The module's parameters are inputs of the
autograd function and receive their gradient from it once, summed over chunks, so a single `backward(loss)`
(and DDP's gradient hooks) work unchanged: the same design as re-entrant activation checkpointing.
Does not own the loss or the encoder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

Embed = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class _RandomState:
    """The CPU and (on CUDA) device generator states before a chunk's first encoding."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """Run under the saved state without disturbing the generators' current state."""
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


def _autocast_state(device: torch.device) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type)


class _CachedEmbed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, embed: Embed, chunk_size: int, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                *parameters: torch.Tensor) -> torch.Tensor:
        ctx.embed, ctx.chunk_size = embed, chunk_size
        ctx.autocast = _autocast_state(input_ids.device)
        ctx.states = []
        ctx.save_for_backward(input_ids, attention_mask)
        chunks = []
        for start in range(0, input_ids.shape[0], chunk_size):
            ctx.states.append(_RandomState(input_ids.device))
            chunks.append(embed(input_ids[start:start + chunk_size], attention_mask[start:start + chunk_size]))
        ctx.parameters = parameters
        return torch.cat(chunks)  # (B, D)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input_ids, attention_mask = ctx.saved_tensors
        enabled, dtype = ctx.autocast
        totals: list[torch.Tensor | None] = [None] * len(ctx.parameters)
        for chunk, state in enumerate(ctx.states):
            rows = slice(chunk * ctx.chunk_size, (chunk + 1) * ctx.chunk_size)
            with torch.enable_grad(), state.restored(), torch.autocast(input_ids.device.type, dtype, enabled):
                embeddings = ctx.embed(input_ids[rows], attention_mask[rows])  # (chunk, D)
            grads = torch.autograd.grad(embeddings, ctx.parameters, grad[rows], allow_unused=True)
            totals = [g if t is None else (t if g is None else t + g) for t, g in zip(totals, grads, strict=True)]
        totals = [torch.zeros_like(p) if t is None else t for p, t in zip(ctx.parameters, totals, strict=True)]
        return (None, None, None, None, *totals)


def cached_embed(embed: Embed, module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 chunk_size: int) -> torch.Tensor:
    """Embeddings (B, D) of (B, L) inputs through `embed` (which runs `module`), encoded `chunk_size` rows at a
    time; gradients reach `module`'s trainable parameters exactly as if the batch had been encoded at once
    (with dropout off, or with one chunk)."""
    parameters = [parameter for parameter in module.parameters() if parameter.requires_grad]
    if not torch.is_grad_enabled() or not parameters:
        return embed(input_ids, attention_mask)
    return _CachedEmbed.apply(embed, chunk_size, input_ids, attention_mask, *parameters)
