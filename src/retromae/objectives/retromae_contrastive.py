"""RetroMAE + contrastive learning, the second stage of the unified-learner paper (Eq. 9 (2)).

Owns: the sum (encoder MLM + RetroMAE decoder) + w × InfoNCE over a pair batch (w = `--contrastive-weight`, 1 in
the paper; 0 trains RetroMAE alone on the same pair batches and still logs the contrastive loss). RetroMAE runs on
both views (all 2B rows); the contrastive loss uses the sentence embeddings h_X of that same masked encoder pass,
one encoder pass per view as in coCondenser (Gao and Callan, 2021b), so it costs RetroMAE plus a (2B, 2B) score
matrix. The decoder is RetroMAE's, under the same names, so a stage-1 `retromae` head loads into it unchanged.

The sentence vector is RetroMAE's bottleneck (`RetroMAE.bottleneck`): the [CLS] state from `retromae pretrain`, the
base's pooled vector from `retromae adapt` (the masked mean for all-MiniLM-L6-v2), the same vector in both terms.
The InfoNCE score is always the cosine of the two views' vectors over the temperature (0.05), the similarity of a
normalised base (for a base compared by dot product too, as `cropping` does: raw dot products of unnormalised vectors
at that temperature would saturate the softmax). The views, from a corpus: two spans of one document
(`retromae.data.contrastive.SpanPairDataset`, the paper's in-domain pairs); a title travels inside its document's
text (`retromae.data.corpus`), so no title → text pairs are made.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from retromae.models.encoder_config import PoolingConfig
from retromae.models.model_source import is_random_init
from retromae.objectives.base import MaskingSettings
from retromae.objectives.contrastive import contrastive_loss
from retromae.objectives.options import RetroMAEContrastiveOptions
from retromae.objectives.retromae import RetroMAE
from retromae.runtime.options import require

FROM_SCRATCH = ("retromae+contrastive from random weights stays on the unigram plateau with the paper's weight 1 "
                "(docs/guide.md, 'RetroMAE + contrastive'): pre-train with --objective retromae first and continue "
                "with --init-from (the paper's two stages), or give the weight explicitly")


class RetroMAEContrastive(RetroMAE):
    """RetroMAE's losses on every view plus InfoNCE between the two views' sentence embeddings ([CLS] or pooled)."""

    title = "RetroMAE + contrastive"
    options = RetroMAEContrastiveOptions
    corpus_views = "spans"
    pairs_views = "pairs"

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoding: str = "enhanced",
                 decoder_layers: int = 1, temperature: float = 0.05, contrastive_weight: float = 1.0,
                 decoder_mask_ratio: float = 0.5, pooling: PoolingConfig | None = None):
        super().__init__(encoder, masking, decoding=decoding, decoder_layers=decoder_layers,
                         decoder_mask_ratio=decoder_mask_ratio, pooling=pooling)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if contrastive_weight < 0:
            raise ValueError(f"contrastive_weight must not be negative, got {contrastive_weight}")
        self.temperature, self.contrastive_weight = temperature, contrastive_weight

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings,
                    options: RetroMAEContrastiveOptions) -> RetroMAEContrastive:
        return cls(encoder, masking, decoding=options.decoding, decoder_layers=options.decoder_layers,
                   temperature=options.temperature, contrastive_weight=options.weight,
                   decoder_mask_ratio=options.decoder_mask_ratio,
                   pooling=PoolingConfig(options.pooling, options.normalize))

    @classmethod
    def check_config(cls, options: RetroMAEContrastiveOptions, config) -> None:
        super().check_config(options, config)
        from_scratch = config.from_config or (config.model is not None and is_random_init(config.model))
        require(options.contrastive_weight is not None or not from_scratch, "contrastive_weight", FROM_SCRATCH)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        embeddings, encoder_loss, decoder_loss = self.reconstruction_losses(batch, generator)  # (2B, D), ...
        contrastive = contrastive_loss(embeddings, self.temperature)
        loss = encoder_loss + decoder_loss + self.contrastive_weight * contrastive
        return {"loss": loss, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach(), "contrastive": contrastive.detach()}
