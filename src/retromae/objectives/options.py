"""Each pre-training objective's options: a typed dataclass per objective, importing no torch.

Owns the options classes (`ObjectiveOptions` and its subclasses, one per objective that has options of its own, plus
the groups several share: `DecoderOptions`, `TemperatureOptions`, `SentencePoolingOptions`), their checks (`check`,
raising a ConfigError that names the flag) and how each is read from flat values (`from_values`: a `PretrainConfig`,
a run's saved config.json, a namespace). A field declared with `retromae.runtime.options.option` is also a flag of
`retromae pretrain` (`retromae.objectives.flat_options` turns them into its flat fields); a plain field is set by
the command that runs the objective (`retromae adapt` gives the base's pooling). Does not own the objectives
(`retromae.objectives.*`) nor which objective uses which class (the table in `retromae.objectives`).

Why a module of its own: the options must be readable without torch, so that `retromae pretrain --help` shows them
at once; the objectives themselves are torch modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from retromae.models.encoder_config import POOLINGS
from retromae.runtime.options import FRACTION, NON_NEGATIVE, OPEN_UNIT, POSITIVE, Options, option, require

DECODER_LAYERS_HELP = "decoder (or head) transformer layers"
TEMPERATURE_HELP = "similarity temperature of the contrastive loss"
# What every objective reads besides its own options (its `MaskingSettings`, its vocabulary loss), with the defaults
# `retromae pretrain` declares them with (`PretrainConfig`) and `create_objective` fills in.
RUN_DEFAULTS = {"encoder_mask_ratio": 0.3, "whole_word_mask": False, "vocabulary_loss": "auto"}


def given_value(values: Any, name: str) -> Any:
    """`values[name]` of a mapping or `values.name` of an object; None when it has no such value."""
    return values.get(name) if isinstance(values, Mapping) else getattr(values, name, None)


@dataclass(kw_only=True)
class ObjectiveOptions(Options):
    """Options of an objective that has none of its own (MLM); the base of every objective's options.

    `VARIANT`: what `variant` names (e.g. "decoding"), for the descriptions of a run; None when the objective has a
    single form."""

    VARIANT: ClassVar[str | None] = None

    @classmethod
    def from_values(cls, values: Any) -> ObjectiveOptions:
        """The options from flat values (a mapping or an object with the options as attributes); a value that is
        missing or None keeps the option's default (flat configs write None for "the objective's default")."""
        given = {field.name: given_value(values, field.name) for field in dataclasses.fields(cls) if field.init}
        return cls(**{name: value for name, value in given.items() if value is not None})

    @property
    def variant(self) -> str | None:
        """Which form of the objective runs (e.g. "enhanced", with `VARIANT` "decoding"); None for a single form."""
        return None

    def check(self) -> None:
        """Raise ConfigError, naming the flag, for combinations of options the objective cannot honour (each option's
        type and domain are checked when the options are built, `retromae.runtime.options.Options`); subclasses extend
        it."""


@dataclass(kw_only=True)
class DecoderOptions(ObjectiveOptions):
    """Options of an objective with a decoder (or a head of transformer layers)."""

    decoder_layers: int = option(1, DECODER_LAYERS_HELP, POSITIVE)


@dataclass(kw_only=True)
class TemperatureOptions(ObjectiveOptions):
    """Options of an objective with a contrastive loss (its own options, when it has no others)."""

    temperature: float = option(0.05, TEMPERATURE_HELP, POSITIVE)


@dataclass(kw_only=True)
class SentencePoolingOptions(ObjectiveOptions):
    """The sentence vector an objective trains when the caller chooses it: `retromae adapt` passes the base's
    pooling and normalisation; `retromae pretrain` has neither option ([CLS], unnormalised). The RetroMAE family
    (RetroMAE, DupMAE, RetroMAE + contrastive) conditions its decoder on that vector."""

    pooling: str = "cls"
    normalize: bool = False

    def check(self) -> None:
        super().check()
        require(self.pooling in POOLINGS, "pooling", f"must be one of {POOLINGS}")


