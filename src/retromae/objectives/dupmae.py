"""DupMAE (Xiao et al., 2023, "RetroMAE-2"): RetroMAE plus a bag-of-words objective on the encoder's token logits.

Owns: the bag-of-words target (`bag_of_words_weights`), the pooled MLM logits (`max_pooled_logits`, or fused with
the projection: `pooled_logits`) and their loss (`bag_of_words_loss`). The decoder is RetroMAE's (enhanced
decoding by default, the reference's choice), under RetroMAE's names, so a `retromae` head loads into it. Total
loss = encoder MLM + decoder loss + `bow_weight` (0.1) × bag-of-words loss.

Facts from the reference code (staoxiao/RetroMAE `src/pretrain/modeling_duplex.py` and its collator), followed
where the paper reads differently (docs/guide.md, "Objectives"):
- The bag-of-words representation max-pools the encoder's own MLM-head logits over every non-[CLS], non-padding
  position of the MASKED encoder input ([SEP] included), a full vocabulary projection at every position.
- The target gives weight 1/n to each distinct token of the n content tokens of the original input (the collator
  assigns rather than adds, so a repeated token still weighs 1/n and the weights sum to distinct/n, not 1).
- The loss is −Σ_v w_v · log_softmax(μ)_v, averaged over the batch.
- The paper's retrieval representation joins the [CLS] vector with the top-k bag-of-words weights; the
  reference bi-encoder, and our export, use the [CLS] vector alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.models.encoder_config import PoolingConfig
from retromae.objectives.base import MaskingSettings
from retromae.objectives.options import DupMAEOptions
from retromae.objectives.retromae import RetroMAE


def bag_of_words_weights(input_ids: torch.Tensor, special_tokens_mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, V) float32: 1/n at each distinct content token of a row of n content tokens, 0 elsewhere."""
    content = ~special_tokens_mask.bool()  # (B, L): no special tokens, no padding
    counts = content.sum(dim=1, keepdim=True).clamp(min=1).float()  # (B, 1)
    present = torch.zeros(input_ids.shape[0], vocab_size, device=input_ids.device)  # (B, V)
    present.scatter_(1, input_ids.masked_fill(~content, 0), content.float())  # assigns: a repeat stays 1
    return present / counts


def max_pooled_logits(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the maximum over positions 1.. (no [CLS], no padding) of the logits (B, L, V) → (B, V), float32."""
    visible = attention_mask[:, 1:].bool()[..., None]  # (B, L-1, 1)
    scores = logits[:, 1:].float().masked_fill(~visible, torch.finfo(torch.float32).min)
    return scores.max(dim=1).values


def bag_of_words_loss(pooled: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over rows of −Σ_v w_v · log_softmax(pooled)_v; pooled and weights (B, V)."""
    return -(weights * F.log_softmax(pooled.float(), dim=-1)).sum(dim=-1).mean()


class DupMAE(RetroMAE):
    """RetroMAE's encoder MLM and decoder, plus the bag-of-words loss on the masked encoder pass's MLM logits."""

    title = "DupMAE"
    options = DupMAEOptions

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoding: str = "enhanced",
                 decoder_layers: int = 1, decoder_mask_ratio: float = 0.5, bow_weight: float = 0.1,
                 pooling: PoolingConfig | None = None):
        super().__init__(encoder, masking, decoding=decoding, decoder_layers=decoder_layers,
                         decoder_mask_ratio=decoder_mask_ratio, pooling=pooling)
        self.bow_weight = bow_weight

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: DupMAEOptions) -> DupMAE:
        return cls(encoder, masking, decoding=options.decoding, decoder_layers=options.decoder_layers,
                   decoder_mask_ratio=options.decoder_mask_ratio, bow_weight=options.bow_weight,
                   pooling=PoolingConfig(options.pooling, options.normalize))

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        corrupted, labels = self.mask_encoder_input(batch, generator)
        hidden = backbone.hidden_states(self.encoder, corrupted, batch["attention_mask"])  # (B, L, D)
        encoder_loss = self.masked_token_loss(hidden, labels)
        decoder_loss = self.decoder_loss(batch, self.bottleneck(hidden, batch["attention_mask"])[1], generator)
        pooled = self.pooled_logits(hidden, batch["attention_mask"])  # (B, V)
        weights = bag_of_words_weights(batch["input_ids"], batch["special_tokens_mask"], pooled.shape[-1])
        bow_loss = bag_of_words_loss(pooled, weights)
        return {"loss": encoder_loss + decoder_loss + self.bow_weight * bow_loss,
                "encoder_mlm": encoder_loss.detach(), "decoder": decoder_loss.detach(),
                "bag_of_words": bow_loss.detach()}

    def pooled_logits(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """`max_pooled_logits` of the MLM head's logits of the encoder states (B, L, D), (B, V) float32; fused, a
        chunk of positions at a time with a running maximum (`retromae.losses.fused_loss.linear_max_pool`)."""
        if self.vocabulary.fused:
            return self.vocabulary.max_pool(hidden[:, 1:], attention_mask[:, 1:])
        return max_pooled_logits(self.lm_head(hidden), attention_mask)
