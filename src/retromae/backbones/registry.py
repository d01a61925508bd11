"""The backbone families pre-training knows, one adapter module each, and the registry that finds a model's.

Every objective asks `adapter_for(model)` (where the MLM head is, how positions enter a decoder, how to run the
body, the longest input) instead of reaching into `model.bert` or `model.model`; `retromae init-model` asks
`architecture_adapter(name)` for a scratch config and the tokenizer kind of a family. Adding a family means adding
its module and one entry in `ADAPTERS`.
"""

from __future__ import annotations

from transformers import PretrainedConfig, PreTrainedModel

from retromae.backbones.base import BackboneAdapter, DecoderPositions, head_candidates
from retromae.backbones.bert import BertAdapter
from retromae.backbones.deberta import DebertaV2Adapter
from retromae.backbones.modernbert import ModernBertAdapter
from retromae.backbones.roberta import RobertaAdapter
from retromae.errors import ModelLoadError

ADAPTERS: tuple[BackboneAdapter, ...] = (BertAdapter(), RobertaAdapter(), ModernBertAdapter(), DebertaV2Adapter())
ARCHITECTURES: dict[str, BackboneAdapter] = {name: adapter for adapter in ADAPTERS for name in adapter.architectures}

__all__ = ["ADAPTERS", "ARCHITECTURES", "BackboneAdapter", "DecoderPositions", "adapter_for", "architecture_adapter",
           "find_adapter", "supported_families"]


def find_adapter(config: PretrainedConfig) -> BackboneAdapter | None:
    """The adapter of a model config's family, or None when no adapter knows its model type."""
    return next((adapter for adapter in ADAPTERS if config.model_type in adapter.model_types), None)


def adapter_for(model: PreTrainedModel) -> BackboneAdapter:
    """The adapter of `model`'s family; a ModelLoadError naming what is missing and the supported families else."""
    adapter = find_adapter(model.config)
    if adapter is None:
        raise ModelLoadError(f"{type(model).__name__} (model type {model.config.model_type!r}): no backbone adapter "
                             f"knows this architecture, so pre-training cannot tell {_what_is_missing(model)}; "
                             f"supported families: {supported_families()} (a new family is one adapter in "
                             "retromae/backbones)")
    return adapter


def architecture_adapter(architecture: str) -> BackboneAdapter:
    """The adapter that builds `architecture` (an `init-model --architecture` name)."""
    if architecture not in ARCHITECTURES:
        raise ModelLoadError(f"unknown architecture {architecture!r}; choose from {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[architecture]


def supported_families() -> str:
    """The families and their model types, e.g. "BERT (bert), ModernBERT (modernbert)"."""
    return ", ".join(f"{adapter.family} ({', '.join(adapter.model_types)})" for adapter in ADAPTERS)


def _what_is_missing(model: PreTrainedModel) -> str:
    """Which of the answers a BERT-shaped model gives this one lacks: a single MLM head module, a position table."""
    heads = head_candidates(model)
    table = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
    missing = [] if len(heads) == 1 else [f"where its MLM head is ({len(heads)} modules beside the base model)"]
    if table is None:
        missing.append("how positions enter a decoder (no absolute position table)")
    return " and ".join(missing) or "where its MLM head is and how positions enter a decoder"
