"""RetroMAE + contrastive learning, the second stage of the unified-learner paper (Eq. 9 (2)).

Owns: the sum (encoder MLM + RetroMAE decoder) + InfoNCE over a pair batch. RetroMAE runs on both views (all 2B
rows); the contrastive loss uses the sentence embeddings h_X of that same masked encoder pass, one encoder pass
per view as in coCondenser (Gao and Callan, 2021b), so it costs RetroMAE plus a (2B, 2B) score matrix. The
decoder is RetroMAE's, under the same names, so a stage-1 `retromae` head loads into it unchanged.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from retromae.objectives.base import MaskingSettings
from retromae.objectives.contrastive import contrastive_loss
from retromae.objectives.retromae import RetroMAE


class RetroMAEContrastive(RetroMAE):
    """RetroMAE's losses on every view plus InfoNCE between the two views' [CLS] embeddings."""

    corpus_views = "spans"
    pairs_views = "pairs"
    default_temperature = 0.05

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoding: str = "enhanced",
                 decoder_layers: int = 1, temperature: float = 0.05):
        super().__init__(encoder, masking, decoding=decoding, decoder_layers=decoder_layers)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature = temperature

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, config) -> RetroMAEContrastive:
        layers = cls.default_decoder_layers if config.decoder_layers is None else config.decoder_layers
        return cls(encoder, masking, decoding=config.decoding, decoder_layers=layers,
                   temperature=cls.temperature_of(config))

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        embeddings, encoder_loss, decoder_loss = self.reconstruction_losses(batch, generator)  # (2B, D), ...
        contrastive = contrastive_loss(embeddings, self.temperature)
        return {"loss": encoder_loss + decoder_loss + contrastive, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach(), "contrastive": contrastive.detach()}
