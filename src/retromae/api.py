"""What the public Python API needs besides the commands' own entry points (`retromae/__init__.py` lists them all).

Owns: `encode(config)`, the library side of `retromae encode`, and the public forms of the entry points whose
implementations take a config only (`evaluate`, `train_reranker`, `quickstart`).
Every entry point runs quietly (`console.quiet_by_default`). Imports no torch until called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retromae.console import quiet_by_default
from retromae.processes import process_state
from retromae.quickstart_config import QuickstartConfig
from retromae.reranker_config import RerankerConfig
from retromae.retrieval.config import EncodeConfig, read_texts


@quiet_by_default
def encode(config: Any = None, /, **options: Any) -> Path:
    """Encode a corpus or queries file into an embeddings folder as `config` (an `EncodeConfig`, or its options as
    keywords) says; returns the folder (`retrieval.encode` describes its layout)."""
    from retromae.retrieval.encode import encode_to_dir  # torch: imported on call, so `import retromae` loads none

    config = config if config is not None else EncodeConfig(**options)
    ids, texts = read_texts(config)
    prefix, max_length = config.text_options
    encoder = config.load_encoder(process_state().device)
    return encode_to_dir(encoder, ids, texts, config.output, model_name=config.model, shard_size=config.shard_size,
                         batch_size=config.batch_size, max_length=max_length, prefix=prefix,
                         show_progress=config.progress, overwrite=config.overwrite,
                         description=f"encoding {Path(config.corpus or config.queries).name} ({len(ids):,} texts)",
                         source=config.corpus or config.queries)


@quiet_by_default
def evaluate(config: Any = None, /, **options: Any) -> dict[str, Any]:
    """Evaluate a model or a run as `config` (an `EvaluateConfig`, or its options as keywords) says; returns the
    metrics (`retromae.evaluation.run.evaluate` describes them)."""
    from retromae.evaluation.run import evaluate as run_evaluation  # numpy and the search stack: only on call

    return run_evaluation(config, **options)


@quiet_by_default
def train_reranker(config: Any = None, /, **options: Any) -> Path:
    """Train a cross-encoder as `config` (a `RerankerConfig`, or its options as keywords) says; returns the output
    folder (the model in its reranker/)."""
    from retromae.reranker import train_reranker as train  # torch: only on call

    return train(config if config is not None else RerankerConfig(**options))


@quiet_by_default
def quickstart(config: Any = None, /, **options: Any) -> dict[str, dict[str, float]]:
    """The quickstart's comparison as `config` (a `QuickstartConfig`, or its options as keywords) says; returns the
    test metrics (and minutes) per model."""
    from retromae.quickstart import quickstart as run_quickstart  # torch: only on call

    return run_quickstart(config if config is not None else QuickstartConfig(**options))
