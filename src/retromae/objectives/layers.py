"""Transformer layers for the pre-training decoders (RetroMAE's and SEED-Encoder's; TSDAE's uses its pieces).

Owns: a post-LayerNorm transformer layer whose queries and keys/values may come from different streams
(two-stream attention) and whose attention pattern is a boolean mask, run through PyTorch SDPA, with rotary
positions applied to queries and keys when the backbone's positions are rotary (`apply_rotary`). A boolean mask,
not an additive -inf one, keeps bf16/fp16 free of NaN. Does not own masks, losses or where positions come from
(`retromae.backbones`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the heads x (B, H, L, Dh) by the angles of positions 0..L-1, cos and sin (L, Dh) in the half-split
    layout (dimension d pairs with d + Dh/2, as transformers' RoPE models lay them out); computed in float32."""
    first, second = x.float().chunk(2, dim=-1)  # (B, H, L, Dh/2) each
    rotated = torch.cat([-second, first], dim=-1)  # (B, H, L, Dh)
    return (x.float() * cos + rotated * sin).to(x.dtype)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, D) → (B, H, L, D/H): the attention heads of a projection."""
    batch, length, hidden = x.shape
    return x.view(batch, length, num_heads, hidden // num_heads).transpose(1, 2)


def init_linears(module: nn.Module, std: float) -> None:
    """BERT's initialisation of every `nn.Linear` under `module`: weights N(0, std), biases 0."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=std)
            nn.init.zeros_(layer.bias)


class DecoderLayer(nn.Module):
    """One BERT-shaped layer: attention(query, context) + residual + LayerNorm, then FFN + residual + LayerNorm."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=getattr(config, "layer_norm_eps", 1e-12))
        self.feed_forward = nn.Sequential(
            nn.Linear(hidden, config.intermediate_size), nn.GELU(), nn.Linear(config.intermediate_size, hidden)
        )
        self.output_norm = nn.LayerNorm(hidden, eps=getattr(config, "layer_norm_eps", 1e-12))
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.attention_dropout = getattr(config, "attention_probs_dropout_prob", 0.1)
        init_linears(self, getattr(config, "initializer_range", 0.02))

    def forward(self, query: torch.Tensor, context: torch.Tensor, visible: torch.Tensor,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None, query_start: int = 0) -> torch.Tensor:
        """query (B, Lq, D), context (B, Lk, D), visible (B, Lq, Lk) or (B, 1, Lk) bool → (B, Lq, D). With `rotary`
        (cos, sin), each (Lk, Dh), context column j is rotated to position j and query row i to position
        query_start + i (the query rows may be a block of a longer stream)."""
        q = split_heads(self.query(query), self.num_heads)  # (B, H, Lq, Dh)
        k = split_heads(self.key(context), self.num_heads)  # (B, H, Lk, Dh)
        v = split_heads(self.value(context), self.num_heads)
        if rotary is not None:
            cos, sin = rotary
            rows = slice(query_start, query_start + query.shape[1])
            q, k = apply_rotary(q, cos[rows], sin[rows]), apply_rotary(k, cos, sin)
        dropout = self.attention_dropout if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, None], dropout_p=dropout)
        attended = attended.transpose(1, 2).flatten(2)  # (B, Lq, D)
        hidden = self.attention_norm(query + self.dropout(self.attention_output(attended)))
        return self.output_norm(hidden + self.dropout(self.feed_forward(hidden)))
