"""The backbones pre-training builds and loads: the names the options offer, read from the family table without
importing torch so that `--help` stays instant.

Submodules: `families` (the torch-free table of families, `FAMILIES`: names, model types, tokenizer kinds, where
each adapter lives), `registry` (the family adapters, imported from the table when a model needs one, and finding
a model's), `base` (what every adapter answers), and one adapter module per family (the table names each). Loading a
masked-LM backbone with the attention asked for, and the handles objectives need, is `retromae.models.masked_lm`.
Adding a family is its adapter module and one entry in `families.FAMILIES`.
"""

from retromae.backbones.families import architecture_names

ATTENTION_NAMES = ("auto", "sdpa", "flash_attention_2", "eager")  # `masked_lm.attention_implementation`


def __getattr__(name: str) -> tuple[str, ...]:
    """`ARCHITECTURE_NAMES`: the architectures `retromae init-model` and `retromae quickstart` build, read from the
    family table when asked (not when this package is imported), so that an entry added to it is offered too."""
    if name == "ARCHITECTURE_NAMES":
        return architecture_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
