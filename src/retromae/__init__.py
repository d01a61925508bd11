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
(`from retromae.runtime.console import library_output`) around a call shows it, as `--verbose` does.
`retromae.objectives` are plain torch modules for a loop of one's own; `retromae.ObjectiveModule` and
`retromae.TextCollator` put one under a transformers `Trainer`. Every name is imported on first use, so
`import retromae` (and `retromae --help`) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name → "module:attribute": the entry points are `retromae.api`'s functions, the configs their packages'.
_ENTRY_POINTS = ("pretrain", "finetune", "encode", "index", "search", "bm25", "evaluate", "mine", "init_model",
                 "train_reranker", "score", "report", "quickstart", "adapt")
_PUBLIC = {
    **{name: f"retromae.api:{name}" for name in _ENTRY_POINTS},
    "PretrainConfig": "retromae.pretraining.config:PretrainConfig",
    "FinetuneConfig": "retromae.finetuning.config:FinetuneConfig",
    "EncodeConfig": "retromae.retrieval.config:EncodeConfig",
    "IndexConfig": "retromae.retrieval.config:IndexConfig",
    "SearchConfig": "retromae.retrieval.config:SearchConfig",
    "BM25Config": "retromae.retrieval.config:BM25Config",
    "EvaluateConfig": "retromae.evaluation.config:EvaluateConfig",
    "MineConfig": "retromae.retrieval.config:MineConfig",
    "InitModelConfig": "retromae.pretraining.config:InitModelConfig",
    "RerankerConfig": "retromae.reranking.config:RerankerConfig",
    "ScoreConfig": "retromae.reranking.config:ScoreConfig",
    "ReportConfig": "retromae.evaluation.config:ReportConfig",
    "QuickstartConfig": "retromae.workflows.config:QuickstartConfig",
    "AdaptConfig": "retromae.adaptation.config:AdaptConfig",
    "Encoder": "retromae.models.encoder:Encoder",
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
    if module != "retromae.api" and not module.endswith(".config"):  # it imports huggingface_hub, which splits
        from retromae.preflight import check_network_settings  # $HF_ENDPOINT as it loads: a malformed one named first

        check_network_settings()
    value = importlib.import_module(module)
    return getattr(value, attribute) if attribute else value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
