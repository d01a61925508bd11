"""The dual encoder being fine-tuned and its losses, in the shape the training loop expects.

Owns `LossOptions` and `DualEncoder`: query and passage towers (one shared transformer by default, two on
request), pooling, and forward(batch, generator) → {"loss", "contrastive", "distill"}. The contrastive loss is
InfoNCE with a temperature over each query's own group (positive + hard negatives), every other query's
passages, and, when distributed, every other process's passages (`losses.cross_device_info_nce`). The
distillation loss is the KL divergence between the teacher's and the bi-encoder's score distributions over
each query's group (`losses.distillation_kl`). With `chunk_size`, embeddings come from gradient caching
(`finetuning.grad_cache`). Does not own data, batching, the loop or export.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from retromae.finetuning.grad_cache import cached_embed
from retromae.losses.losses import cross_device_info_nce, distillation_kl
from retromae.models.encoder import PoolingConfig, pool

BACKWARD_COST = 3.0  # a training step's forward + backward, in forward passes


@dataclass
class LossOptions:
    """How the dual encoder's loss is built."""

    temperature: float = 0.05
    group_size: int = 1
    contrastive_weight: float = 1.0
    distill_weight: float = 0.0
    distill_temperature: float = 1.0
    chunk_size: int = 0


class DualEncoder(nn.Module):
    """Query and passage encoders with pooling; `passage_model` is `query_model` unless the towers are untied."""

    def __init__(self, query_model: PreTrainedModel, passage_model: PreTrainedModel | None,
                 pooling: PoolingConfig, options: LossOptions) -> None:
        super().__init__()
        self.query_model = query_model
        self.untied_passage_model = passage_model  # registered only when untied: no shared tensors in checkpoints
        self.pooling, self.options = pooling, options

    @property
    def passage_model(self) -> PreTrainedModel:
        return self.query_model if self.untied_passage_model is None else self.untied_passage_model

    def embed_at_once(self, model: PreTrainedModel, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled embeddings (B, D) of (B, L) inputs in one pass, whatever `chunk_size` says."""
        hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, D)
        return pool(hidden, attention_mask, self.pooling)

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled embeddings (B, D) of (B, L) inputs, through gradient caching when `chunk_size` is set."""
        if self.options.chunk_size:
            return cached_embed(functools.partial(self.embed_at_once, model), model, input_ids, attention_mask,
                                self.options.chunk_size)
        return self.embed_at_once(model, input_ids, attention_mask)

    def forward(self, batch: dict[str, torch.Tensor],
                generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        options = self.options
        queries = self.embed(self.query_model, batch["query_input_ids"], batch["query_attention_mask"])  # (B, D)
        passages = self.embed(self.passage_model, batch["passage_input_ids"],
                              batch["passage_attention_mask"])  # (B * G, D)
        losses: dict[str, torch.Tensor] = {}
        total = queries.new_zeros((), dtype=torch.float32)
        if options.contrastive_weight:
            losses["contrastive"] = cross_device_info_nce(queries, passages, options.temperature, options.group_size)
            total = total + options.contrastive_weight * losses["contrastive"]
        if options.distill_weight:
            groups = passages.view(queries.shape[0], options.group_size, -1)  # (B, G, D)
            student = torch.einsum("bd,bgd->bg", queries.float(), groups.float()) / options.temperature  # (B, G)
            losses["distill"] = distillation_kl(student, batch["teacher_scores"], options.distill_temperature)
            total = total + options.distill_weight * losses["distill"]
        losses["loss"] = total
        return losses


def freeze_unused_parameters(model: DualEncoder, batch: dict[str, torch.Tensor]) -> list[str]:
    """Stop training parameters the embeddings never use (e.g. BERT's pooler), found by one backward pass in
    eval mode over the first query and the first passage of `batch` alone: which parameters an embedding uses
    does not depend on the batch size, and a pass over the whole batch (outside gradient caching and autocast)
    would need more memory than any training step. DDP then sees a gradient for every trainable parameter.
    Returns the frozen names."""
    was_training = model.training
    model.eval()
    options, model.options = model.options, LossOptions(temperature=1.0, group_size=1)
    queries = model.embed(model.query_model, batch["query_input_ids"][:1], batch["query_attention_mask"][:1])
    passages = model.embed(model.passage_model, batch["passage_input_ids"][:1], batch["passage_attention_mask"][:1])
    (queries.sum() + passages.sum()).backward()  # (1, D) each
    model.options = options
    frozen = []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and parameter.grad is None:
            parameter.requires_grad_(False)
            frozen.append(name)
        parameter.grad = None
    model.train(was_training)
    return frozen


def estimated_step_seconds(model: DualEncoder, batch: dict[str, torch.Tensor]) -> float:
    """Expected seconds of a training step on `batch`: a timed forward pass without gradients over all its queries
    and passages (in gradient-caching chunks when they are set, so it needs no more memory than a step), times
    three, since a backward pass costs about two forward passes (four with gradient caching, which encodes every
    text twice). The pass is run once untimed first: a first call pays one-time costs (CUDA's kernel loading and
    library handles: seconds, against milliseconds a step)."""

    def forward() -> None:
        with torch.no_grad():
            for side, encoder in (("query", model.query_model), ("passage", model.passage_model)):
                ids, mask = batch[f"{side}_input_ids"], batch[f"{side}_attention_mask"]  # (B, L) each
                chunk = model.options.chunk_size or ids.shape[0]
                for start in range(0, ids.shape[0], chunk):
                    last = model.embed(encoder, ids[start:start + chunk], mask[start:start + chunk])  # (b, D)
            float(last.float().sum())  # waits for the device

    forward()
    started = time.perf_counter()
    forward()
    return (BACKWARD_COST + bool(model.options.chunk_size)) * (time.perf_counter() - started)
