"""TSDAE (Wang, Reimers and Gurevych, 2021): a denoising auto-encoder whose only path from input to output is the
sentence vector.

Owns: the deletion noise (`delete_words`), the decoder (`TSDAEDecoderLayer`: causal self-attention over the clean
tokens, attention to the one sentence vector, feed-forward), the next-token labels (`next_token_labels`) and the
`tsdae` objective. The encoder reads a noised input (each word deleted with probability 0.6, at least one kept),
pools it into one vector with the pooling it is used with (`--pooling`/`--normalize` of `retromae adapt`; [CLS],
unnormalised, from `retromae pretrain`), and the decoder reconstructs the clean input from that vector alone.

Facts from the reference (sentence-transformers `DenoisingAutoEncoderLoss` and `DenoisingAutoEncoderDataset`):
deletion ratio 0.6 at word level, a decoder that cross-attends only to the sentence embedding, decoder input the
clean tokens, labels the same tokens shifted by one (padding ignored), embeddings tied between encoder and decoder.
The reference decoder shares every encoder layer; ours is a small decoder of its own (`--decoder-layers`, default 1)
on the shared embeddings and the tied MLM head, so that a step costs little more than the encoder pass on a CPU.
Attention to one key is a softmax over one score, always 1: it returns that key's value whatever the query, so the
cross-attention is exactly its value and output projections (no query or key projection to train).
Does not own the data (blocks of a token store: `retromae.data.collate`) or pooling math (`retromae.models.encoder`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.models.encoder import pool
from retromae.models.encoder_config import PoolingConfig
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import apply_rotary, init_linears, split_heads
from retromae.objectives.options import TSDAEOptions


def delete_words(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_tokens_mask: torch.Tensor,
                 word_starts: torch.Tensor | None, ratio: float, generator: torch.Generator,
                 pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Delete each word of (B, L) inputs with probability `ratio` (each token where `word_starts` is None), special
    tokens kept, at least one word kept per row (the one with the highest draw); the kept tokens move left in order.
    Returns the noised ids and attention mask, (B, L') each, L' the longest kept row, padded with `pad_id`."""
    draws = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # (B, L)
    if word_starts is not None:  # every token takes the draw of its word's first token
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        starts = torch.where(word_starts | special_tokens_mask, positions, torch.zeros_like(positions))
        draws = draws.gather(1, starts.cummax(dim=1).values)
    real = attention_mask.bool() & ~special_tokens_mask.bool()  # (B, L): tokens that may be deleted
    deleted = real & (draws < ratio)
    best = torch.where(real, draws, torch.full_like(draws, -1.0)).amax(dim=1, keepdim=True)  # (B, 1)
    deleted &= ~(real & (draws == best))  # the word of the highest draw survives
    keep = attention_mask.bool() & ~deleted
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)  # kept tokens first, in their order
    kept = keep.gather(1, order)
    noised = input_ids.gather(1, order).masked_fill(~kept, pad_id)
    length = int(kept.sum(dim=1).max())  # one read from the device: the encoder then runs on ~40% of the columns
    return noised[:, :length], kept[:, :length].long()


def next_token_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The labels (B, L - 1) of predicting token t + 1 from position t: `input_ids` (B, L) from position 1 on,
    padding ignored (`backbone.IGNORE_INDEX`)."""
    return input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, backbone.IGNORE_INDEX)


class TSDAEDecoderLayer(nn.Module):
    """Post-LayerNorm: causal self-attention + residual + norm, attention to the sentence vector + residual + norm,
    feed-forward + residual + norm."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        hidden, eps = config.hidden_size, getattr(config, "layer_norm_eps", 1e-12)
        self.num_heads = config.num_attention_heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attention_output = nn.Linear(hidden, hidden)
        self.cross_value, self.cross_output = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.feed_forward = nn.Sequential(nn.Linear(hidden, config.intermediate_size), nn.GELU(),
                                          nn.Linear(config.intermediate_size, hidden))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden, eps=eps) for _ in range(3))
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        init_linears(self, getattr(config, "initializer_range", 0.02))

    def forward(self, hidden: torch.Tensor, sentence: torch.Tensor, attention_mask: torch.Tensor,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """hidden (B, L, D), sentence (B, D), attention_mask (B, L) → (B, L, D)."""
        length = hidden.shape[1]
        q, k, v = (split_heads(projection(hidden), self.num_heads) for projection in (self.query, self.key, self.value))
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        causal = torch.ones(length, length, dtype=torch.bool, device=hidden.device).tril()  # (L, L)
        visible = causal[None, None] & attention_mask.bool()[:, None, None, :]  # (B, 1, L, L)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=visible).transpose(1, 2).flatten(2)
        hidden = self.norms[0](hidden + self.dropout(self.attention_output(attended)))
        from_sentence = self.cross_output(self.cross_value(sentence.to(hidden.dtype)))[:, None]  # (B, 1, D)
        hidden = self.norms[1](hidden + self.dropout(from_sentence))
        return self.norms[2](hidden + self.dropout(self.feed_forward(hidden)))


class TSDAE(PretrainingObjective):
    """Encode the noised input into one vector; decode the clean input from it with the tied embeddings and head."""

    title = "TSDAE"
    options = TSDAEOptions
    masks = ()  # it deletes words instead (`delete_words`)
    head = ("decoder",)

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoder_layers: int = 1,
                 pooling: PoolingConfig | None = None, deletion_ratio: float = TSDAEOptions.deletion_ratio):
        super().__init__(encoder, masking)
        if not 0 <= deletion_ratio < 1:
            raise ValueError(f"deletion_ratio must lie in [0, 1), got {deletion_ratio}")
        self.sentence_pooling = pooling or PoolingConfig()
        self.pooling = self.sentence_pooling.pooling  # what the exports and probes read
        self.normalize = self.sentence_pooling.normalize
        self.deletion_ratio = deletion_ratio
        self.decoder = nn.ModuleList(TSDAEDecoderLayer(encoder.config) for _ in range(decoder_layers))

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: TSDAEOptions) -> TSDAE:
        return cls(encoder, masking, decoder_layers=options.decoder_layers,
                   pooling=PoolingConfig(options.pooling, options.normalize), deletion_ratio=options.deletion_ratio)

    def compiled_modules(self) -> list[nn.Module]:
        return [*super().compiled_modules(), *self.decoder]

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        noised, noised_mask = delete_words(input_ids, attention_mask, batch["special_tokens_mask"],
                                           batch.get("word_starts"), self.deletion_ratio, generator,
                                           self.encoder.config.pad_token_id or 0)
        hidden = backbone.hidden_states(self.encoder, noised, noised_mask)  # (B, L', D)
        sentence = pool(hidden, noised_mask, self.sentence_pooling)  # (B, D)
        decoded = backbone.token_embeddings(self.encoder, input_ids)  # (B, L, D): the clean input, tied embeddings
        rotary = self.decoder_positions(input_ids.shape[1], input_ids.device).rotary
        for layer in self.decoder:
            decoded = layer(decoded, sentence, attention_mask, rotary)
        loss = self.token_loss(decoded[:, :-1], next_token_labels(input_ids, attention_mask))  # fused with the head
        return {"loss": loss, "reconstruction": loss.detach()}
