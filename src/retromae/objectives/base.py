"""What every pre-training objective shares: the backbone, its MLM head, the masking settings.

Owns: the `PretrainingObjective` base class (forward(batch, generator) → named losses, "loss" the sum to
optimise; class attributes saying what the objective is: its title, what it masks, its head, its options class, which
data it reads, the pooling it trains; its checks of a run), `MaskingSettings`, the masked encoder pass used by MLM,
RetroMAE, SEED, DupMAE and Condenser alike, the loss on the vocabulary they all take (`token_loss`, fused with the
projection by `retromae.losses.fused_loss`), the decoder input stream [h_cls, e(x_1)+p_1, ...] that RetroMAE and SEED
share, and the decoders' position signal. Everything it needs of the backbone it asks the family's adapter
(`retromae.backbones`). Does not own any decoder or objective-specific loss, nor the options
(`retromae.objectives.options`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae.backbones.registry import DecoderPositions, adapter_for
from retromae.losses.fused_loss import VocabularyHead
from retromae.models import masked_lm as backbone
from retromae.objectives.masking import mlm_mask
from retromae.objectives.options import ObjectiveOptions


@dataclass(frozen=True)
class MaskingSettings:
    """Token ids and the encoder's masking, shared by every objective; taken from the tokenizer and the pre-training
    config (a decoder's masking is its objective's option)."""

    mask_token_id: int
    vocab_size: int
    encoder_mask_ratio: float
    whole_word_mask: bool

    @classmethod
    def create(cls, tokenizer: PreTrainedTokenizerBase, config) -> MaskingSettings:
        return cls(tokenizer.mask_token_id, len(tokenizer), config.encoder_mask_ratio, config.whole_word_mask)


class PretrainingObjective(nn.Module):
    """An encoder (a Hugging Face masked LM) plus whatever head the objective trains beside it.

    What the objective is, for progress bars, reports, checks and exports to ask rather than its name:
    `title`: its name in progress bars and reports ("RetroMAE"). `options`: its options class
    (`retromae.objectives.options`; the table in `retromae.objectives` names the same). `masks`: the inputs it
    masks, "encoder" (at `encoder_mask_ratio`, 80/10/10) and "decoder" (at its `decoder_mask_ratio`); () when it
    masks nothing. `head`: its modules beside the encoder and its MLM head (a decoder), trained from fresh weights,
    saved in the pre-training head and restored by `--init-from`. `trains_mlm_head`: False when it never calls the
    MLM head (then frozen, and kept and saved unchanged). `checkpoint_only`: prefixes of state that checkpoints keep
    but the exported head leaves out (e.g. a momentum encoder and its queue). `pooling`: the sentence embedding it
    trains, "cls" or "mean"; the probe and the exports use it.
    Its data: `corpus_views`: what one example of a --corpus is: "blocks" (a `BlockCollator` batch of B rows),
    "spans" (two spans of one document) or "crops" (two augmented crops of one document), the last two a
    `PairCollator` batch of 2B rows. `pairs_views`: what one line of --pairs gives, "pairs" (2B rows) or "triples"
    (query, positive, hard negative: 3B rows), None when the objective reads no pairs. `min_document_tokens`: the
    fewest tokens a document needs to give two spans or crops.
    """

    title: str = ""
    options: type[ObjectiveOptions] = ObjectiveOptions
    masks: tuple[str, ...] = ("encoder",)
    head: tuple[str, ...] = ()
    trains_mlm_head: bool = True
    checkpoint_only: tuple[str, ...] = ()
    pooling: str = "cls"
    corpus_views: str = "blocks"
    pairs_views: str | None = None
    min_document_tokens: int = 1

    def __init__(self, encoder: PreTrainedModel, masking: MaskingSettings):
        super().__init__()
        self.encoder = encoder
        self.masking = masking
        self.adapter = adapter_for(encoder)  # fails early, naming what is missing, on a family no adapter knows
        self.vocabulary = VocabularyHead(self.adapter.mlm_head(encoder), *self.adapter.vocabulary_projection(encoder))
        if not self.trains_mlm_head:
            self.freeze_unused_mlm_head()

    @property
    def lm_head(self) -> nn.Module:
        """The encoder's (tied) MLM head, shared by every decoder; not registered twice."""
        return self.adapter.mlm_head(self.encoder)

    def use_vocabulary_loss(self, kind: str) -> None:
        """How the losses on the vocabulary run (`retromae.losses.fused_loss.VOCABULARY_LOSSES`): fused in chunks
        (auto, chunked, liger) or unfused (the full logits, then the loss)."""
        self.vocabulary = dataclasses.replace(self.vocabulary, kind=kind)

    def freeze_unused_mlm_head(self) -> None:
        """For objectives that never call the MLM head: freeze it, so DDP waits for no gradient. Tied embeddings
        stay trained."""
        shared = {id(p) for p in self.encoder.base_model.parameters()}
        for parameter in self.lm_head.parameters():
            if id(parameter) not in shared:
                parameter.requires_grad_(False)

    @classmethod
    def trains_a_head(cls) -> bool:
        """Whether it trains anything beside the encoder body (a head of its own, or the MLM head)."""
        return bool(cls.head) or cls.trains_mlm_head

    @classmethod
    def from_config(cls, encoder: PreTrainedModel, masking: MaskingSettings,
                    options: ObjectiveOptions) -> PretrainingObjective:
        """Build from the objective's typed options; objectives with options of their own override this."""
        return cls(encoder, masking)

    @classmethod
    def check_config(cls, options: ObjectiveOptions, config) -> None:
        """Raise ConfigError for options this objective cannot honour in the run `config` (a `PretrainConfig`);
        objectives whose options depend on the run extend it."""
        options.check()

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def compile(self, *args, **kwargs) -> None:
        """torch.compile, in place, each module that does the work (`compiled_modules`) rather than forward: the
        masks are drawn between them from a torch.Generator, which dynamo cannot trace (a graph break at every
        draw). With the losses free of reads from the device, each compiled module is one graph."""
        for module in self.compiled_modules():
            module.compile(*args, **kwargs)

    def compiled_modules(self) -> list[nn.Module]:
        """The encoder body and the MLM head (its transform alone when the projection is fused with the loss);
        objectives with a decoder add its layers."""
        head = [self.vocabulary.transform] if self.vocabulary.fused else self.adapter.head_modules(self.encoder)
        return [self.encoder.base_model, *head]

    def encode_masked(self, batch: dict[str, torch.Tensor],
                      generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask the encoder input (80/10/10), encode it; returns final hidden states (B, L, D) and the MLM loss."""
        corrupted, labels = self.mask_encoder_input(batch, generator)
        hidden = backbone.hidden_states(self.encoder, corrupted, batch["attention_mask"])  # (B, L, D)
        return hidden, self.masked_token_loss(hidden, labels)

    def masked_token_loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The MLM-head loss of states (B, L, D) at the positions `mask_encoder_input` labelled (B, L), projected at
        a fixed number of positions (`backbone.label_capacity`) so that no step waits for the device."""
        capacity = backbone.label_capacity(labels.numel(), self.masking.encoder_mask_ratio)
        return self.token_loss(hidden, labels, capacity)

    def token_loss(self, hidden: torch.Tensor, labels: torch.Tensor, capacity: int | None = None) -> torch.Tensor:
        """Mean cross-entropy of the MLM head's logits of states (B, L, D) against labels (B, L) (-100: no loss),
        projected at `capacity` positions (`backbone.masked_lm_loss`) or all; fused with the projection unless
        the objective was told otherwise (`use_vocabulary_loss`)."""
        if self.vocabulary.fused:
            return self.vocabulary.loss(*backbone.labelled_rows(hidden, labels, capacity))
        return backbone.masked_lm_loss(self.lm_head, hidden, labels, capacity)

    def mask_encoder_input(self, batch: dict[str, torch.Tensor],
                           generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The corrupted encoder input (B, L) at `encoder_mask_ratio` (80/10/10) and its MLM labels (B, L)."""
        return mlm_mask(
            batch["input_ids"], batch["special_tokens_mask"], ratio=self.masking.encoder_mask_ratio,
            mask_token_id=self.masking.mask_token_id, vocab_size=self.masking.vocab_size, generator=generator,
            word_starts=batch["word_starts"] if self.masking.whole_word_mask else None,
        )

    def cls_and_token_stream(self, input_ids: torch.Tensor, cls_embedding: torch.Tensor) -> torch.Tensor:
        """[h_cls, e(x_1)+p_1, ..., e(x_N)+p_N], shape (B, L, D): the sentence embedding (B, 1, D) at position 0, then
        the shared embeddings of `input_ids` (B, L) from position 1 on (with p_i where the backbone adds absolute
        positions; rotary ones enter in the decoder's attention, `decoder_positions`)."""
        embedded = backbone.token_embeddings(self.encoder, input_ids)  # (B, L, D)
        return torch.cat([cls_embedding, embedded[:, 1:]], dim=1)

    def decoder_positions(self, length: int, device: torch.device) -> DecoderPositions:
        """The position signal of a decoder over `length` positions, as the backbone's family gives it."""
        return self.adapter.decoder_positions(self.encoder, length, device)

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor outside the encoder's base model (MLM head, decoder), each tied tensor once; state under
        `checkpoint_only` stays in checkpoints."""
        seen = {id(p) for p in self.encoder.base_model.parameters()}
        head = {}
        for name, tensor in self.state_dict(keep_vars=True).items():
            if id(tensor) not in seen and not name.startswith(self.checkpoint_only):
                seen.add(id(tensor))
                head[name] = tensor
        return head
