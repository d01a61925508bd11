"""The options of `retromae train-reranker` and `retromae score`, declared apart from `retromae.reranking.run` so that
parsing them imports no torch.

Owns `RerankerConfig` and `ScoreConfig`. Does not own training or scoring (`retromae.reranking.run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retromae.data.retrieval_sets import check_split
from retromae.models.encoder_config import prefix_option
from retromae.retrieval.mining_options import MiningOptions
from retromae.runtime.devices import check_device_name
from retromae.runtime.options import POSITIVE, Acts, acts_with, acts_with_folder, at_least, option
from retromae.runtime.run_folder import OutputOptions
from retromae.training.config import HeadTrainingConfig

PAIRS_WITHOUT = "; the reranker reads its pairs without"  # what a mining prefix is not put before


@dataclass(kw_only=True)
class RerankerConfig(MiningOptions, HeadTrainingConfig):
    """Options of `retromae train-reranker`."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": ("training data", "split")}

    # The rank window acts only on mined negatives (--negatives auto mines BM25's for a folder); a split only of one.
    ACTS = {**{name: Acts(lambda config: config.negatives in ("bm25", "model") or (
                              config.negatives == "auto" and Path(config.data).is_dir()),
                          "with mined negatives (--negatives bm25 or model, or auto with a --data folder)",
                          {"negatives": "bm25"}, ({"negatives": "file"},))
               for name in ("rank_start", "rank_end", "negatives_per_query")},
            **{name: acts_with("negatives", "model", off="bm25") for name in ("query_prefix", "passage_prefix")},
            "split": acts_with_folder("data")}

    model: str = option(help="encoder to start from (a one-logit classification head is added): a Hugging Face "
                             "encoder, a sentence-transformers folder, or a pre-training output", reads="model")
    data: str = option(help="training file (JSON lines: query, pos, neg) or a BEIR / MS MARCO folder and --split",
                       reads="path")
    split: str = option("train", "qrels split of a --data folder", check=check_split)
    negatives: str = option("auto", "negatives: file (the training file's), bm25 or model (mined with --model as a "
                                    "bi-encoder); auto: file for a training file, bm25 for a folder",
                            choices=("auto", "file", "bm25", "model"))
    query_prefix: str | None = prefix_option("query", "--negatives model: text put before every query the model "
                                                      "ranks for, e.g. 'query: '", PAIRS_WITHOUT)
    passage_prefix: str | None = prefix_option("passage", "--negatives model: text put before every passage the "
                                                          "model ranks, e.g. 'passage: '", PAIRS_WITHOUT)
    group_size: int = option(8, "passages per query: the positive and group_size - 1 negatives", at_least(2))
    max_length: int | None = option(None, "max tokens of a (query, passage) pair; default 256, at most what the "
                                                  "model reads", at_least(8))
    learning_rate: float = option(2e-5, "peak learning rate of AdamW", POSITIVE)

    def __post_init__(self) -> None:
        HeadTrainingConfig.__post_init__(self)
        MiningOptions.__post_init__(self)


@dataclass(kw_only=True)
class ScoreConfig(OutputOptions):
    INPUT_FORMATS = {"data": "training file"}  # the format each input option is read in (`retromae.data.inputs`)
    model: str = option(help="cross-encoder folder, e.g. the reranker/ of `retromae train-reranker`", reads="model")
    data: Path = option(help="training file (JSON lines: query, pos, neg)", reads="path")
    output: Path = option(help="training file to write: the input with pos_scores and neg_scores")
    batch_size: int = option(64, "pairs per forward pass", POSITIVE)
    max_length: int | None = option(None, "max tokens of a (query, passage) pair; default 256, at most what the "
                                                  "model reads", at_least(8))
    device: str | None = option(None, "torch device: cpu, cuda, cuda:N or mps; default: the GPU if any",
                                check=check_device_name)
