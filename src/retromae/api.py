"""The Python API: one plain function per command, each run as the command runs, quietly.

Owns the entry points `retromae/__init__.py` re-exports (`retromae.pretrain(...)`, `retromae.index(...)`, ...): each
takes its command's config, or the config's options as keywords, checks it as the command line's is before any work
(`retromae.preflight.check_config`: inputs that exist and are of the format read, model folders), hands it to the
package that runs the command and returns what that wrote (the `value` of its `runtime.console.Result`; the lines a
command prints are not printed here). Every one runs within `runtime.run_folder.quiet_entry_point`
(the libraries' own output hidden unless `library_output(True)` is around the call; the outputs released on return).
Does not own any command's work or options (each package's `run` and `config` modules) nor printing (`commands/`). The
configs imported here import no torch; each entry point imports the package that runs it when called, so `import
retromae` loads no torch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from retromae.adaptation.config import AdaptConfig
from retromae.evaluation.config import EvaluateConfig, ReportConfig
from retromae.finetuning.config import FinetuneConfig
from retromae.preflight import check_config
from retromae.pretraining.config import InitModelConfig, PretrainConfig
from retromae.reranking.config import RerankerConfig, ScoreConfig
from retromae.retrieval.config import BM25Config, EncodeConfig, IndexConfig, MineConfig, SearchConfig
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import quiet_entry_point
from retromae.workflows.config import QuickstartConfig

if TYPE_CHECKING:
    from retromae.retrieval.searcher import Hit

Function = TypeVar("Function", bound=Callable[..., Any])


def _entry_point(config_cls: type) -> Callable[[Function], Function]:
    """An entry point taking `config_cls` or its options as keywords (not both: the options would not act; a
    ConfigError naming them): the config built and checked as the command line's (`retromae.preflight.check_config`:
    its inputs and models, before any heavy import), then the function run quietly
    (`runtime.run_folder.quiet_entry_point`) on it."""

    def wrap(function: Function) -> Function:
        quiet = quiet_entry_point(function)

        @functools.wraps(function)
        def entry_point(config: Any = None, /, **options: Any) -> Any:
            if config is not None and options:
                raise ConfigError(f"{function.__name__}: given a config and options ({', '.join(options)}): give "
                                  f"the options in the config (dataclasses.replace(config, ...)), or the options alone")
            return quiet(check_config(config if config is not None else config_cls(**options)))

        return entry_point  # type: ignore[return-value]

    return wrap


@_entry_point(PretrainConfig)
def pretrain(config: PretrainConfig | None = None, /, **options: Any) -> Path:
    """Pre-train an encoder as `config` (or `PretrainConfig(**options)`) says; returns the output folder."""
    from retromae.pretraining.run import pretrain as run  # torch: only on call

    return run(config)


@_entry_point(FinetuneConfig)
def finetune(config: FinetuneConfig | None = None, /, **options: Any) -> Path:
    """Fine-tune a dense retriever as `config` (or `FinetuneConfig(**options)`) says; returns the output folder."""
    from retromae.finetuning.run import finetune as run  # torch: only on call

    return run(config)


@_entry_point(AdaptConfig)
def adapt(config: AdaptConfig | None = None, /, **options: Any) -> Path:
    """Adapt an embedder to a corpus as `config` (or `AdaptConfig(**options)`) says; returns the output folder."""
    from retromae.adaptation.run import adapt as run  # torch: only on call

    return run(config).value


@_entry_point(EncodeConfig)
def encode(config: EncodeConfig | None = None, /, **options: Any) -> Path:
    """Encode a corpus or queries file as `config` (or `EncodeConfig(**options)`) says; returns the embeddings folder
    (`retrieval.encode` describes its layout)."""
    from retromae.retrieval.run import encode as run  # torch: only on call

    return run(config).folder


@_entry_point(IndexConfig)
def index(config: IndexConfig | None = None, /, **options: Any) -> Path:
    """Index an embeddings folder as `config` (or `IndexConfig(**options)`) says; returns the index folder."""
    from retromae.retrieval.run import index as run  # numpy and faiss: only on call

    return run(config).value


@_entry_point(SearchConfig)
def search(config: SearchConfig | None = None, /, **options: Any) -> Path | list[list[Hit]]:
    """Search an index as `config` (or `SearchConfig(**options)`) says; returns the TREC run file, or with `query`
    the hits of each query."""
    from retromae.retrieval.run import search as run  # numpy, faiss and torch: only on call

    return run(config).value


@_entry_point(BM25Config)
def bm25(config: BM25Config | None = None, /, **options: Any) -> Path:
    """A BM25 run as `config` (or `BM25Config(**options)`) says; returns the TREC run file."""
    from retromae.retrieval.run import bm25 as run  # numpy and bm25s: only on call

    return run(config).value


@_entry_point(EvaluateConfig)
def evaluate(config: EvaluateConfig | None = None, /, **options: Any) -> dict[str, Any]:
    """Evaluate a model or a run as `config` (or `EvaluateConfig(**options)`) says; returns the metrics
    (`retromae.evaluation.run.evaluate` describes them)."""
    from retromae.evaluation.run import evaluate as run  # numpy and the search stack: only on call

    return run(config)


@_entry_point(MineConfig)
def mine(config: MineConfig | None = None, /, **options: Any) -> Path:
    """Mine hard negatives as `config` (or `MineConfig(**options)`) says; returns the training file written."""
    from retromae.retrieval.run import mine as run  # torch and faiss: only on call

    return run(config).value


@_entry_point(InitModelConfig)
def init_model(config: InitModelConfig | None = None, /, **options: Any) -> Path:
    """A random model and its tokenizer as `config` (or `InitModelConfig(**options)`) says; returns the model
    folder."""
    from retromae.pretraining.scratch import init_model as run  # torch: only on call

    return run(config).value


@_entry_point(RerankerConfig)
def train_reranker(config: RerankerConfig | None = None, /, **options: Any) -> Path:
    """Train a cross-encoder as `config` (or `RerankerConfig(**options)`) says; returns the output folder (the model
    in its reranker/)."""
    from retromae.reranking.run import train_reranker as run  # torch: only on call

    return run(config)


@_entry_point(ScoreConfig)
def score(config: ScoreConfig | None = None, /, **options: Any) -> Path:
    """Score a training file with a cross-encoder as `config` (or `ScoreConfig(**options)`) says; returns the training
    file written."""
    from retromae.reranking.run import score as run  # torch: only on call

    return run(config).value


@_entry_point(ReportConfig)
def report(config: ReportConfig | None = None, /, **options: Any) -> Path:
    """Gather variant folders into a report as `config` (or `ReportConfig(**options)`) says; returns the report
    folder."""
    from retromae.evaluation.experiments import report as run  # matplotlib: only on call

    return run(config).value


@_entry_point(QuickstartConfig)
def quickstart(config: QuickstartConfig | None = None, /, **options: Any) -> dict[str, dict[str, float]]:
    """The quickstart's comparison as `config` (or `QuickstartConfig(**options)`) says; returns the test metrics
    (and minutes) per model."""
    from retromae.workflows.quickstart import quickstart as run  # torch: only on call

    return run(config).value
