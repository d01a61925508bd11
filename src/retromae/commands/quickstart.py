"""`retromae quickstart`: pre-train, fine-tune and evaluate a small encoder on real text, offline."""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.runtime.options import add_config_arguments
from retromae.workflows.config import QuickstartConfig

HELP = ("pre-train a small encoder with MLM and with RetroMAE under one budget, fine-tune both and the "
        "un-pre-trained encoder (CLS pooling), and evaluate them against BM25, offline (the standard library's "
        "docstrings by default; --data DIR and --corpus FILE point it at your own BEIR folder and corpus); "
        "about four minutes on a 2-core CPU, a larger budget on a CUDA GPU")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, QuickstartConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(QuickstartConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.workflows.quickstart import quickstart

    show(quickstart(config))
    return 0
