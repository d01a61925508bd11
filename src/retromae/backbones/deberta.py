"""DeBERTa-v2/v3 (He et al., 2021, 2023): relative (disentangled) attention and, in v3, no absolute positions in the
input (`position_biased_input: false`), SentencePiece (`▁` marks a word start), one MLM head module (`cls`).

A decoder over its states gets no position table to share. The choice here (docs/guide.md, "Backbones"): rotary
positions in the decoder's attention, parameter-free (base 10,000 over the decoder's head size), so that the decoder
adds no weights to learn and reads any length the backbone does. A v2 checkpoint that does add absolute positions
(`position_biased_input: true`) shares its table, as BERT does. The non-legacy MLM head (`legacy: false`), which
takes the word embeddings as an argument, is refused."""

from __future__ import annotations

import torch
from torch import nn
from transformers import DebertaV2Config, PretrainedConfig, PreTrainedModel

from retromae.backbones.base import BackboneAdapter, DecoderPositions
from retromae.backbones.families import DEBERTA_POSITION_BUCKETS
from retromae.runtime.errors import ModelLoadError

ROTARY_BASE = 10_000.0


def rotary_table(length: int, head_dim: int, device: torch.device,
                 base: float = ROTARY_BASE) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (L, Dh), of the standard rotary embedding (Su et al., 2021) in the half-split layout."""
    inverse = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)  # (Dh/2,)
    angles = torch.arange(length, device=device, dtype=torch.float32)[:, None] * inverse  # (L, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (L, Dh)
    return angles.cos(), angles.sin()


class DebertaV2Adapter(BackboneAdapter):
    positions = "relative"
    boolean_padding_mask = False  # it builds its (B, 1, L, L) mask from the 2D one

    def mlm_head(self, model: PreTrainedModel) -> nn.Module:
        if not getattr(model.config, "legacy", True):
            raise ModelLoadError(f"{type(model).__name__}: the non-legacy DeBERTa MLM head (legacy: false) takes the "
                                 "word embeddings as an argument and is not supported; use legacy: true")
        return super().mlm_head(model)

    def decoder_positions(self, model: PreTrainedModel, length: int, device: torch.device) -> DecoderPositions:
        if getattr(model.config, "position_biased_input", True):
            return super().decoder_positions(model, length, device)
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        return DecoderPositions(rotary=rotary_table(length, head_dim, device))

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        """DeBERTa-v3's shape: relative attention over 256 log buckets, shared keys, no absolute positions."""
        return DebertaV2Config(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
            num_attention_heads=hidden_size // 64, intermediate_size=4 * hidden_size,
            max_position_embeddings=max_positions, relative_attention=True, position_buckets=DEBERTA_POSITION_BUCKETS,
            norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
            type_vocab_size=0, pad_token_id=special_ids["pad"])
