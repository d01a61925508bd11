"""retromae: pre-train retrieval-oriented encoders (RetroMAE and peers), fine-tune, index, search, evaluate.

The package is also the Python API, for notebooks and scripts (no command line needed): every command has an entry
point of its name (`init-model` is `init_model`) that takes its config (or the config's options as keywords),
does what the command does and returns what it wrote:

    retromae.pretrain(retromae.PretrainConfig(model=..., corpus=[...], output=...))  # → the output folder
    retromae.finetune(model=..., data=..., output=...)                               # → the output folder
    retromae.encode(model=..., corpus=..., output=...)                               # → the embeddings folder
    retromae.index(embeddings=..., output=...)                                       # → the index folder
    retromae.search(index=..., queries=..., output=...)                              # → the TREC run file
    retromae.Searcher.load(index).search("text", k=10)                               # → a list of retromae.Hit
    retromae.bm25(data=..., output=...)                                              # → the TREC run file
    retromae.evaluate(model=..., data=[...])                                         # → the metrics (a dict)
    retromae.mine(model=..., data=..., output=...)                                   # → the training file
    retromae.adapt(model=..., corpus=[...], output=...)                              # → the output folder
    # also: init_model, train_reranker, score, report, quickstart, and each command's config class

Like the CLI, an entry point (and `retromae.Encoder.load` and `.save`) keeps the libraries' own output
(transformers' load reports and bars, hub retries) quiet; `with library_output(True):`
(`from retromae.console import library_output`) around a call shows it, as `--verbose` does.
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
    "pretrain": "retromae.pretraining.run",  # a callable module (`retromae.callable_module.CallableModule`)
    "finetune": "retromae.finetune",  # likewise
    "encode": "retromae.api:encode",
    "index": "retromae.commands.index:index",
    "search": "retromae.commands.search:search",
    "bm25": "retromae.commands.bm25:bm25",
    "evaluate": "retromae.api:evaluate",
    "mine": "retromae.commands.mine:mine",
    "init_model": "retromae.commands.init_model:init_model",
    "train_reranker": "retromae.api:train_reranker",
    "score": "retromae.commands.score:score",
    "report": "retromae.commands.report:report",
    "quickstart": "retromae.quickstart",  # a callable module, as pretrain
    "adapt": "retromae.adapt",  # a callable package, as finetune
    "PretrainConfig": "retromae.pretraining.config:PretrainConfig",
    "FinetuneConfig": "retromae.finetune.run:FinetuneConfig",
    "EncodeConfig": "retromae.retrieval.config:EncodeConfig",
    "IndexConfig": "retromae.commands.index:IndexConfig",
    "SearchConfig": "retromae.commands.search:SearchConfig",
    "BM25Config": "retromae.commands.bm25:BM25Config",
    "EvaluateConfig": "retromae.evaluation.config:EvaluateConfig",
    "MineConfig": "retromae.commands.mine:MineConfig",
    "InitModelConfig": "retromae.commands.init_model:InitModelConfig",
    "RerankerConfig": "retromae.reranker_config:RerankerConfig",
    "ScoreConfig": "retromae.commands.score:ScoreConfig",
    "ReportConfig": "retromae.commands.report:ReportConfig",
    "QuickstartConfig": "retromae.quickstart_config:QuickstartConfig",
    "AdaptConfig": "retromae.adapt.config:AdaptConfig",
    "Encoder": "retromae.encoder:Encoder",
    "Searcher": "retromae.retrieval.searcher:Searcher",
    "Hit": "retromae.retrieval.searcher:Hit",
    "objectives": "retromae.objectives",
    "ObjectiveModule": "retromae.pretraining.hf_trainer:ObjectiveModule",
    "TextCollator": "retromae.pretraining.hf_trainer:TextCollator",
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
