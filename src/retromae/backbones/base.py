"""What every backbone adapter answers, with the answers most BERT-shaped encoders share.

Owns: `BackboneAdapter`, the questions an objective may ask of a masked-LM backbone (where its MLM head is and how
it splits into a transform and the vocabulary projection, how positions enter it, how to run its body, the longest
input it reads, a tiny config of it for a model from scratch) and `DecoderPositions`, the position signal a
pre-training decoder takes from the backbone. Does not own any family (`retromae.backbones.<family>`), the facts
the table states of it (`retromae.backbones.families`: names, model types, tokenizer kinds) or the registry
(`retromae.backbones.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from retromae.backbones.families import BackboneFamily
from retromae.runtime.errors import ModelLoadError


@dataclass(frozen=True)
class DecoderPositions:
    """Where a decoder's position signal comes from, for inputs of one length L.

    `absolute` (L, D): the backbone's absolute table, added to the query stream (the token stream already carries
    it, from the backbone's embedding block). `rotary` (cos, sin), each (L, Dh): rotations applied to the queries
    and keys inside the decoder's attention. Exactly one of the two is set."""

    absolute: torch.Tensor | None = None
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None


class BackboneAdapter:
    """One backbone family. The defaults fit a BERT-shaped masked LM: one MLM head module beside the base model, an
    absolute position table in `base_model.embeddings`, a body that takes a (B, 1, 1, L) boolean padding mask."""

    positions: ClassVar[str]  # "absolute", "rotary" or "relative"
    # Whether the body takes the padding mask as (B, 1, 1, L) booleans under SDPA (`body`); families that build their
    # own masks from the 2D one (ModernBERT's sliding windows, DeBERTa's relative attention) say False.
    boolean_padding_mask: ClassVar[bool] = True

    def __init__(self, entry: BackboneFamily):
        self.entry = entry  # the family's entry in `retromae.backbones.families.FAMILIES`: its names and facts

    @property
    def family(self) -> str:
        """How messages name the family, e.g. "RoBERTa/XLM-R"."""
        return self.entry.title

    @property
    def architectures(self) -> Mapping[str, str]:
        """Architecture name (`retromae init-model --architecture`) → the tokenizer kind its family trains."""
        return self.entry.architectures

    def mlm_head(self, model: PreTrainedModel) -> nn.Module:
        """The module mapping hidden states (..., D) to vocabulary logits (..., V): the one child beside the base."""
        heads = head_candidates(model)
        if len(heads) != 1:
            raise ModelLoadError(f"{type(model).__name__} ({self.family} family): expected one MLM head module "
                                 f"beside the base model, found {len(heads)}")
        return heads[0]

    def vocabulary_projection(self, model: PreTrainedModel) -> tuple[nn.Module, nn.Linear]:
        """The MLM head in two parts, (transform, projection), with mlm_head(x) == projection(transform(x)): the
        transform maps states (..., D) to (..., E) (BERT's dense, activation and LayerNorm), the projection is the
        (tied) linear layer onto the vocabulary. A fused projection and loss (`retromae.losses.fused_loss`) need them
        apart. By default BERT's layout: `predictions.transform`, then `predictions.decoder`."""
        predictions = getattr(self.mlm_head(model), "predictions", None)
        transform, projection = getattr(predictions, "transform", None), getattr(predictions, "decoder", None)
        if not isinstance(transform, nn.Module) or not isinstance(projection, nn.Linear):
            raise ModelLoadError(f"{type(model).__name__} ({self.family} family): its MLM head has no "
                                 "predictions.transform and predictions.decoder to split")
        return transform, projection

    def head_modules(self, model: PreTrainedModel) -> list[nn.Module]:
        """The modules `mlm_head` runs, each registered in `model` (what torch.compile compiles in place)."""
        return [self.mlm_head(model)]

    def max_length(self, config: PretrainedConfig) -> int | None:
        """The most tokens the backbone reads (its position table's size), None when it sets no limit."""
        return getattr(config, "max_position_embeddings", None)

    def body(self, model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             all_layers: bool = False):
        """The base model's output on (B, L) inputs; with `all_layers`, every layer's hidden states too.

        Under SDPA the padding mask goes in as (B, 1, 1, L) booleans, which BERT-shaped models hand to attention as
        it is: from a 2D mask they would first ask whether the batch has any padding (`padding_mask.all()`), a read
        from the device on every step (under torch.compile it skips the question and always builds the mask, as
        here). FlashAttention-2 takes the 2D mask, from which it unpads the batch, and so do the families that
        build their own masks from it (`boolean_padding_mask`)."""
        visible = attention_mask
        if self.boolean_padding_mask and model.config._attn_implementation == "sdpa":
            visible = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): True = may attend
        return model.base_model(input_ids=input_ids, attention_mask=visible, output_hidden_states=all_layers)

    def decoder_positions(self, model: PreTrainedModel, length: int, device: torch.device) -> DecoderPositions:
        """The position signal of a decoder over L positions: by default the backbone's absolute table."""
        return DecoderPositions(absolute=self.absolute_positions(model, length, device))

    def absolute_positions(self, model: PreTrainedModel, length: int, device: torch.device) -> torch.Tensor:
        """The absolute position embeddings p_0 .. p_{L-1}, shape (L, D)."""
        table = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
        if not isinstance(table, nn.Embedding):
            raise ModelLoadError(f"{type(model).__name__} ({self.family} family): no absolute position table in "
                                 "base_model.embeddings.position_embeddings")
        return table(torch.arange(length, device=device))

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        """A config of `architecture` for a random model of this size (heads of 64, FFN 4x the width)."""
        raise NotImplementedError


def head_candidates(model: PreTrainedModel) -> list[nn.Module]:
    """The children of `model` beside its base model that hold parameters: in a BERT-shaped masked LM, its MLM head."""
    return [child for child in model.children()
            if child is not model.base_model and any(True for _ in child.parameters())]
