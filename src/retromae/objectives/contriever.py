"""Contriever (Izacard et al., 2022): MoCo contrastive learning between two random crops of a document.

Owns: the momentum (key) encoder, the queue of past keys, their updates (`momentum_update`, `MoCoQueue.push`) and
the MoCo loss (`moco_loss`). A batch holds two crops of each of B documents (`CropPairDataset`: rows 0..B-1 the
queries, B..2B-1 the keys). The query encoder is the trained encoder; the key encoder, a copy of its body, follows
it by an exponential moving average and gets no gradient; keys of every process enter the queue after each step.
Queue and key encoder are model state, so checkpoints keep them (a resume continues the same trajectory); the
exported head leaves them out (`checkpoint_only`). Sentence embedding = mean of the last layer over real tokens.

Facts from the reference code (facebookresearch/contriever `src/moco.py` and its published training command):
momentum 0.9995, queue 131,072 keys, temperature 0.05, crops of 10-50% of a 256-token chunk with token deletion
p = 0.1 (the data side: `retromae.data.contrastive`), mean pooling, no normalisation of queries or keys
(`--norm_query`/`--norm_doc` off), the key encoder updated inside the forward pass before the keys are computed
and run in the same train/eval mode as the query encoder, the queue initialised with random unit vectors. The
reference asserts that the queue size is a multiple of the global batch; here the queue wraps around instead.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from retromae.models.encoder import PoolingConfig, pool
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.options import ContrieverOptions

MEAN = PoolingConfig("mean", False)


def momentum_update(key_encoder: nn.Module, query_encoder: nn.Module, momentum: float) -> None:
    """θ_k ← m θ_k + (1 − m) θ_q for every parameter pair, in place, outside autograd."""
    with torch.no_grad():
        keys = list(key_encoder.parameters())
        torch._foreach_mul_(keys, momentum)
        torch._foreach_add_(keys, [p.detach() for p in query_encoder.parameters()], alpha=1.0 - momentum)


def moco_loss(queries: torch.Tensor, keys: torch.Tensor, queue: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over queries (B, D) of −log softmax([q·k, q·queue_1, ..., q·queue_K] / temperature)[0].

    keys (B, D): each query's positive; queue (K, D): negatives shared by every query. float32 scores.
    """
    positive = (queries.float() * keys.float()).sum(dim=-1, keepdim=True)  # (B, 1)
    negative = (queries.float() @ queue.float().T).float()  # (B, K); float32 under autocast too
    logits = torch.cat([positive, negative], dim=1) / temperature  # (B, 1 + K)
    return F.cross_entropy(logits, torch.zeros(queries.shape[0], dtype=torch.long, device=queries.device))


def gather_keys(keys: torch.Tensor) -> torch.Tensor:
    """Every process's keys (B, D) in rank order, (W * B, D), without gradient; the keys themselves alone."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return keys
    parts = [torch.empty_like(keys) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, keys.contiguous())
    return torch.cat(parts)


class MoCoQueue(nn.Module):
    """A ring buffer of K keys (K, D), float32, oldest overwritten first; buffers, so checkpoints hold them."""

    def __init__(self, size: int, dimension: int):
        super().__init__()
        generator = torch.Generator().manual_seed(size)  # the same start on every process
        self.register_buffer("keys", F.normalize(torch.randn(size, dimension, generator=generator), dim=-1))
        self.register_buffer("position", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def push(self, keys: torch.Tensor) -> None:
        """Write `keys` (N, D) at the current position (wrapping around) and advance it by N."""
        size = self.keys.shape[0]
        slots = (self.position + torch.arange(keys.shape[0], device=keys.device)) % size  # (N,)
        self.keys[slots[-size:]] = keys[-size:].float()
        self.position.copy_((self.position + keys.shape[0]) % size)


class Contriever(PretrainingObjective):
    """MoCo between a query crop (trained encoder) and a key crop (momentum encoder), the queue as negatives."""

    title = "Contriever"
    options = ContrieverOptions
    masks = ()
    trains_mlm_head = False
    corpus_views = "crops"
    min_document_tokens = 10  # a crop of 10% keeps at least one token
    pooling = "mean"
    checkpoint_only = ("key_encoder.", "queue.")

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, temperature: float = 0.05,
                 momentum: float = 0.9995, queue_size: int = 131_072):
        super().__init__(encoder, masking)
        self.temperature, self.momentum = temperature, momentum
        self.key_encoder = copy.deepcopy(encoder.base_model).requires_grad_(False)
        self.queue = MoCoQueue(queue_size, encoder.config.hidden_size)

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: ContrieverOptions) -> Contriever:
        return cls(encoder, masking, temperature=options.temperature, momentum=options.momentum,
                   queue_size=options.queue_size)

    def embed(self, body: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean-pooled last-layer states (B, D) of `body` (the query or the key encoder)."""
        hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, D)
        return pool(hidden, attention_mask, MEAN)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = batch["input_ids"].chunk(2), batch["attention_mask"].chunk(2)
        queries = self.embed(self.encoder.base_model, input_ids[0], attention_mask[0])  # (B, D)
        momentum_update(self.key_encoder, self.encoder.base_model, self.momentum)
        with torch.no_grad():
            keys = self.embed(self.key_encoder, input_ids[1], attention_mask[1])  # (B, D)
        loss = moco_loss(queries, keys, self.queue.keys.clone(), self.temperature)
        self.queue.push(gather_keys(keys.float()))
        return {"loss": loss, "moco": loss.detach()}
