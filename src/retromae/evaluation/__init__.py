"""Evaluation: ranking metrics over run/qrels dicts, STS correlations, result tables and JSON reports, the table of
many data sets (`evaluation.table`), `retromae evaluate` itself (`evaluation.config`, `evaluation.run`), a BEIR
folder as an mteb task (`evaluation.mteb_task`) and the retrieval probes run while pre-training (`evaluation.probe`).

Owns: metric definitions (one registry, `evaluation.metric_registry`) and reporting. Only `run` and `probe` use a
model, through `retromae.retrieval`; this package's top level imports nothing: its names are imported when first
used, so that `retromae evaluate --help` (whose options live in `evaluation.config`) loads neither numpy nor scipy.
Does not own encoding or search (see `retromae.retrieval`), nor reading data files (see
`retromae.data.retrieval_sets`).
"""

from __future__ import annotations

import importlib
from typing import Any

_REGISTRY = "retromae.evaluation.metric_registry"
_EXPORTS = {"METRICS": _REGISTRY, "CorrelationMetric": _REGISTRY, "RankingMetric": _REGISTRY, "register": _REGISTRY,
            "evaluate_run": "retromae.evaluation.metrics",
            "format_table": "retromae.evaluation.report", "print_results": "retromae.evaluation.report",
            "save_results": "retromae.evaluation.report", "sts_correlations": "retromae.evaluation.sts"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retromae.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
