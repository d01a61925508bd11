"""`retromae init-model`: a randomly initialised small masked LM of a supported family, to pre-train from scratch.

Its tokenizer is an existing one (`--tokenizer`) or one trained on a corpus (`--corpus`) of the kind the family uses
(WordPiece, SentencePiece-style Unigram or byte-level BPE). The architectures offered, the tokenizer kind of each and
the default length come from the family table (`retromae.backbones.families`). Thin: parse → `InitModelConfig`
(`retromae.pretraining.config`) → `retromae.pretraining.scratch.init_model`.
"""

from __future__ import annotations

import argparse

from retromae.commands import show
from retromae.preflight import configured
from retromae.pretraining.config import InitModelConfig
from retromae.runtime.options import add_config_arguments

# A literal string, so that `retromae --help` lists the commands without importing them; the families it builds
# are listed by `init-model --help` (--architecture), from the family table.
HELP = ("save a randomly initialised masked LM of a supported family (--architecture) and a chosen size, with an "
        "existing tokenizer or one trained on a corpus, as the --model of a from-scratch `retromae pretrain`")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, InitModelConfig)


def run(args: argparse.Namespace) -> int:
    config = configured(InitModelConfig, args)  # first: a wrong option, file or hub name answered before torch
    # torch: only when the command runs, so --help stays instant
    from retromae.pretraining.scratch import init_model

    show(init_model(config))
    return 0
