"""Evaluation: ranking metrics over run/qrels dicts, STS correlations, result tables and JSON reports, the table of
many data sets (`evaluation.table`), `retromae evaluate` itself (`evaluation.config`, `evaluation.run`), a BEIR
folder as an mteb task (`evaluation.mteb_task`) and the retrieval probes run while pre-training (`evaluation.probe`).

Owns: metric definitions and reporting. Only `run` and `probe` use a model, through `retromae.retrieval`; this
package's top level imports no torch. Does not own encoding or search (see `retromae.retrieval`), nor reading data
files (see `retromae.data.retrieval_sets`).
"""

from retromae.evaluation.metrics import METRICS, evaluate_run
from retromae.evaluation.report import format_table, print_results, save_results
from retromae.evaluation.sts import sts_correlations

__all__ = ["METRICS", "evaluate_run", "format_table", "print_results", "save_results", "sts_correlations"]
