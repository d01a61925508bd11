"""What the public Python API needs besides the commands' own entry points (`retromae/__init__.py` lists them all).

Owns: `CallableModule`, which lets `retromae.pretrain(...)` and `retromae.finetune(...)` be called although
`retromae.pretrain` and `retromae.finetune` are also the modules that implement them (a submodule, once imported,
is the package attribute of its name), and `encode(config)`, the library side of `retromae encode`. Imports no
torch until called.
"""

from __future__ import annotations

import importlib
import types
from pathlib import Path
from typing import Any


class CallableModule(types.ModuleType):
    """A module that runs its `__entry__` ("module:function") when called, e.g. `retromae.pretrain(config)`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, function = self.__entry__.partition(":")
        return getattr(importlib.import_module(module), function)(*args, **kwargs)


def encode(config: Any = None, /, **options: Any) -> Path:
    """Encode a corpus or queries file into an embeddings folder as `config` (an `EncodeConfig`, or its options as
    keywords) says; returns the folder (`retrieval.encode` describes its layout)."""
    from retromae.commands.encode import EncodeConfig, read_texts
    from retromae.processes import process_state
    from retromae.retrieval.encode import encode_to_dir

    config = config if config is not None else EncodeConfig(**options)
    ids, texts = read_texts(config)
    prefix, max_length = config.text_options
    encoder = config.load_encoder(process_state().device)
    return encode_to_dir(encoder, ids, texts, config.output, model_name=config.model, shard_size=config.shard_size,
                         batch_size=config.batch_size, max_length=max_length, prefix=prefix,
                         show_progress=config.progress, overwrite=config.overwrite,
                         description=f"encoding {Path(config.corpus or config.queries).name} ({len(ids):,} texts)")
