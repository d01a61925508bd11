"""retromae: pre-train retrieval-oriented encoders (RetroMAE and peers), fine-tune, index, search, evaluate.

The package is also the Python API, for notebooks and scripts (no command line needed): each command's entry point
takes its config (or the config's options as keywords) and does what the command does:

    retromae.pretrain(retromae.PretrainConfig(model=..., corpus=[...], output=...))  # → the output folder
    retromae.finetune(model=..., data=..., output=...)                               # → the output folder
    retromae.encode(model=..., corpus=..., output=...)                               # → the embeddings folder
    retromae.evaluate(model=..., data=[...])                                         # → the metrics (a dict)

`retromae.objectives` are plain torch modules for a loop of one's own; `retromae.ObjectiveModule` and
`retromae.TextCollator` put one under a transformers `Trainer`. Every name is imported on first use, so
`import retromae` (and `retromae --help`) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name → "module" (the name is that module) or "module:attribute".
_PUBLIC = {
    "pretrain": "retromae.pretrain",  # a callable module (`retromae.api.CallableModule`)
    "finetune": "retromae.finetune",  # likewise
    "encode": "retromae.api:encode",
    "evaluate": "retromae.evaluation.run:evaluate",
    "PretrainConfig": "retromae.pretrain_config:PretrainConfig",
    "FinetuneConfig": "retromae.finetune.run:FinetuneConfig",
    "EncodeConfig": "retromae.commands.encode:EncodeConfig",
    "EvaluateConfig": "retromae.evaluation.config:EvaluateConfig",
    "Encoder": "retromae.encoder:Encoder",
    "objectives": "retromae.objectives",
    "ObjectiveModule": "retromae.hf_trainer:ObjectiveModule",
    "TextCollator": "retromae.hf_trainer:TextCollator",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'retromae' has no attribute {name!r}")
    module, _, attribute = _PUBLIC[name].partition(":")
    value = importlib.import_module(module)
    return getattr(value, attribute) if attribute else value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
