"""`retromae finetune`: fine-tune an encoder into a dense retriever (in-batch, BM25, mined or ANCE negatives,
distillation)."""

from __future__ import annotations

import argparse
import time

from retromae.finetuning.config import FinetuneConfig
from retromae.preflight import configured
from retromae.runtime.options import add_config_arguments

PROCESSES = "several"  # splits its work over a multi-process launch (retromae.runtime.processes)
HELP = "fine-tune a dense retriever (in-batch, BM25, mined or ANCE negatives; distillation); flags override --config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, FinetuneConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(FinetuneConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.finetuning.negatives import NEGATIVES_DIR
    from retromae.finetuning.run import finetune
    from retromae.runtime.console import out, written, wrote
    from retromae.runtime.processes import is_main_process
    from retromae.training.trackers import TENSORBOARD_DIR

    started = time.perf_counter()
    output = finetune(config)
    towers = ("", "query-") if (output / "query-encoder").is_dir() else ("",)
    if is_main_process():
        out(wrote({f"{tower}{kind}": output / f"{tower}{kind}" for tower in towers
                   for kind in ("encoder", "sentence-transformer")} | {"metrics": output / "metrics.jsonl"}
                  | written(output, {"negatives": NEGATIVES_DIR, "tensorboard": TENSORBOARD_DIR}), started))
    return 0
