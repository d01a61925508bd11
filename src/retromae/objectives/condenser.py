"""Condenser (Gao and Callan, 2021a): a short head that must predict masked tokens from [CLS] and early token states.

Owns: the Condenser head (`decoder_layers` transformer layers, 2 by default, named `condenser_head`), its input
[h_cls of the last layer, token states of layer `skip_from`] and its loss. The head writes through the encoder's
tied MLM head. Total loss = head MLM + the backbone's own ("late") MLM on the last layer, both on the same
masked input. The head is dropped at export: the encoder alone is the retriever, with [CLS] pooling.

Facts from the reference code (luyug/Condenser `modeling.py`): the head layers are ordinary BERT layers
initialised like the backbone; the skip connection reads layer 6 of 12 (`skip_from`; here half the depth unless
`--skip-from` says otherwise, so 6 of 12 for BERT-base); late MLM on (`--late_mlm`), and the masking of its data
collator is BERT's 15% (pass `--encoder-mask-ratio 0.15`; our default 0.3 is RetroMAE's).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from retromae.models import masked_lm as backbone
from retromae.objectives.base import MaskingSettings, PretrainingObjective
from retromae.objectives.layers import DecoderLayer
from retromae.objectives.options import CondenserOptions
from retromae.runtime.options import ConfigError


def default_skip_from(config) -> int:
    """The middle layer of a backbone config (6 of 12)."""
    return max(1, config.num_hidden_layers // 2)


class Condenser(PretrainingObjective):
    """Late MLM plus a `decoder_layers`-layer head over [last-layer CLS, layer-`skip_from` tokens]."""

    title = "Condenser"
    options = CondenserOptions
    head = ("condenser_head",)

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings, head_layers: int = 2,
                 skip_from: int | None = None):
        super().__init__(encoder, masking)
        depth = encoder.config.num_hidden_layers
        self.skip_from = default_skip_from(encoder.config) if skip_from is None else skip_from
        if depth < 2:  # the head reads an earlier layer than the last: none exists
            raise ConfigError(f"--skip-from: the backbone has {depth} layer and {self.title}'s head reads one before "
                              "the last (1 to the depth - 1); it needs a backbone of at least 2 layers")
        if not 1 <= self.skip_from < depth:
            layers = "layer 1" if depth == 2 else f"a layer from 1 to {depth - 1}"
            raise ConfigError(f"--skip-from {self.skip_from}: the backbone has {depth} layers; give {layers}")
        self.condenser_head = nn.ModuleList(DecoderLayer(encoder.config) for _ in range(head_layers))

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, options: CondenserOptions) -> Condenser:
        return cls(encoder, masking, head_layers=options.decoder_layers, skip_from=options.skip_from)

    def compiled_modules(self) -> list[nn.Module]:
        return [*super().compiled_modules(), *self.condenser_head]

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        _, losses = self.condenser_losses(batch, generator)
        return losses

    def condenser_losses(self, batch: dict[str, torch.Tensor],
                         generator: torch.Generator) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The last layer's [CLS] states (B, D) of the masked input and the named Condenser losses."""
        corrupted, labels = self.mask_encoder_input(batch, generator)
        layers = backbone.layer_hidden_states(self.encoder, corrupted, batch["attention_mask"])
        last = layers[-1]  # (B, L, D)
        late_loss = self.masked_token_loss(last, labels)
        hidden = torch.cat([last[:, :1], layers[self.skip_from][:, 1:]], dim=1)  # (B, L, D)
        visible = batch["attention_mask"].bool()[:, None, :]  # (B, 1, L)
        for layer in self.condenser_head:
            hidden = layer(hidden, hidden, visible)
        head_loss = self.masked_token_loss(hidden, labels)
        return last[:, 0], {"loss": head_loss + late_loss, "condenser_mlm": head_loss.detach(),
                            "encoder_mlm": late_loss.detach()}
