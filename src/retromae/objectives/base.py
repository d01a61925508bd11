"""What every pre-training objective shares: the backbone, its MLM head, the masking settings.

Owns: the `PretrainingObjective` base class (forward(batch, generator) → named losses, "loss" the sum to
optimise; class attributes saying which data it reads and its decoder's default depth; its config checks),
`MaskingSettings`, the masked encoder pass used by MLM, RetroMAE and SEED alike, and the decoder input stream
[h_cls, e(x_1)+p_1, ...] that RetroMAE and SEED share. Does not own any decoder or objective-specific loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae import backbone
from retromae.config import require
from retromae.masking import mlm_mask


@dataclass(frozen=True)
class MaskingSettings:
    """Token ids and ratios the masks need; taken from the tokenizer and the pre-training config."""

    mask_token_id: int
    vocab_size: int
    encoder_mask_ratio: float
    decoder_mask_ratio: float
    whole_word_mask: bool

    @classmethod
    def create(cls, tokenizer: PreTrainedTokenizerBase, config) -> MaskingSettings:
        return cls(tokenizer.mask_token_id, len(tokenizer), config.encoder_mask_ratio,
                   config.decoder_mask_ratio, config.whole_word_mask)


class PretrainingObjective(nn.Module):
    """An encoder (a Hugging Face masked LM) plus whatever head the objective trains beside it.

    `pair_batches`: the objective reads two views per example (a `PairCollator` batch of 2B rows) instead of
    blocks. `default_decoder_layers`: the decoder depth when `--decoder-layers` is not given; None when the
    objective has no decoder.
    """

    pair_batches: bool = False
    default_decoder_layers: int | None = None

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings):
        super().__init__()
        self.encoder = encoder
        self.masking = masking
        backbone.mlm_head(encoder)  # fail early on an architecture without a single MLM head

    @property
    def lm_head(self) -> nn.Module:
        """The encoder's (tied) MLM head, shared by every decoder; not registered twice."""
        return backbone.mlm_head(self.encoder)

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings, config) -> PretrainingObjective:
        """Build from a pre-training config; objectives with options of their own override this."""
        return cls(encoder, masking)

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError for options this objective cannot honour; objectives with options extend it."""
        require(cls.default_decoder_layers is not None or config.decoder_layers is None, "decoder_layers",
                f"the {config.objective} objective has no decoder")

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def compile(self, *args, **kwargs) -> None:
        """torch.compile, in place, each module that does the work (`compiled_modules`) rather than forward: the
        masks are drawn between them from a torch.Generator, which dynamo cannot trace (a graph break at every
        draw). With the losses free of reads from the device, each compiled module is one graph."""
        for module in self.compiled_modules():
            module.compile(*args, **kwargs)

    def compiled_modules(self) -> list[nn.Module]:
        """The encoder body and the MLM head; objectives with a decoder add its layers."""
        return [self.encoder.base_model, self.lm_head]

    def encode_masked(self, batch: dict[str, torch.Tensor],
                      generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask the encoder input (80/10/10), encode it; returns final hidden states (B, L, D) and the MLM loss."""
        corrupted, labels = mlm_mask(
            batch["input_ids"], batch["special_tokens_mask"], ratio=self.masking.encoder_mask_ratio,
            mask_token_id=self.masking.mask_token_id, vocab_size=self.masking.vocab_size, generator=generator,
            word_starts=batch["word_starts"] if self.masking.whole_word_mask else None,
        )
        hidden = backbone.hidden_states(self.encoder, corrupted, batch["attention_mask"])  # (B, L, D)
        capacity = backbone.label_capacity(labels.numel(), self.masking.encoder_mask_ratio)
        return hidden, backbone.masked_lm_loss(self.lm_head, hidden, labels, capacity)

    def cls_and_token_stream(self, input_ids: torch.Tensor, cls_embedding: torch.Tensor) -> torch.Tensor:
        """[h_cls, e(x_1)+p_1, ..., e(x_N)+p_N], shape (B, L, D): the sentence embedding (B, 1, D) at position 0, then
        the shared embeddings of `input_ids` (B, L) from position 1 on."""
        embedded = backbone.token_embeddings(self.encoder, input_ids)  # (B, L, D)
        return torch.cat([cls_embedding, embedded[:, 1:]], dim=1)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor outside the encoder's base model (MLM head, decoder), each tied tensor once."""
        seen = {id(p) for p in self.encoder.base_model.parameters()}
        head = {}
        for name, tensor in self.state_dict(keep_vars=True).items():
            if id(tensor) not in seen:
                seen.add(id(tensor))
                head[name] = tensor
        return head