@dataclass(kw_only=True)
class RetroMAEOptions(DecoderOptions, SentencePoolingOptions):
    """RetroMAE's decoder: basic or enhanced decoding, the share of tokens hidden from it, and the sentence vector it
    decodes from ([CLS] from `retromae pretrain`; the base's pooling from `retromae adapt`)."""

    VARIANT: ClassVar[str | None] = "decoding"

    decoding: str = option("enhanced", "RetroMAE decoding: enhanced (two-stream, all tokens; exactly one decoder "
                                       "layer) or basic", choices=("enhanced", "basic"))
    decoder_mask_ratio: float = option(0.5, "share of tokens hidden from the decoder", OPEN_UNIT)

    @property
    def variant(self) -> str:
        return self.decoding

    def check(self) -> None:
        super().check()
        require(self.decoding == "basic" or self.decoder_layers == 1, "decoder_layers",
                "enhanced decoding uses exactly one layer; pass --decoding basic for deeper decoders")


@dataclass(kw_only=True)
class DupMAEOptions(RetroMAEOptions):
    """DupMAE: RetroMAE's options plus the weight of the bag-of-words loss."""

    bow_weight: float = option(0.1, "weight of the bag-of-words loss", NON_NEGATIVE)


@dataclass(kw_only=True)
class RetroMAEContrastiveOptions(RetroMAEOptions, TemperatureOptions):
    """RetroMAE + contrastive: RetroMAE's options, the temperature and the weight of the InfoNCE term."""

    contrastive_weight: float | None = option(None, "weight of the InfoNCE term in the sum (default 1, the paper's "
                                                    "sum; 0 = RetroMAE alone on the same pairs); from random weights "
                                                    "it must be given (docs/guide.md)", NON_NEGATIVE)

    @property
    def weight(self) -> float:
        """--contrastive-weight, 1 (the paper's sum) when not given."""
        return 1.0 if self.contrastive_weight is None else self.contrastive_weight


@dataclass(kw_only=True)
class SEEDOptions(DecoderOptions):
    """SEED-Encoder's weak decoder: 3 layers, each position attending to the previous k tokens."""

    decoder_layers: int = option(3, DECODER_LAYERS_HELP, POSITIVE)
    attention_window: int = option(2, "the decoder attends to this many previous tokens (plus [CLS])", POSITIVE)


@dataclass(kw_only=True)
class CondenserOptions(DecoderOptions):
    """Condenser's head: 2 layers over the last layer's [CLS] and an early layer's token states."""

    decoder_layers: int = option(2, DECODER_LAYERS_HELP, POSITIVE)
    skip_from: int | None = option(None, "the layer whose token states the head reads (default: half the depth, "
                                         "6 of 12)", POSITIVE)


@dataclass(kw_only=True)
class CoCondenserOptions(CondenserOptions, TemperatureOptions):
    """coCondenser: Condenser's head, and raw dot products (temperature 1) between spans."""

    temperature: float = option(1.0, TEMPERATURE_HELP, POSITIVE)


@dataclass(kw_only=True)
class ContrieverOptions(TemperatureOptions):
    """Contriever: the momentum encoder and the queue of MoCo."""

    momentum: float = option(0.9995, "momentum of the key encoder's moving average", FRACTION)
    queue_size: int = option(131_072, "keys kept in the MoCo queue as negatives", POSITIVE)


@dataclass(kw_only=True)
class SimCSEOptions(TemperatureOptions):
    """SimCSE: supervised (given triples) or unsupervised (dropout views of a block), as the data says."""

    supervised: bool = False

    @classmethod
    def from_values(cls, values: Any) -> SimCSEOptions:
        options = super().from_values(values)
        if given_value(values, "supervised") is None:  # a run's config: supervised exactly when it reads --pairs
            options.supervised = given_value(values, "pairs") is not None
        return options


@dataclass(kw_only=True)
class CroppingOptions(TemperatureOptions, SentencePoolingOptions):
    """Cropping: the temperature, and the sentence vector the encoder is used with."""


@dataclass(kw_only=True)
class TSDAEOptions(DecoderOptions, SentencePoolingOptions):
    """TSDAE: its decoder, the sentence vector it decodes from and the deletion noise (the reference's 0.6)."""

    deletion_ratio: float = 0.6

    def check(self) -> None:
        super().check()
        require(0 <= self.deletion_ratio < 1, "deletion_ratio", "must lie in [0, 1)")
