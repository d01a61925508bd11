"""`retromae evaluate`: score a model or a TREC run on a retrieval set (BEIR / MS MARCO) or STS pairs.

Thin: parse → `EvaluateConfig` → dense search (`retrieval.search`) or a run file → `evaluation.metrics`, or
encode STS pairs → `evaluation.sts`; results as a console table and, with --output, a JSON file with keys such
as ndcg@10, mrr@10, recall@100, spearman.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import ConfigError, add_config_arguments, build_config, option, require
from retromae.encoder_config import EncoderOptions
from retromae.run_folder import OutputOptions, claim_file

HELP = "Evaluate a model or a run: NDCG/MRR/Recall/MAP/P@k on BEIR or MS MARCO, Pearson/Spearman on STS"
TASKS = ("auto", "retrieval", "sts")


@dataclasses.dataclass(kw_only=True)
class EvaluateConfig(OutputOptions, EncoderOptions):
    model: str | None = option(None, "model to evaluate (our export, sentence-transformers folder, HF encoder)",
                               required_unless="--run")
    run: Path | None = option(None, "TREC run file to evaluate instead of a model (retrieval only)",
                              required_unless="--model")
    data: Path = option(help="BEIR folder, MS MARCO folder (collection.tsv, queries.tsv, qrels), or STS pairs "
                             "(an STS Benchmark file, or its folder holding sts-{split}.csv)")
    split: str = option("test", "split: qrels/{split}.tsv, qrels.{split}.tsv or sts-{split}.csv")
    task: str = option("auto", "retrieval or sts; auto: sts for a file or a folder holding sts-{split}.csv",
                       choices=TASKS)
    k_values: list[int] = option([10, 100], "cut-offs k of NDCG@k, MRR@k, Recall@k, MAP@k, P@k")
    top_k: int | None = option(None, "documents retrieved per query; default: the largest of --k-values")
    per_query: bool = option(False, "also report every query's scores (in the --output JSON)")
    output: Path | None = option(None, "JSON file for the results")
    save_run: Path | None = option(None, "also write the model's run as a TREC run file")
    query_prefix: str = option("", "text put before every query, e.g. 'query: '")
    passage_prefix: str = option("", "text put before every passage, e.g. 'passage: '")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own")
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own")
    factory: str = option("Flat", "faiss index factory string for the dense search")
    params: str = option("", "faiss search parameters, e.g. efSearch=128")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(all(k > 0 for k in self.k_values), "k_values", "must be positive")
        require(self.top_k is None or self.top_k > 0, "top_k", "must be positive")
        if (self.model is None) == (self.run is None):
            raise ConfigError("--model: give either --model or --run")


def sts_file(config: EvaluateConfig) -> Path | None:
    """The STS pairs file the config points at, or None for a retrieval evaluation."""
    data = Path(config.data)
    candidate = data / f"sts-{config.split}.csv" if data.is_dir() else data
    if config.task == "sts" or (config.task == "auto" and candidate.is_file()):
        return candidate
    return None


def evaluate_sts(config: EvaluateConfig, path: Path) -> dict[str, Any]:
    from retromae.data.retrieval_sets import load_sts_pairs
    from retromae.evaluation import sts_correlations

    require(config.model is not None, "model", "STS evaluation needs a model (a run has no similarities)")
    first, second, gold = load_sts_pairs(path)
    encoder = config.load_encoder()
    options = {"batch_size": config.batch_size}
    return sts_correlations(encoder.encode(first, **options), encoder.encode(second, **options), gold)


def model_run(config: EvaluateConfig, corpus: dict[str, str], queries: dict[str, str]) -> dict[str, dict[str, float]]:
    from retromae.retrieval.search import TextOptions, dense_search

    encoder = config.load_encoder()
    return dense_search(encoder, corpus, queries, config.top_k or max(config.k_values),
                        passages=TextOptions(config.passage_prefix, config.passage_max_length),
                        questions=TextOptions(config.query_prefix, config.query_max_length),
                        batch_size=config.batch_size, factory=config.factory, params=config.params)


def evaluate_retrieval(config: EvaluateConfig) -> tuple[dict[str, Any], dict[str, Any] | None]:
    from retromae.data.retrieval_sets import load_retrieval_set, read_trec_run, write_trec_run
    from retromae.evaluation import evaluate_run

    data = load_retrieval_set(config.data, config.split)
    if config.run is not None:
        run = read_trec_run(config.run)
    else:
        run = model_run(config, data.corpus_texts(), data.queries)
    if config.save_run is not None:
        write_trec_run(run, config.save_run)
    if config.per_query:
        return evaluate_run(data.qrels, run, config.k_values, per_query=True)
    return evaluate_run(data.qrels, run, config.k_values), None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EvaluateConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.evaluation import print_results, save_results

    config = build_config(EvaluateConfig, args)
    claim_file(config.output, config.overwrite)
    claim_file(config.save_run, config.overwrite, "save_run")
    path = sts_file(config)
    per_query = None
    if path is not None:
        results = evaluate_sts(config, path)
    else:
        results, per_query = evaluate_retrieval(config)
    source = config.model or str(config.run)
    print_results(results, title=f"{source} on {config.data} ({config.split})")
    if config.output is not None:
        extra = {"per_query": per_query} if per_query is not None else {}
        save_results({**results, "source": source, "data": str(config.data), "split": config.split, **extra},
                     config.output)
    return 0
