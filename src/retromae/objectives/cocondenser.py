"""coCondenser (Gao and Callan, 2021b): Condenser plus a corpus-aware contrastive loss between spans of a document.

Owns: the span-pair loss (`span_pair_loss`) and the `cocondenser` objective. A batch holds two spans of each of
B documents (a `PairCollator` batch: rows 0..B-1 the first spans, B..2B-1 the second); Condenser's losses run
on all 2B masked spans, and the last layer's [CLS] vector of each span (of that same masked pass) must pick out
its document's other span among every span of the global batch, itself excluded. Total loss = head MLM + late MLM
+ span loss.

Facts from the reference code (luyug/Condenser `modeling.py`, `CoCondenserForPretraining`): raw dot products with
no temperature (`--temperature` defaults to 1.0), every other span of every device a negative (the first spans
of other documents too, not only the second spans), the pool gathered across devices. Its global in-batch pool
is why the reference needs gradient accumulation 1 or GradCache; pre-training here has no GradCache, so
`--gradient-accumulation-steps` above 1 is refused rather than silently shrinking the pool (raise
--batch-size, or add processes).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import PreTrainedModel

from retromae.losses.losses import gather_with_grad
from retromae.objectives.base import MaskingSettings
from retromae.objectives.condenser import Condenser
from retromae.objectives.options import CoCondenserOptions
from retromae.runtime.options import require


def span_pair_loss(embeddings: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over the local spans of −log softmax over every other span of every process, at the partner span.

    `embeddings` (2B, D): the first spans of B documents, then their second spans in the same order. Spans are
    gathered across processes with gradients kept; a span's own score is excluded. Scores are dot products over
    `temperature`, in float32.
    """
    rows = embeddings.shape[0]
    if rows % 2:
        raise ValueError(f"a span-pair batch has an even number of rows (first spans, then second), got {rows}")
    gathered = gather_with_grad(embeddings.float())  # (W * 2B, D)
    offset = dist.get_rank() * rows if gathered.shape[0] > rows else 0
    local = torch.arange(rows, device=embeddings.device)  # (2B,)
    partner = offset + (local + rows // 2) % rows  # (2B,): the other span of the same document
    scores = (embeddings.float() @ gathered.T).float() / temperature  # (2B, W * 2B); float32 under autocast too
    own = F.one_hot(offset + local, gathered.shape[0]).bool()  # (2B, W * 2B): a span is not its own candidate
    scores = scores.masked_fill(own, torch.finfo(scores.dtype).min)
    return F.cross_entropy(scores, partner)


class CoCondenser(Condenser):
    """Condenser's head and late MLM on both spans, plus the span-pair contrastive loss on their [CLS] vectors."""

    title = "coCondenser"
    options = CoCondenserOptions
    corpus_views = "spans"
    min_document_tokens = 8  # two spans of 25-50% of the tokens: at least 2 tokens each

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, head_layers: int = 2,
                 skip_from: int | None = None, temperature: float = 1.0):
        super().__init__(encoder, masking, head_layers=head_layers, skip_from=skip_from)
        self.temperature = temperature

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings,
                    options: CoCondenserOptions) -> CoCondenser:
        return cls(encoder, masking, head_layers=options.decoder_layers, skip_from=options.skip_from,
                   temperature=options.temperature)

    @classmethod
    def check_config(cls, options: CoCondenserOptions, config) -> None:
        super().check_config(options, config)
        require(config.gradient_accumulation_steps == 1, "gradient_accumulation_steps",
                "coCondenser's negatives are every span of the global batch; accumulating micro-batches would "
                "shrink that pool without saying so (pre-training has no GradCache): raise --batch-size or add "
                "processes instead")

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        embeddings, losses = self.condenser_losses(batch, generator)  # (2B, D)
        span_loss = span_pair_loss(embeddings, self.temperature)
        return {**losses, "loss": losses["loss"] + span_loss, "span_contrastive": span_loss.detach()}
