"""SimCSE (Gao, Yao and Chen, 2021): contrastive learning of [CLS] embeddings, unsupervised or with NLI triples.

Owns: the SimCSE training head (an MLP, dense + tanh, over [CLS], named `simcse_mlp`) and the `simcse` objective.
- Unsupervised (--corpus): each block is encoded twice in one pass of 2B rows; dropout is the only augmentation,
  so the two views differ only by their dropout masks. InfoNCE of the first views against the second views.
- Supervised (--pairs with hard negatives, e.g. NLI premise → entailment, contradiction): a batch of 3B rows
  (queries, positives, hard negatives); each query's candidates are every positive and every hard negative of
  the global batch.
Cosine similarity over temperature 0.05; cross-device gathering of the candidates (`retromae.losses.losses`).

Facts from the reference code (princeton-nlp/SimCSE `simcse/models.py`, its run scripts): [CLS] with the MLP
pooler; the unsupervised recipe uses the MLP in training only (`--mlp_only_train`), the supervised one also at
test time. Here the MLP is a training head in both cases, saved with the pre-training head and dropped at
export, which uses plain [CLS] pooling; the auxiliary MLM loss (`--do_mlm`) is off, as in the reference
defaults. The reference trains on sentences of at most 32 tokens; here a corpus example is a block of
--max-length tokens (pass a small --max-length for sentence-level training).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from retromae.losses.losses import cross_device_info_nce
from retromae.models import masked_lm as backbone
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.options import SimCSEOptions


def simcse_loss(queries: torch.Tensor, positives: torch.Tensor, temperature: float,
                negatives: torch.Tensor | None = None) -> torch.Tensor:
    """InfoNCE over cosine similarities: queries (B, D) against every positive (B, D) and hard negative (B, D) of
    every process; query i's positive is positive i."""
    candidates = positives if negatives is None else torch.stack([positives, negatives], dim=1).flatten(0, 1)
    queries, candidates = F.normalize(queries.float(), dim=-1), F.normalize(candidates.float(), dim=-1)
    return cross_device_info_nce(queries, candidates, temperature, group_size=1 if negatives is None else 2)


class SimCSE(PretrainingObjective):
    """Unsupervised (dropout views of a block) or supervised (query, positive, hard negative) SimCSE."""

    title = "SimCSE"
    options = SimCSEOptions
    masks = ()
    head = ("simcse_mlp",)
    trains_mlm_head = False
    pairs_views = "triples"

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, temperature: float = 0.05,
                 supervised: bool = False):
        super().__init__(encoder, masking)
        self.temperature, self.supervised = temperature, supervised
        hidden = encoder.config.hidden_size
        self.simcse_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        nn.init.normal_(self.simcse_mlp[0].weight, std=getattr(encoder.config, "initializer_range", 0.02))
        nn.init.zeros_(self.simcse_mlp[0].bias)  # initialised as the backbone's own linear layers, as the reference

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: SimCSEOptions) -> SimCSE:
        return cls(encoder, masking, temperature=options.temperature, supervised=options.supervised)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        if not self.supervised:  # the same block twice: two dropout masks
            input_ids, attention_mask = input_ids.repeat(2, 1), attention_mask.repeat(2, 1)  # (2B, L)
        hidden = backbone.hidden_states(self.encoder, input_ids, attention_mask)  # (2B or 3B, L, D)
        embeddings = self.simcse_mlp(hidden[:, 0])  # (2B or 3B, D)
        count = 3 if self.supervised else 2
        if embeddings.shape[0] % count:
            raise ValueError(f"a supervised SimCSE batch holds queries, positives and hard negatives (3B rows), got "
                             f"{embeddings.shape[0]} rows")
        views = embeddings.chunk(count)
        loss = simcse_loss(views[0], views[1], self.temperature, views[2] if self.supervised else None)
        return {"loss": loss, "contrastive": loss.detach()}
