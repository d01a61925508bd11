"""`retromae train-reranker`: train a cross-encoder on queries with mined negatives (a distillation teacher)."""

from __future__ import annotations

import argparse
import time

from retromae.preflight import configured
from retromae.reranking.config import RerankerConfig
from retromae.runtime.options import add_config_arguments

NAME = "train-reranker"
PROCESSES = "several"  # splits its work over a multi-process launch (retromae.runtime.processes)
HELP = "train a cross-encoder reranker (listwise loss over mined negatives), the teacher for finetune --distill"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, RerankerConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(RerankerConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.reranking.run import RERANKER_DIR, train_reranker
    from retromae.runtime.console import out, written, wrote
    from retromae.runtime.processes import is_main_process
    from retromae.training.trackers import TENSORBOARD_DIR

    started = time.perf_counter()
    output = train_reranker(config)
    if is_main_process():
        out(wrote({"reranker": output / RERANKER_DIR, "metrics": output / "metrics.jsonl"}
                  | written(output, {"tensorboard": TENSORBOARD_DIR}), started))
    return 0
