"""`retromae pretrain`: pre-train an encoder with RetroMAE (or another objective) on a corpus or on pairs."""

from __future__ import annotations

import argparse
import time

from retromae.evaluation.probe_options import BEST_PROBE_DIR
from retromae.preflight import configured
from retromae.pretraining.config import PretrainConfig
from retromae.runtime.options import add_config_arguments

PROCESSES = "several"  # splits its work over a multi-process launch (retromae.runtime.processes)
HELP = ("pre-train an encoder with RetroMAE or another of the field's objectives (--objective: each has its options "
        "section); flags override --config")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, PretrainConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(PretrainConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.models.export import HEAD_FILE
    from retromae.pretraining.run import pretrain
    from retromae.runtime.console import out, written, wrote
    from retromae.runtime.processes import is_main_process
    from retromae.training.trackers import TENSORBOARD_DIR

    started = time.perf_counter()
    output = pretrain(config)
    if is_main_process():
        out(wrote({"encoder": output / "encoder", "sentence-transformer": output / "sentence-transformer",
                   "pre-training head": output / HEAD_FILE, "metrics": output / "metrics.jsonl"}
                  | written(output, {"best probe": BEST_PROBE_DIR, "tensorboard": TENSORBOARD_DIR}), started))
    return 0

