"""`retromae pretrain`: pre-train an encoder with RetroMAE (or another objective) on a corpus or on pairs."""

from __future__ import annotations

import argparse

from retromae.config import add_config_arguments, build_config

HELP = "pre-train an encoder (RetroMAE, SEED, MLM, contrastive, RetroMAE+contrastive); flags override --config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from retromae.pretrain_config import PretrainConfig

    add_config_arguments(parser, PretrainConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.pretrain import PretrainConfig, pretrain

    output = pretrain(build_config(PretrainConfig, args))
    print(f"encoder: {output / 'encoder'}\nsentence-transformer: {output / 'sentence-transformer'}")
    return 0

