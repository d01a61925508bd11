"""`retromae finetune`: fine-tune an encoder into a dense retriever (in-batch, BM25, mined or ANCE negatives,
distillation)."""

from __future__ import annotations

import argparse

from retromae.config import add_config_arguments, build_config

HELP = "fine-tune a dense retriever (in-batch, BM25, mined or ANCE negatives; distillation); flags override --config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from retromae.finetune.run import FinetuneConfig

    add_config_arguments(parser, FinetuneConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.finetune.run import FinetuneConfig, finetune

    output = finetune(build_config(FinetuneConfig, args))
    print(f"encoder: {output / 'encoder'}\nsentence-transformer: {output / 'sentence-transformer'}")
    return 0
