"""Pre-training data: read corpora, tokenise them once into a memory-mapped token store, collate blocks.

Owns: `corpus` (formats → documents), `token_store` (documents → packed, cached blocks), `collate`
(blocks → padded tensors), `long_texts` (what a tokenizer reads of a text a model truncates), `ranking` (the one
order of a ranking: score, then document id, as trec_eval), and the readers of retrieval sets and training files.
Reading lines and JSON files with errors that name them is `retromae.runtime.lines`. No model code and no masking.
Names are imported lazily, so that `retromae.data.corpus` can be used without importing torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BlockCollator": "retromae.data.collate",
    "BlockDataset": "retromae.data.collate",
    "Document": "retromae.data.corpus",
    "iter_corpus": "retromae.data.corpus",
    "iter_documents": "retromae.data.corpus",
    "TokenStore": "retromae.data.token_store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retromae.data' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
