"""RetroMAE (Xiao et al., 2022): full encoder, light decoder, asymmetric masking, basic or enhanced decoding.

Owns: the decoder (one layer for enhanced decoding; `decoder_layers` for basic decoding, the paper's Table 6
ablation), its two input streams and the decoder loss. The decoder shares the encoder's token/position
embeddings and its tied MLM head. Total loss = encoder MLM + decoder loss (Algorithm 1).

- Basic decoding (Eq. 2-3): input [h_cls, e(x_1)+p_1, ...] with `decoder_mask_ratio` of the tokens replaced by
  [MASK]; loss on those masked positions.
- Enhanced decoding (Eq. 4-7): query stream h_cls + p_i, context stream [h_cls, e(x_1)+p_1, ...] of the ORIGINAL
  tokens, a position-specific attention mask per row; loss over all non-special tokens.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from retromae import backbone
from retromae.masking import decoder_input_mask, enhanced_decoding_mask
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import DecoderLayer


class RetroMAE(PretrainingObjective):
    """Encoder MLM plus a decoder that reconstructs the input from the [CLS] embedding."""

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoding: str = "enhanced",
                 decoder_layers: int = 1):
        super().__init__(encoder, masking)
        if decoding not in ("enhanced", "basic"):
            raise ValueError(f"decoding must be 'enhanced' or 'basic', not {decoding!r}")
        if decoding == "enhanced" and decoder_layers != 1:
            raise ValueError("enhanced decoding uses exactly one decoder layer (RetroMAE, Section 4.4)")
        self.decoding = decoding
        self.decoder = nn.ModuleList(DecoderLayer(encoder.config) for _ in range(decoder_layers))

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, config) -> RetroMAE:
        return cls(encoder, masking, decoding=config.decoding, decoder_layers=config.decoder_layers)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        hidden, encoder_loss = self.encode_masked(batch, generator)
        cls_embedding = hidden[:, :1]  # (B, 1, D): the sentence embedding h_X
        decode = self._enhanced_decoding if self.decoding == "enhanced" else self._basic_decoding
        decoder_loss = decode(batch, cls_embedding, generator)
        return {"loss": encoder_loss + decoder_loss, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach()}

    def _context_stream(self, input_ids: torch.Tensor, cls_embedding: torch.Tensor) -> torch.Tensor:
        """[h_cls, e(x_1)+p_1, ..., e(x_N)+p_N], shape (B, L, D)."""
        embedded = backbone.token_embeddings(self.encoder, input_ids)  # (B, L, D)
        return torch.cat([cls_embedding, embedded[:, 1:]], dim=1)

    def _basic_decoding(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor,
                        generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        masked = decoder_input_mask(
            batch["special_tokens_mask"], ratio=self.masking.decoder_mask_ratio, generator=generator,
            word_starts=batch["word_starts"] if self.masking.whole_word_mask else None,
        )  # (B, L) bool
        corrupted = input_ids.masked_fill(masked, self.masking.mask_token_id)
        hidden = self._context_stream(corrupted, cls_embedding)
        visible = batch["attention_mask"].bool()[:, None, :]  # (B, 1, L)
        for layer in self.decoder:
            hidden = layer(hidden, hidden, visible)
        labels = input_ids.masked_fill(~masked, backbone.IGNORE_INDEX)
        return backbone.masked_lm_loss(self.lm_head, hidden, labels)

    def _enhanced_decoding(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor,
                           generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        length = input_ids.shape[1]
        positions = backbone.position_embeddings(self.encoder, length, input_ids.device)  # (L, D)
        query = cls_embedding + positions[None]  # (B, L, D)
        context = self._context_stream(input_ids, cls_embedding)  # (B, L, D)
        visible = enhanced_decoding_mask(
            batch["attention_mask"], ratio=self.masking.decoder_mask_ratio, generator=generator
        )  # (B, L, L)
        hidden = self.decoder[0](query, context, visible)
        labels = input_ids.masked_fill(batch["special_tokens_mask"], backbone.IGNORE_INDEX)
        return backbone.masked_lm_loss(self.lm_head, hidden, labels)
