"""ModernBERT (Warner et al., 2024): rotary positions and no position table, alternating local (sliding-window) and
global attention, inputs up to 8,192 tokens, byte-level BPE (`Ġ` marks a word start), and an MLM head of two
modules (`head`, then the tied `decoder` projection). A decoder over its states gets positions the way its global
layers do: the backbone's own rotary embedding of the global layers, applied to queries and keys."""

from __future__ import annotations

import torch
from torch import nn
from transformers import ModernBertConfig, PretrainedConfig, PreTrainedModel

from retromae.backbones.base import BackboneAdapter, DecoderPositions

GLOBAL_LAYERS = "full_attention"  # the rotary parameters of ModernBERT's global-attention layers


class ModernBertAdapter(BackboneAdapter):
    positions = "rotary"
    boolean_padding_mask = False  # it builds its sliding windows from the 2D mask; a 4D one would make them global

    def mlm_head(self, model: PreTrainedModel) -> nn.Module:
        return nn.Sequential(*self.head_modules(model))

    def vocabulary_projection(self, model: PreTrainedModel) -> tuple[nn.Module, nn.Linear]:
        return model.head, model.get_output_embeddings()

    def head_modules(self, model: PreTrainedModel) -> list[nn.Module]:
        return [model.head, model.get_output_embeddings()]

    def decoder_positions(self, model: PreTrainedModel, length: int, device: torch.device) -> DecoderPositions:
        positions = torch.arange(length, device=device)[None]  # (1, L)
        probe = torch.zeros((), device=device)  # rotary_emb reads only its device and dtype (float32)
        cos, sin = model.base_model.rotary_emb(probe, positions, GLOBAL_LAYERS)  # (1, L, Dh) each
        return DecoderPositions(rotary=(cos[0], sin[0]))

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        return ModernBertConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
            num_attention_heads=hidden_size // 64, intermediate_size=3 * hidden_size // 2,  # GLU, as ModernBERT's
            max_position_embeddings=max_positions, pad_token_id=special_ids["pad"], cls_token_id=special_ids["cls"],
            sep_token_id=special_ids["sep"], bos_token_id=special_ids["cls"], eos_token_id=special_ids["sep"])
