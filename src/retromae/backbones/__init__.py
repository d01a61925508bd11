"""The backbones pre-training builds and loads: the names the options offer, read from the family table without
importing torch so that `--help` stays instant.

Submodules: `families` (the torch-free table of families, `FAMILIES`: names, model types, tokenizer kinds, where
each adapter lives), `registry` (the family adapters, imported from the table when a model needs one, and finding
a model's), `base` (what every adapter answers), one adapter module per family (`bert`, `roberta`, `modernbert`,
`deberta`), and `masked_lm` (loading a masked-LM backbone with the attention asked for, and the handles objectives
need). Adding a family is its adapter module and one entry in `families.FAMILIES`.
"""

from retromae.backbones.families import architecture_names

# The architectures `retromae init-model` and `retromae quickstart` build, as the options offer them.
ARCHITECTURE_NAMES = architecture_names()
ATTENTION_NAMES = ("auto", "sdpa", "flash_attention_2", "eager")  # `masked_lm.attention_implementation`
