"""The backbone families pre-training knows, described without importing torch: one entry each in `FAMILIES`.

Owns `BackboneFamily` (how messages name a family, the model types its adapter serves, the architectures
`retromae init-model` builds with the tokenizer kind each trains, the special tokens' style, the longest input of
a model built from scratch, and where its adapter class lives as "module:Class"), `FAMILIES`, looking an entry up
by architecture or model type, and the texts that options and messages derive from the table, so that no help
string lists families by hand. Everything that names, offers or builds a family reads this table: the options of
`init-model`, `quickstart` and `pretrain`, `retromae.pretraining.scratch`, and the adapter registry
(`retromae.backbones.registry`, which imports an adapter only when a model of its family is loaded or built).
Adding a family is its adapter module and one entry here. Does not own what an adapter answers
(`retromae.backbones.base`) or the tokenizer kinds (`retromae.models.tokenizer_training.KINDS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from retromae.runtime.errors import ModelLoadError

DEFAULT_MAX_POSITIONS = 512  # the longest input of a model built from scratch, unless its family says otherwise
DEBERTA_POSITION_BUCKETS = 256  # the relative positions' log buckets of a DeBERTa built from scratch (v3's)
Sizes = Callable[[int, int, int, int], int]  # (vocabulary, hidden size, layers, positions) → parameters


def bert_parameters(vocab: int, hidden: int, layers: int, positions: int, token_types: int = 2) -> int:
    """The parameters of the BERT-shaped masked LM `init-model` builds (`BertAdapter.scratch_config`): token,
    position and token-type embeddings and their LayerNorm; per layer the four attention projections and a
    feed-forward of 4·hidden with their biases and two LayerNorms (12·hidden² + 13·hidden); the head's transform,
    its LayerNorm and the vocabulary's bias (the projection is the tied word embeddings)."""
    layer = 12 * hidden * hidden + 13 * hidden
    return (vocab + positions + token_types + 2) * hidden + layers * layer + hidden * hidden + 3 * hidden + vocab


def roberta_parameters(vocab: int, hidden: int, layers: int, positions: int) -> int:
    """BERT's shape with one token type and the position table's padding offset (RoBERTa's positions start after
    its <pad>, id 1: two rows more)."""
    return bert_parameters(vocab, hidden, layers, positions + 2, token_types=1)


def deberta_parameters(vocab: int, hidden: int, layers: int, positions: int) -> int:
    """DeBERTa-v3's shape (`DebertaV2Adapter.scratch_config`): BERT's without absolute positions nor token types,
    plus the relative positions' table (two rows a bucket) and its LayerNorm; `positions` builds nothing."""
    return bert_parameters(vocab, hidden, layers, 0, token_types=0) + (2 * DEBERTA_POSITION_BUCKETS + 2) * hidden


def modernbert_parameters(vocab: int, hidden: int, layers: int, positions: int) -> int:
    """ModernBERT's shape (`ModernBertAdapter.scratch_config`), no biases nor position table (rotary): the word
    embeddings and their norm; per layer the fused query-key-value and output projections, a GLU feed-forward of
    3·hidden/2 and two norms (the first layer's attention norm is none); the final norm, the head's dense layer and
    norm, the vocabulary's bias (the projection tied); `positions` builds nothing."""
    intermediate = 3 * hidden // 2
    layer = 4 * hidden * hidden + 3 * intermediate * hidden + 2 * hidden
    return vocab * hidden + layers * layer + hidden * hidden + 2 * hidden + vocab


