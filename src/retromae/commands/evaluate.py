"""`retromae evaluate`: score a model or a TREC run on retrieval sets (BEIR / MS MARCO) or STS pairs.

Thin: parse → `EvaluateConfig` → `evaluation.run.evaluate`. One data set: a console table of every metric and,
with --output FILE.json, a JSON file with keys such as ndcg@10, mrr@10, recall@100, spearman. Several data sets or
models, --bm25, --hybrid (or an --output folder): one Markdown table, a row per data set and their average, a column
group per system (each model under its name, `evaluation.names`), then the paired comparison of two systems, with
results.md/.csv/.json/.png, per-query.json and every system's run (runs/SET/SYSTEM.trec) in the folder.
"""

from __future__ import annotations

import argparse

from retromae.evaluation.config import EvaluateConfig
from retromae.evaluation.metric_registry import CORRELATION, RANKING, metrics
from retromae.preflight import configured
from retromae.runtime.console import given, out
from retromae.runtime.options import add_config_arguments

HELP = (f"evaluate a model or a run: {'/'.join(metric.long_title for metric in metrics(RANKING))}@k on BEIR or "
        f"MS MARCO (one table over many data sets and models, BM25 and the hybrid beside, a paired test), "
        f"{'/'.join(metric.long_title for metric in metrics(CORRELATION))} on STS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EvaluateConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(EvaluateConfig, args)  # first: a wrong option, file or hub name answered before torch
    # numpy and the search stack: only when the command runs, so --help stays instant
    from retromae.evaluation.report import format_table
    from retromae.evaluation.run import evaluate

    results = evaluate(config)
    source = config.source()  # the models' names (`evaluation.names`), not their paths
    if "table" in results:
        out(f"\n{given(source)} ({config.split} split)\n\n{results['table']}", end="")
        if config.report_folder is not None:
            out(f"\nresults.md, results.csv, results.json, results.png, per-query.json, runs/SET/SYSTEM.trec: "
                f"{given(config.report_folder)}")
        return 0
    shown = {key: value for key, value in results.items() if key != "per_query"}
    out(format_table(shown, title=f"{given(source)} on {given(config.data[0])} ({config.split})"))
    return 0
