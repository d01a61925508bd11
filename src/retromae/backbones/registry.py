"""The backbone adapters, one per family of the table `retromae.backbones.families.FAMILIES`, and finding a model's.

Every objective asks `adapter_for(model)` (where the MLM head is, how positions enter a decoder, how to run the
body, the longest input) instead of reaching into `model.bert` or `model.model`; `retromae init-model` asks
`architecture_adapter(name)` for a scratch config. An adapter class is imported from its table entry's
"module:Class" the first time a model of its family is loaded or built, so the table stays free of torch and
adding a family touches no import list here.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping

from transformers import PretrainedConfig, PreTrainedModel

from retromae.backbones.base import BackboneAdapter, DecoderPositions, head_candidates
from retromae.backbones.families import (
    BackboneFamily,
    architecture_names,
    family_building,
    family_reading,
    supported_families,
)
from retromae.runtime.errors import ModelLoadError

__all__ = ["ARCHITECTURES", "BackboneAdapter", "DecoderPositions", "adapter_for", "architecture_adapter",
           "find_adapter", "supported_families"]


@functools.cache
def family_adapter(family: BackboneFamily) -> BackboneAdapter:
    """The adapter of a table entry, its class imported from the entry's "module:Class" (once per entry)."""
    module_name, _, class_name = family.adapter.partition(":")
    try:
        adapter_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ModelLoadError(f"backbone family {family.title}: no adapter class {family.adapter} ({error})") from error
    if not (isinstance(adapter_class, type) and issubclass(adapter_class, BackboneAdapter)):
        raise ModelLoadError(f"backbone family {family.title}: {family.adapter} is not a BackboneAdapter")
    return adapter_class(family)


def find_adapter(config: PretrainedConfig) -> BackboneAdapter | None:
    """The adapter of a model config's family, or None when no adapter knows its model type."""
    family = family_reading(config.model_type)
    return None if family is None else family_adapter(family)


def adapter_for(model: PreTrainedModel) -> BackboneAdapter:
    """The adapter of `model`'s family; a ModelLoadError naming what is missing and the supported families else."""
    adapter = find_adapter(model.config)
    if adapter is None:
        raise ModelLoadError(f"{type(model).__name__} (model type {model.config.model_type!r}): no backbone adapter "
                             f"knows this architecture, so pre-training cannot tell {_what_is_missing(model)}; "
                             f"supported families: {supported_families()} (a new family is one adapter in "
                             "retromae/backbones and its entry in retromae/backbones/families.py)")
    return adapter


def architecture_adapter(architecture: str) -> BackboneAdapter:
    """The adapter that builds `architecture` (an `init-model --architecture` name)."""
    return family_adapter(family_building(architecture))


class _Architectures(Mapping[str, BackboneAdapter]):
    """`init-model`'s architecture names → the adapters that build them, read from the family table when asked."""

    def __getitem__(self, architecture: str) -> BackboneAdapter:
        if architecture not in architecture_names():
            raise KeyError(architecture)
        return architecture_adapter(architecture)

    def __iter__(self) -> Iterator[str]:
        return iter(architecture_names())

    def __len__(self) -> int:
        return len(architecture_names())


ARCHITECTURES: Mapping[str, BackboneAdapter] = _Architectures()


def _what_is_missing(model: PreTrainedModel) -> str:
    """Which of the answers a BERT-shaped model gives this one lacks: a single MLM head module, a position table."""
    heads = head_candidates(model)
    table = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
    missing = [] if len(heads) == 1 else [f"where its MLM head is ({len(heads)} modules beside the base model)"]
    if table is None:
        missing.append("how positions enter a decoder (no absolute position table)")
    return " and ".join(missing) or "where its MLM head is and how positions enter a decoder"
