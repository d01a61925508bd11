"""`retromae mine`: hard negatives for every query of a training set, written as a training file.

Thin: parse → `MineConfig` → `retrieval.mining` (BM25 or a dense model, rank window, positives and the query's
own text excluded) → `data.training_groups.write_training_file`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import POSITIVE, SEED, ConfigError, add_config_arguments, build_config, option
from retromae.console import quiet_by_default
from retromae.encoder_config import EncoderOptions
from retromae.retrieval.mining_options import MiningOptions
from retromae.run_folder import OutputOptions, claim_file, input_paths

HELP = "mine hard negatives (BM25 or a dense model) for a BEIR split or a training file; writes training JSON lines"


@dataclasses.dataclass(kw_only=True)
class MineConfig(OutputOptions, MiningOptions, EncoderOptions):
    model: str | None = option(None, "dense model that ranks the passages", required_unless="--negatives bm25")
    data: Path = option(help="BEIR / MS MARCO folder (positives from --split qrels) or a training file")
    split: str = option("train", "qrels split of a --data folder")
    negatives: str = option("model", "what ranks the passages negatives are drawn from: model (dense, exact "
                                     "search) or bm25", choices=("model", "bm25"), aliases=("--method",))
    output: Path = option(help="training file to write (JSON lines: query_id, query, pos, neg, pos_ids, neg_ids)")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own", POSITIVE)
    seed: int = option(0, "seed of the sampling inside the rank window", SEED)

    def __post_init__(self) -> None:
        EncoderOptions.__post_init__(self)
        MiningOptions.__post_init__(self)
        if self.negatives == "model" and not self.model:
            raise ConfigError("--model: --negatives model needs a model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, MineConfig)


def run(args: argparse.Namespace) -> int:
    mine(build_config(MineConfig, args))
    return 0


@quiet_by_default
def mine(config: MineConfig | None = None, /, **options: Any) -> Path:
    """Mine hard negatives as `config` (or `MineConfig(**options)`) says; returns the training file written
    (`retromae.mine(...)`)."""
    # torch and faiss: only when the command runs, so --help stays instant
    from retromae.data.training_groups import load_training_data, write_training_file
    from retromae.retrieval.mining import bm25_rankings, choose_negatives, dense_rankings

    config = config if config is not None else MineConfig(**options)
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    data = load_training_data(config.data, config.split)
    if config.negatives == "bm25":
        rankings = bm25_rankings(data, config.rank_end)
    else:
        rankings = dense_rankings(config.load_encoder(), data, config.rank_end, config.batch_size,
                                  config.query_max_length, config.passage_max_length)
    for example, negatives in zip(data.examples, choose_negatives(data, rankings, config, config.seed), strict=True):
        example.negatives = negatives
    write_training_file(data, config.output)
    print(f"mined {sum(len(e.negatives) for e in data.examples)} negatives for {len(data.examples)} queries "
          f"into {config.output}")
    return Path(config.output)
