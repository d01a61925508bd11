"""`retromae init-model`: a randomly initialised small masked LM of a supported family, to pre-train from scratch.

Its tokenizer is an existing one (`--tokenizer`) or one trained on a corpus (`--corpus`) of the kind the family uses
(WordPiece, SentencePiece-style Unigram or byte-level BPE). The architectures offered, the tokenizer kind of each and
the default length come from the family table (`retromae.backbones.families`). Thin: parse → `InitModelConfig` →
`tokenizer_training.train_tokenizer` → `scratch.save_random_model`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.backbones.families import architecture_names, family_building, max_positions_help, tokenizer_kinds_help
from retromae.config import POSITIVE, SEED, ConfigError, Options, add_config_arguments, at_least, build_config, option
from retromae.console import quiet_by_default

# A literal string, so that `retromae --help` lists the commands without importing them; the families it builds
# are listed by `init-model --help` (--architecture), from the family table.
HELP = ("save a randomly initialised masked LM of a supported family (--architecture) and a chosen size, with an "
        "existing tokenizer or one trained on a corpus, as the --model of a from-scratch `retromae pretrain`")


@dataclasses.dataclass(kw_only=True)
class InitModelConfig(Options):
    output: Path = option(help="folder to write the model and tokenizer to")
    architecture: str = option("bert", f"model family to build, with its kind of tokenizer ({tokenizer_kinds_help()})",
                               choices=architecture_names)
    tokenizer: str | None = option(None, "existing tokenizer: hub name or a local model folder holding one",
                                   required_unless="--corpus")
    corpus: list[str] | None = option(None, "train the family's kind of tokenizer on these corpus files (any "
                                      "`retromae pretrain --corpus` source)", required_unless="--tokenizer")
    vocab_size: int = option(8000, "vocabulary of a tokenizer trained on --corpus", at_least(100))
    hidden_size: int = option(256, "hidden size (a multiple of 64; one attention head per 64)", POSITIVE)
    layers: int = option(4, "transformer layers", POSITIVE)
    max_positions: int | None = option(None, f"longest input ({max_positions_help()})", at_least(8))
    seed: int = option(42, "seed of the random initialisation", SEED)

    def __post_init__(self) -> None:
        if (self.tokenizer is None) == (self.corpus is None):
            raise ConfigError("--tokenizer: give either --tokenizer (an existing one) or --corpus (train one)")

    @property
    def positions(self) -> int:
        return self.max_positions or family_building(self.architecture).max_positions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, InitModelConfig)


def run(args: argparse.Namespace) -> int:
    init_model(build_config(InitModelConfig, args))
    return 0


@quiet_by_default
def init_model(config: InitModelConfig | None = None, /, **options: Any) -> Path:
    """A random model and its tokenizer as `config` (or `InitModelConfig(**options)`) says; returns the model folder
    (`retromae.init_model(...)`)."""
    # torch: only when the command runs, so --help stays instant
    from retromae.pretraining.scratch import save_random_model
    from retromae.run_folder import lock_folder

    config = config if config is not None else InitModelConfig(**options)
    lock_folder(config.output)
    tokenizer = trained_tokenizer(config) if config.corpus else existing_tokenizer(config.tokenizer)
    folder = save_random_model(tokenizer, config.output, hidden_size=config.hidden_size, layers=config.layers,
                               max_positions=config.positions, seed=config.seed, architecture=config.architecture)
    print(f"random {config.architecture} ({config.layers} layers, hidden {config.hidden_size}, vocabulary "
          f"{len(tokenizer)}, {config.positions} positions) → {folder}")
    return Path(folder)


def trained_tokenizer(config: InitModelConfig):
    """The family's kind of tokenizer trained on --corpus."""
    # torch: only when the command runs, so --help stays instant
    from retromae.data.corpus import iter_corpus
    from retromae.pretraining.scratch import family_tokenizer

    texts = (document.text for document in iter_corpus(config.corpus))
    return family_tokenizer(texts, config.architecture, config.vocab_size, config.positions)


def existing_tokenizer(name: str):
    """The tokenizer of --tokenizer, checked as every command checks one."""
    # transformers (through retromae.pretrained): only when the command runs, so --help stays instant
    from retromae.model_source import check_tokenizer, resolve_tokenizer
    from retromae.pretrained import load_tokenizer

    source = resolve_tokenizer(name)
    tokenizer = load_tokenizer(source.folder, source.subfolder, f"--tokenizer {name}")
    check_tokenizer(tokenizer, f"--tokenizer {name}")
    return tokenizer
