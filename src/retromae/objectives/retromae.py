"""RetroMAE (Xiao et al., 2022): full encoder, light decoder, asymmetric masking, basic or enhanced decoding.

Owns: the decoder (one layer for enhanced decoding; `decoder_layers` for basic decoding, the paper's Table 6
ablation), its two input streams and the decoder loss. The decoder shares the encoder's token/position
embeddings and its tied MLM head. Total loss = encoder MLM + decoder loss (Algorithm 1).

- Basic decoding (Eq. 2-3): input [h_cls, e(x_1)+p_1, ...] with `decoder_mask_ratio` of the tokens replaced by
  [MASK]; loss on those masked positions.
- Enhanced decoding (Eq. 4-7): query stream h_cls + p_i, context stream [h_cls, e(x_1)+p_1, ...] of the ORIGINAL
  tokens, a position-specific attention mask per row; loss over all non-special tokens.

Positions come from the backbone's family (`retromae.backbones`): its absolute table where it has one; otherwise
(ModernBERT's rotary, DeBERTa-v3's relative positions) the query stream is h_cls alone and the decoder's attention
rotates queries and keys to their positions.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from retromae import backbone
from retromae.config import require
from retromae.masking import decoder_input_mask, enhanced_decoding_mask
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import DecoderLayer


class RetroMAE(PretrainingObjective):
    """Encoder MLM plus a decoder that reconstructs the input from the [CLS] embedding."""

    default_decoder_layers = 1

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
        layers = cls.default_decoder_layers if config.decoder_layers is None else config.decoder_layers
        return cls(encoder, masking, decoding=config.decoding, decoder_layers=layers)

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        require(config.decoding == "basic" or config.decoder_layers in (None, 1), "decoder_layers",
                "enhanced decoding uses exactly one layer; pass --decoding basic for deeper decoders")

    def compiled_modules(self) -> list[nn.Module]:
        return [*super().compiled_modules(), *self.decoder]

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        _, encoder_loss, decoder_loss = self.reconstruction_losses(batch, generator)
        return {"loss": encoder_loss + decoder_loss, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach()}

    def reconstruction_losses(self, batch: dict[str, torch.Tensor],
                              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sentence embeddings h_X (B, D) of the masked input, the encoder MLM loss and the decoder loss."""
        hidden, encoder_loss = self.encode_masked(batch, generator)
        cls_embedding = hidden[:, :1]  # (B, 1, D): the sentence embedding h_X
        return cls_embedding[:, 0], encoder_loss, self.decoder_loss(batch, cls_embedding, generator)

    def decoder_loss(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
        """The decoder's reconstruction loss of the batch from the sentence embeddings (B, 1, D)."""
        decode = self._enhanced_decoding if self.decoding == "enhanced" else self._basic_decoding
        return decode(batch, cls_embedding, generator)

    def _basic_decoding(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor,
                        generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        masked = decoder_input_mask(
            batch["special_tokens_mask"], ratio=self.masking.decoder_mask_ratio, generator=generator,
            word_starts=batch["word_starts"] if self.masking.whole_word_mask else None,
        )  # (B, L) bool
        corrupted = input_ids.masked_fill(masked, self.masking.mask_token_id)
        hidden = self.cls_and_token_stream(corrupted, cls_embedding)
        visible = batch["attention_mask"].bool()[:, None, :]  # (B, 1, L)
        rotary = self.decoder_positions(input_ids.shape[1], input_ids.device).rotary
        for layer in self.decoder:
            hidden = layer(hidden, hidden, visible, rotary)
        labels = input_ids.masked_fill(~masked, backbone.IGNORE_INDEX)
        capacity = backbone.label_capacity(labels.numel(), self.masking.decoder_mask_ratio)
        return backbone.masked_lm_loss(self.lm_head, hidden, labels, capacity)

    def _enhanced_decoding(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor,
                           generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        length = input_ids.shape[1]
        positions = self.decoder_positions(length, input_ids.device)
        if positions.absolute is not None:
            query = cls_embedding + positions.absolute[None]  # (B, L, D): h_cls + p_i
        else:
            query = cls_embedding.expand(-1, length, -1)  # (B, L, D): h_cls, rotated to position i in attention
        context = self.cls_and_token_stream(input_ids, cls_embedding)  # (B, L, D)
        visible = enhanced_decoding_mask(
            batch["attention_mask"], ratio=self.masking.decoder_mask_ratio, generator=generator
        )  # (B, L, L)
        hidden = self.decoder[0](query, context, visible, positions.rotary)
        labels = input_ids.masked_fill(batch["special_tokens_mask"], backbone.IGNORE_INDEX)
        return backbone.masked_lm_loss(self.lm_head, hidden, labels)  # every real token: projected everywhere
