"""Contrastive pre-training: InfoNCE between two views of each example, with in-batch (and cross-device) negatives.

Owns: the contrastive loss over a pair batch (rows 0..B-1 the first views, B..2B-1 their positives, see
`retromae.data.contrastive.PairCollator`) and the `contrastive` objective, whose loss is that alone. The views
are two spans of one document (coCondenser, Gao and Callan 2021b) or given pairs such as NLI entailments
(the unified-learner paper, Sec. 2.2, Eq. 8). Sentence embedding = final [CLS] state of the clean (unmasked)
input; similarity = cosine over a temperature, as in SimCSE (Gao et al., 2021), whose supervised recipe the
unified-learner paper follows (Sec. 3.3), hence the default temperature 0.05 (the paper gives no value).
Does not own the loss arithmetic (`retromae.losses.losses`) or the data.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from retromae.losses.losses import cross_device_info_nce
from retromae.models import masked_lm as backbone
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.options import TemperatureOptions


def contrastive_loss(embeddings: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE of the first views (B, D) against the second views of every process, cosine similarity.

    `embeddings` (2B, D) holds the first views then the second views. View i's positive is view B + i; every
    other second view of the global batch (gathered across processes, gradients kept) is a negative (Eq. 8).
    """
    if embeddings.shape[0] % 2:
        raise ValueError(f"a pair batch has an even number of rows (first views, then second), "
                         f"got {embeddings.shape[0]}")
    queries, passages = F.normalize(embeddings.float(), dim=-1).chunk(2)  # (B, D) each
    return cross_device_info_nce(queries, passages, temperature)


class Contrastive(PretrainingObjective):
    """InfoNCE alone on the [CLS] embeddings of both views; the MLM head is kept (and saved) but not trained."""

    title = "contrastive spans"
    options = TemperatureOptions
    masks = ()
    trains_mlm_head = False
    corpus_views = "spans"
    pairs_views = "pairs"

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, temperature: float = 0.05):
        super().__init__(encoder, masking)
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.temperature = temperature

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings,
                    options: TemperatureOptions) -> Contrastive:
        return cls(encoder, masking, temperature=options.temperature)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        hidden = backbone.hidden_states(self.encoder, batch["input_ids"], batch["attention_mask"])  # (2B, L, D)
        loss = contrastive_loss(hidden[:, 0], self.temperature)
        return {"loss": loss, "contrastive": loss.detach()}
