"""SEED-Encoder (Lu et al., 2021): encoder MLM plus a weak autoregressive decoder conditioned on [CLS].

Owns: the weak decoder (`decoder_layers` transformer layers, 3 in the paper) whose attention is restricted to the
previous `attention_window` tokens (k = 2 in the paper) plus the encoder's [CLS] embedding, its input stream and
its next-token loss. Total loss = encoder MLM + decoder LM (Eq. 10).

Choices where the paper leaves room (documented in docs/guide.md, "Objectives"):
- Input: position 0 is the encoder's final [CLS] state h_0 (the conditioning, visible to every row), position
  i >= 1 the ORIGINAL token i (embedding + position, uncorrupted), and row i predicts token i + 1: the first
  token from h_0 alone, token t from h_0 and tokens t-k .. t-1 (Eq. 9; `masking.seed_decoder_mask`). The window
  applies in every layer, as attention restrictions do; the decoder reconstructs the non-special tokens.
- Parameters: "all else the same with the encoder" (Sec. 4.1): the layers have the encoder's width, heads and
  FFN size, and the decoder reads the encoder's token/position embeddings and writes through its tied MLM head,
  as RetroMAE's decoder does; only the layers are its own. The encoder and decoder still meet per example only
  through h_0. The layers are named `weak_decoder`, so a RetroMAE head can never load into them.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import DecoderLayer
from retromae.objectives.masking import seed_decoder_mask
from retromae.objectives.options import SEEDOptions


def next_token_labels(input_ids: torch.Tensor, special_tokens_mask: torch.Tensor) -> torch.Tensor:
    """labels[:, i] = input_ids[:, i + 1] where that token is not special or padding, else -100; shape (B, L)."""
    labels = input_ids.new_full(input_ids.shape, backbone.IGNORE_INDEX)  # (B, L)
    labels[:, :-1] = input_ids[:, 1:].masked_fill(special_tokens_mask[:, 1:].bool(), backbone.IGNORE_INDEX)
    return labels


class SEEDEncoder(PretrainingObjective):
    """Encoder MLM plus a shallow decoder that sees [CLS] and only a few previous tokens."""

    title = "SEED-Encoder"
    options = SEEDOptions
    head = ("weak_decoder",)

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoder_layers: int = 3,
                 attention_window: int = 2):
        super().__init__(encoder, masking)
        if decoder_layers < 1 or attention_window < 1:
            raise ValueError("SEED needs at least one decoder layer and an attention window of at least 1")
        self.attention_window = attention_window
        self.weak_decoder = nn.ModuleList(DecoderLayer(encoder.config) for _ in range(decoder_layers))

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: SEEDOptions) -> SEEDEncoder:
        return cls(encoder, masking, decoder_layers=options.decoder_layers, attention_window=options.attention_window)

    def compiled_modules(self) -> list[nn.Module]:
        return [*super().compiled_modules(), *self.weak_decoder]

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        hidden, encoder_loss = self.encode_masked(batch, generator)
        decoded = self.decode(batch, hidden[:, :1])  # (B, L, D)
        labels = next_token_labels(batch["input_ids"], batch["special_tokens_mask"])
        decoder_loss = self.token_loss(decoded, labels)  # every next token: projected everywhere
        return {"loss": encoder_loss + decoder_loss, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach()}

    def decode(self, batch: dict[str, torch.Tensor], cls_embedding: torch.Tensor) -> torch.Tensor:
        """Decoder states (B, L, D) for [CLS] embedding (B, 1, D); row i predicts token i + 1."""
        hidden = self.cls_and_token_stream(batch["input_ids"], cls_embedding)  # (B, L, D)
        visible = seed_decoder_mask(batch["attention_mask"], self.attention_window)  # (B, L, L)
        rotary = self.decoder_positions(hidden.shape[1], hidden.device).rotary  # None where positions are absolute
        for layer in self.weak_decoder:
            hidden = layer(hidden, hidden, visible, rotary)
        return hidden
