"""Evaluation: ranking metrics over run/qrels dicts, STS correlations, result tables and JSON reports, and the
retrieval probes run while pre-training (`evaluation.probe`, which alone here uses a model, through `retrieval`).

Owns: metric definitions and reporting. Does not own: models, torch, encoding or search (see `retromae.retrieval`),
nor reading data files (see `retromae.data.retrieval_sets`).
"""

from retromae.evaluation.metrics import METRICS, evaluate_run
from retromae.evaluation.report import format_table, print_results, save_results
from retromae.evaluation.sts import sts_correlations

__all__ = ["METRICS", "evaluate_run", "format_table", "print_results", "save_results", "sts_correlations"]
