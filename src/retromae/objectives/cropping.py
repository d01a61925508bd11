"""Cropping contrastive learning in the encoder's own similarity: InfoNCE between two random crops of a document.

Owns the `cropping` objective: Contriever's views (two independent crops of one block, token deletion p = 0.1: the
data side is `retromae.data.contrastive.CropPairDataset`) and in-batch negatives (with cross-device ones) as in
coCondenser and COCO-DR's continued contrastive pre-training, scored by the cosine similarity of the sentence
vectors pooled as the encoder is used (`--pooling` of `retromae adapt`: mean for all-MiniLM-L6-v2; [CLS] from
`retromae pretrain`), temperature 0.05. It differs from `contriever`, whose reference settings (an unnormalised dot
product, a momentum encoder and queue) are for BERT from its MLM checkpoint, and from `contrastive`, which trains the
[CLS] state of two spans. No head: the MLM head is kept but not trained. Does not own the loss arithmetic
(`retromae.objectives.contrastive.contrastive_loss`).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.models.encoder import pool
from retromae.models.encoder_config import PoolingConfig
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.contrastive import contrastive_loss
from retromae.objectives.options import CroppingOptions


class Cropping(PretrainingObjective):
    """InfoNCE over cosine similarities of the pooled vectors of two crops per document."""

    title = "cropping contrastive"
    options = CroppingOptions
    masks = ()  # it crops and deletes tokens instead (`retromae.data.contrastive.CropPairDataset`)
    trains_mlm_head = False
    corpus_views = "crops"
    min_document_tokens = 10  # a crop of 10% keeps at least one token

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, temperature: float = 0.05,
                 pooling: str = "cls", normalize: bool = False):
        super().__init__(encoder, masking)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature, self.pooling = temperature, pooling
        self.normalize = normalize  # the similarity the encoder is used with, for its export; the loss is cosine

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: CroppingOptions) -> Cropping:
        return cls(encoder, masking, temperature=options.temperature, pooling=options.pooling,
                   normalize=options.normalize)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        hidden = backbone.hidden_states(self.encoder, batch["input_ids"], batch["attention_mask"])  # (2B, L, D)
        vectors = pool(hidden, batch["attention_mask"], PoolingConfig(self.pooling, False))  # normalised in the loss
        loss = contrastive_loss(vectors, self.temperature)
        return {"loss": loss, "contrastive": loss.detach()}
