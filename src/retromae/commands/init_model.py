"""`retromae init-model`: a randomly initialised small BERT around an existing tokenizer, to pre-train from scratch.

Thin: parse → `InitModelConfig` → `scratch.save_random_bert`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from retromae.config import add_config_arguments, build_config, option
from retromae.errors import ModelLoadError

HELP = ("save a randomly initialised BERT masked LM of a chosen size with a tokenizer (e.g. bert-base-uncased's "
        "vocabulary), as the --model of a from-scratch `retromae pretrain`")


@dataclasses.dataclass(kw_only=True)
class InitModelConfig:
    tokenizer: str = option(help="tokenizer to use: hub name or a local model folder holding one")
    output: Path = option(help="folder to write the model and tokenizer to")
    hidden_size: int = option(256, "hidden size (a multiple of 64; one attention head per 64)")
    layers: int = option(4, "transformer layers")
    max_positions: int = option(512, "position embeddings (longest input)")
    seed: int = option(42, "seed of the random initialisation")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, InitModelConfig)


def run(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from retromae.model_source import check_tokenizer, resolve_tokenizer
    from retromae.scratch import save_random_bert

    config = build_config(InitModelConfig, args)
    source = resolve_tokenizer(config.tokenizer)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.folder, subfolder=source.subfolder)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"--tokenizer {config.tokenizer}: no tokenizer there ({error})") from error
    check_tokenizer(tokenizer, f"--tokenizer {config.tokenizer}")
    folder = save_random_bert(tokenizer, config.output, hidden_size=config.hidden_size, layers=config.layers,
                              max_positions=config.max_positions, seed=config.seed)
    print(f"random BERT ({config.layers} layers, hidden {config.hidden_size}, vocabulary {len(tokenizer)}) → {folder}")
    return 0