# eq=False: an entry is itself (hashed by identity), so that the registry can keep one adapter per entry.
@dataclass(frozen=True, eq=False)
class BackboneFamily:
    """One backbone family: what it is called, which checkpoints it reads, what `init-model` builds of it."""

    title: str  # how messages and help name it, e.g. "RoBERTa/XLM-R"
    adapter: str  # "module:Class" of its `retromae.backbones.base.BackboneAdapter` subclass
    model_types: tuple[str, ...]  # the `config.model_type` values its adapter serves
    # architecture name (`retromae init-model --architecture`) → the tokenizer kind it trains (`tokenizer_training`)
    architectures: Mapping[str, str] = field(default_factory=dict)
    # Whether it names its special tokens <s>, </s>, <pad>, <mask> (RoBERTa's style) rather than [CLS], ...
    angle_tokens: bool = False
    max_positions: int = DEFAULT_MAX_POSITIONS  # the longest input of a model `init-model` builds
    parameters: Sizes = bert_parameters  # the parameters of the masked LM `init-model` builds of a size


FAMILIES: dict[str, BackboneFamily] = {
    "bert": BackboneFamily("BERT", "retromae.backbones.bert:BertAdapter", ("bert",), {"bert": "wordpiece"}),
    "roberta": BackboneFamily("RoBERTa/XLM-R", "retromae.backbones.roberta:RobertaAdapter",
                              ("roberta", "xlm-roberta", "camembert"),
                              {"roberta": "byte-level-bpe", "xlm-roberta": "unigram"}, angle_tokens=True,
                              parameters=roberta_parameters),
    "modernbert": BackboneFamily("ModernBERT", "retromae.backbones.modernbert:ModernBertAdapter", ("modernbert",),
                                 {"modernbert": "byte-level-bpe"}, max_positions=8192,
                                 parameters=modernbert_parameters),
    "deberta": BackboneFamily("DeBERTa-v2/v3", "retromae.backbones.deberta:DebertaV2Adapter", ("deberta-v2",),
                              {"deberta-v2": "unigram"}, parameters=deberta_parameters),
}


def architecture_names() -> tuple[str, ...]:
    """Every architecture `init-model` builds, in table order: bert, roberta, xlm-roberta, modernbert, deberta-v2."""
    return tuple(name for family in FAMILIES.values() for name in family.architectures)


def family_building(architecture: str) -> BackboneFamily:
    """The family that builds `architecture` (an `init-model --architecture` name); a ModelLoadError naming the
    choices else."""
    found = next((family for family in FAMILIES.values() if architecture in family.architectures), None)
    if found is None:
        raise ModelLoadError(f"unknown architecture {architecture!r}; choose from {', '.join(architecture_names())}")
    return found


def family_reading(model_type: str) -> BackboneFamily | None:
    """The family whose adapter serves checkpoints of `model_type`, None when none does."""
    return next((family for family in FAMILIES.values() if model_type in family.model_types), None)


def supported_families() -> str:
    """The families and their model types, e.g. "BERT (bert), ModernBERT (modernbert)"."""
    return ", ".join(f"{family.title} ({', '.join(family.model_types)})" for family in FAMILIES.values())


def family_titles() -> str:
    """The families by name, e.g. "BERT, RoBERTa/XLM-R, ModernBERT, DeBERTa-v2/v3" (for help texts)."""
    return ", ".join(family.title for family in FAMILIES.values())


def tokenizer_kinds_help() -> str:
    """Which architectures train which tokenizer kind, e.g. "bert: wordpiece; roberta, modernbert: byte-level-bpe"."""
    by_kind: dict[str, list[str]] = {}
    for family in FAMILIES.values():
        for name, kind in family.architectures.items():
            by_kind.setdefault(kind, []).append(name)
    return "; ".join(f"{', '.join(names)}: {kind}" for kind, names in by_kind.items())


def max_positions_help() -> str:
    """The longest input of a model built from scratch, e.g. "default 512; 8192 for modernbert"."""
    by_length: dict[int, list[str]] = {}
    for family in FAMILIES.values():
        if family.max_positions != DEFAULT_MAX_POSITIONS:
            by_length.setdefault(family.max_positions, []).extend(family.architectures)
    return "; ".join([f"default {DEFAULT_MAX_POSITIONS}",
                      *(f"{length} for {', '.join(names)}" for length, names in by_length.items() if names)])
