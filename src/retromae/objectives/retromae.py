"""RetroMAE (Xiao et al., 2022): full encoder, light decoder, asymmetric masking, basic or enhanced decoding.

Owns: the decoder (one layer for enhanced decoding; `decoder_layers` for basic decoding, the paper's Table 6
ablation), its two input streams and the decoder loss. The decoder shares the encoder's token/position
embeddings and its tied MLM head. Total loss = encoder MLM + decoder loss (Algorithm 1).

- Basic decoding (Eq. 2-3): input [h_X, e(x_1)+p_1, ...] with `decoder_mask_ratio` of the tokens replaced by
  [MASK]; loss on those masked positions.
- Enhanced decoding (Eq. 4-7): query stream h_X + p_i, context stream [h_X, e(x_1)+p_1, ...] of the ORIGINAL
  tokens, a position-specific attention mask per row; loss over all non-special tokens. For long inputs the mask
  is built, and the query stream decoded, a block of rows at a time, so its memory stays bounded.

Positions come from the backbone's family (`retromae.backbones`): its absolute table where it has one; otherwise
(ModernBERT's rotary, DeBERTa-v3's relative positions) the query stream is h_X alone and the decoder's attention
rotates queries and keys to their positions.

The sentence vector h_X that the decoder reads (the bottleneck, `bottleneck`) is the [CLS] state by default, as in
the paper (Section 3.1). With the options' `pooling`/`normalize` (`retromae adapt` gives the base's) it is the
vector the encoder is used with: for a mean-pooled base, the mean of the encoder's final states over the attention
mask (of the masked input: [CLS], [SEP] and [MASK] positions in, padding out, as sentence-transformers pools). The
paper's premise is that the decoder, given little else, can rebuild the input only through h_X, which forces the
encoder to put the input's meaning into it; that helps retrieval only if h_X is the vector retrieval compares.
A normalised base is compared by cosine, which sees the direction alone, so the decoder reads the direction
alone too, rescaled to a constant length √D (D the hidden size), the length of a LayerNorm output before its
learned gain: the paper's h_X (the last layer's LayerNorm output) and the token stream e(x_i) + p_i (the embedding
block's LayerNorm output) both come out of a LayerNorm. Not the unnormalised mean: the decoder could read its
length, which cosine discards, so part of what reconstruction teaches the encoder would go where retrieval never
looks. Not the unit vector as it is: far shorter than the token stream beside it (all-MiniLM-L6-v2 on the first 16
SciFact documents truncated to 128 tokens, mean lengths: token stream 10.2, [CLS] state 7.0, unnormalised mean 2.3,
unit vector 1, √384 = 19.6), so a fresh decoder would start from a sentence slot that is nearly empty. A constant
factor carries no information. An unnormalised base (a dot product) gives its pooled vector as it is: its length
is in the score.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.models.encoder import pool
from retromae.models.encoder_config import PoolingConfig
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import DecoderLayer
from retromae.objectives.masking import (
    decoder_input_mask,
    draw_seeds,
    enhanced_decoding_mask,
    enhanced_decoding_mask_from_scores,
    hashed_uniform,
)
from retromae.objectives.options import RetroMAEOptions


class RetroMAE(PretrainingObjective):
    """Encoder MLM plus a decoder that reconstructs the input from the sentence embedding ([CLS], or `pooling`).

    `mask_cells`: the most cells of enhanced decoding's (B, L, L) mask built at once, 32 Mi (32 MiB of booleans and
    128 MiB of float32 scores; 128 blocks of 512 tokens, 2 of 4,096). Past it (one example of 8,192 tokens is 64 Mi
    cells), the query stream is decoded a block of rows at a time (`_blockwise_enhanced_decoding`)."""

    title = "RetroMAE"
    options = RetroMAEOptions
    masks = ("encoder", "decoder")
    head = ("decoder",)
    mask_cells = 2**25

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, decoding: str = "enhanced",
                 decoder_layers: int = 1, decoder_mask_ratio: float = 0.5, pooling: PoolingConfig | None = None):
        super().__init__(encoder, masking)
        if decoding not in ("enhanced", "basic"):
            raise ValueError(f"decoding must be 'enhanced' or 'basic', not {decoding!r}")
        if decoding == "enhanced" and decoder_layers != 1:
            raise ValueError("enhanced decoding uses exactly one decoder layer (RetroMAE, Section 4.4)")
        self.decoding, self.decoder_mask_ratio = decoding, decoder_mask_ratio
        self.sentence_pooling = pooling or PoolingConfig()
        self.pooling = self.sentence_pooling.pooling  # what the exports and probes read
        self.normalize = self.sentence_pooling.normalize
        self.decoder = nn.ModuleList(DecoderLayer(encoder.config) for _ in range(decoder_layers))

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: RetroMAEOptions) -> RetroMAE:
        return cls(encoder, masking, decoding=options.decoding, decoder_layers=options.decoder_layers,
                   decoder_mask_ratio=options.decoder_mask_ratio,
                   pooling=PoolingConfig(options.pooling, options.normalize))

    def compiled_modules(self) -> list[nn.Module]:
        return [*super().compiled_modules(), *self.decoder]

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        _, encoder_loss, decoder_loss = self.reconstruction_losses(batch, generator)
        return {"loss": encoder_loss + decoder_loss, "encoder_mlm": encoder_loss.detach(),
                "decoder": decoder_loss.detach()}

    def reconstruction_losses(self, batch: dict[str, torch.Tensor],
                              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sentence embeddings (B, D) of the masked input (unnormalised, see `bottleneck`), the encoder MLM loss
        and the decoder loss."""
        hidden, encoder_loss = self.encode_masked(batch, generator)
        embeddings, sentence = self.bottleneck(hidden, batch["attention_mask"])
        return embeddings, encoder_loss, self.decoder_loss(batch, sentence, generator)

    def bottleneck(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sentence embeddings (B, D) of final states (B, L, D) under `attention_mask` (B, L), and the decoder's
        h_X (B, 1, D): the [CLS] state, exactly, by default; else the pooled vector, or with `normalize` its
        direction at length √D (module docstring)."""
        if self.sentence_pooling == PoolingConfig():  # the paper's [CLS] state, in the encoder's dtype
            return hidden[:, 0], hidden[:, :1]
        pooled = pool(hidden, attention_mask, PoolingConfig(self.pooling, False))  # (B, D) float32
        sentence = F.normalize(pooled, dim=-1) * math.sqrt(hidden.shape[-1]) if self.normalize else pooled
        return pooled, sentence.to(hidden.dtype)[:, None]

    def decoder_loss(self, batch: dict[str, torch.Tensor], sentence: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
        """The decoder's reconstruction loss of the batch from the sentence embeddings (B, 1, D)."""
        decode = self._enhanced_decoding if self.decoding == "enhanced" else self._basic_decoding
        return decode(batch, sentence, generator)

    def _basic_decoding(self, batch: dict[str, torch.Tensor], sentence: torch.Tensor,
                        generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        masked = decoder_input_mask(
            batch["special_tokens_mask"], ratio=self.decoder_mask_ratio, generator=generator,
            word_starts=batch["word_starts"] if self.masking.whole_word_mask else None,
        )  # (B, L) bool
        corrupted = input_ids.masked_fill(masked, self.masking.mask_token_id)
        hidden = self.cls_and_token_stream(corrupted, sentence)
        visible = batch["attention_mask"].bool()[:, None, :]  # (B, 1, L)
        rotary = self.decoder_positions(input_ids.shape[1], input_ids.device).rotary
        for layer in self.decoder:
            hidden = layer(hidden, hidden, visible, rotary)
        labels = input_ids.masked_fill(~masked, backbone.IGNORE_INDEX)
        capacity = backbone.label_capacity(labels.numel(), self.decoder_mask_ratio)
        return self.token_loss(hidden, labels, capacity)

    def _enhanced_decoding(self, batch: dict[str, torch.Tensor], sentence: torch.Tensor,
                           generator: torch.Generator) -> torch.Tensor:
        input_ids = batch["input_ids"]
        batch_size, length = input_ids.shape
        positions = self.decoder_positions(length, input_ids.device)
        if positions.absolute is not None:
            query = sentence + positions.absolute[None]  # (B, L, D): h_X + p_i
        else:
            query = sentence.expand(-1, length, -1)  # (B, L, D): h_X, rotated to position i in attention
        context = self.cls_and_token_stream(input_ids, sentence)  # (B, L, D)
        labels = input_ids.masked_fill(batch["special_tokens_mask"], backbone.IGNORE_INDEX)
        if batch_size * length * length > self.mask_cells:
            return self._blockwise_enhanced_decoding(query, context, batch["attention_mask"], labels,
                                                     positions.rotary, generator)
        visible = enhanced_decoding_mask(
            batch["attention_mask"], ratio=self.decoder_mask_ratio, generator=generator
        )  # (B, L, L)
        hidden = self.decoder[0](query, context, visible, positions.rotary)
        return self.token_loss(hidden, labels)  # every real token: projected everywhere

    def _blockwise_enhanced_decoding(self, query: torch.Tensor, context: torch.Tensor, attention_mask: torch.Tensor,
                                     labels: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None,
                                     generator: torch.Generator) -> torch.Tensor:
        """Enhanced decoding of long inputs: the query rows a block at a time, each block's mask drawn from
        counter-based scores (`hashed_uniform`) and recomputed, with its attention, in the backward pass, so that
        no (B, L, L) tensor ever exists. Query rows attend to the context stream only, so the blocks are
        independent: the loss is the same mean over every labelled token."""
        batch_size, length = labels.shape
        rows = max(1, self.mask_cells // (batch_size * length))
        seeds = draw_seeds(batch_size, generator)  # (B,)
        total = query.new_zeros((), dtype=torch.float32)
        for start in range(0, length, rows):
            block = slice(start, min(start + rows, length))
            total = total + checkpoint(self._decode_block, query[:, block], context, attention_mask, seeds, start,
                                       labels[:, block], rotary, use_reentrant=False)
        return total / (labels != backbone.IGNORE_INDEX).sum().clamp(min=1)

    def _decode_block(self, query: torch.Tensor, context: torch.Tensor, attention_mask: torch.Tensor,
                      seeds: torch.Tensor, start: int, labels: torch.Tensor,
                      rotary: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """The summed cross-entropy of query rows start .. start + R - 1, query (B, R, D), labels (B, R)."""
        scores = hashed_uniform(seeds, start, query.shape[1], context.shape[1])  # (B, R, L)
        visible = enhanced_decoding_mask_from_scores(attention_mask, scores, self.decoder_mask_ratio, start)
        hidden = self.decoder[0](query, context, visible, rotary, query_start=start)  # (B, R, D)
        return self.vocabulary.loss_sum(hidden.flatten(0, 1), labels.flatten())
