"""`retromae adapt`: adapt an already-trained embedder to a corpus without labels, never handing back a worse one
on the validation set."""

from __future__ import annotations

import argparse
import time

from retromae.adaptation.config import AdaptConfig
from retromae.commands import show
from retromae.preflight import configured
from retromae.runtime.options import add_config_arguments

HELP = ("adapt an embedder to your corpus without labels (contrastive crops in its own similarity, or distillation "
        "from the BM25 + base hybrid, averaged with the base and scored on held-out validation: the base is kept "
        "unless the gain's bootstrap interval lies above 0)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, AdaptConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(AdaptConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.adaptation.run import GUARD_FILE, UNSEEN_FILE, adapt
    from retromae.runtime.console import out, wrote

    started = time.perf_counter()
    output = show(adapt(config))
    outputs = {"encoder": output / "encoder", "sentence-transformer": output / "sentence-transformer",
               "guard": output / GUARD_FILE, "validation set": output / "validation",
               "unseen qrels": output / UNSEEN_FILE,
               "fine-tuned": output / "finetuned" / "encoder"}
    out(wrote({name: path for name, path in outputs.items() if path.exists()}, started))
    return 0
