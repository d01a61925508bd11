"""The backbones pre-training builds and loads: the names the options offer, spelled out here without importing
torch so that `--help` stays instant.

Submodules: `registry` (the family adapters, `ADAPTERS`, and finding a model's), `base` (what every adapter
answers), one module per family (`bert`, `roberta`, `modernbert`, `deberta`), and `masked_lm` (loading a masked-LM
backbone with the attention asked for, and the handles objectives need). Adding a family is its module, its entry
in `registry.ADAPTERS` and, when `init-model` builds it, its name in `ARCHITECTURE_NAMES`.
"""

# The architectures `retromae init-model` and `retromae quickstart` build (`registry.ARCHITECTURES`), spelled out so
# that --help imports no torch (tests/test_backbones.py checks the two agree).
ARCHITECTURE_NAMES = ("bert", "roberta", "xlm-roberta", "modernbert", "deberta-v2")
ATTENTION_NAMES = ("auto", "sdpa", "flash_attention_2", "eager")  # `masked_lm.attention_implementation`
