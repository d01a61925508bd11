"""The options of `retromae finetune`, declared apart from the run so that parsing them imports no torch.

Owns `FinetuneConfig` (every option of `retromae finetune`, validated) and the choices it derives from them (where
negatives come from, passages per query). `retromae.finetuning.run` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from retromae.data.retrieval_sets import check_split
from retromae.models.encoder_config import POOLINGS, prefix_option
from retromae.retrieval.mining_options import MiningOptions
from retromae.runtime.options import (
    NON_NEGATIVE,
    POSITIVE,
    STEPS,
    Acts,
    acts_with,
    acts_with_folder,
    at_least,
    option,
    require,
)
from retromae.training.config import TrainingConfig

NEGATIVE_SOURCES = ("auto", "none", "file", "bm25", "model")


@dataclass(kw_only=True)
class FinetuneConfig(MiningOptions, TrainingConfig):
    """Options of `retromae finetune`."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": ("training data", "split")}

    # The rank window acts only on mined negatives (--negatives auto mines none), the mining batch only where a model
    # mines; a split only of a folder.
    ACTS = {**{name: Acts(lambda config: config.negatives in ("bm25", "model") or config.refresh_negatives_every > 0,
                          "with mined negatives (--negatives bm25 or model, or --refresh-negatives-every)",
                          {"negatives": "bm25"}, ({"negatives": "file"},))
               for name in ("rank_start", "rank_end", "negatives_per_query")},
            "encode_batch_size": Acts(lambda config: config.negatives == "model" or config.refresh_negatives_every > 0,
                                      "with --negatives model or --refresh-negatives-every", {"negatives": "model"},
                                      ({"negatives": "bm25"},)),
            "distill_temperature": acts_with("distill"), "split": acts_with_folder("data")}

    model: str = option(help="encoder to start from: a `retromae pretrain`/`finetune` output's encoder/ (or the "
                             "output folder itself), a sentence-transformers folder, or any Hugging Face encoder",
                        reads="model")
    data: str = option(help="training file (JSON lines: query, pos, neg[, pos_scores, neg_scores]) or a BEIR / "
                            "MS MARCO folder whose --split qrels give the positives", reads="path")
    split: str = option("train", "qrels split of a --data folder", check=check_split)
    negatives: str = option("auto", "hard negatives: none (in-batch only), file (the training file's neg lists), "
                                    "bm25 or model (mined before training from the training set's passages); "
                                    "auto: file for a training file, none for a folder", choices=NEGATIVE_SOURCES)
    group_size: int | None = option(None, "passages per query in a batch: 1 positive + group_size - 1 hard "
                                          "negatives; default 1 with no negatives, else 8", POSITIVE)
    refresh_negatives_every: int = option(0, "ANCE: re-encode the passages and re-mine negatives with the model "
                                             "being trained every N steps (0: never)", NON_NEGATIVE)
    temperature: float | None = option(None, "InfoNCE temperature; default 0.05 for normalised vectors, else 1",
                                       POSITIVE)
    pooling: str | None = option(None, "pooling; default: what the model folder declares, else cls", choices=POOLINGS)
    normalize: bool | None = option(None, "L2-normalise embeddings (cosine scores); default: the model folder's")
    untie: bool = option(False, "train separate query and passage encoders (both start from --model)")
    query_max_length: int | None = option(None, "max tokens per query; default: the 95th percentile of the training "
                                                "queries' lengths, at most 64", at_least(4))
    passage_max_length: int | None = option(None, "max tokens per passage; default: the 95th percentile of the "
                                                  "training passages' lengths, at most 256 and the model's limit",
                                                  at_least(4))
    query_prefix: str | None = prefix_option("query", "text put before every query trained (and mined) on, and "
                                                      "named the export's query prompt, e.g. 'query: '")
    passage_prefix: str | None = prefix_option("passage", "text put before every passage trained (and mined) on, and "
                                                          "named the export's document prompt, e.g. 'passage: '")
    chunk_size: int | None = option(None, "gradient caching: encode a batch this many texts at a time and "
                                          "backpropagate through cached embeddings, so the batch size is bounded by "
                                          "time, not memory (0: off); default: off when a step fits the memory the "
                                          "process may use, else the largest power of two that fits", NON_NEGATIVE)
    distill: bool = option(False, "distil the teacher scores of the training file (pos_scores, neg_scores) with a "
                                  "KL divergence over each query's group")
    distill_temperature: float = option(1.0, "temperature of both score distributions in the KL divergence",
                                        POSITIVE)
    contrastive_weight: float = option(1.0, "weight of the InfoNCE loss (0 with --distill: distillation alone)",
                                       NON_NEGATIVE)
    epochs: float | None = option(None, "passes over the training queries (overrides --max-steps); default 2 unless "
                                        "--max-steps is given", POSITIVE)
    max_steps: int | None = option(None, "optimiser steps, when --epochs is not given", STEPS)
    batch_size: int | None = option(None, "queries per device per micro-batch; default 32, at most half the "
                                          "training queries one process sees", POSITIVE)
    encode_batch_size: int = option(64, "texts per forward pass when mining negatives", POSITIVE)
    learning_rate: float = option(2e-5, "peak learning rate of AdamW", POSITIVE)

    def __post_init__(self) -> None:
        TrainingConfig.__post_init__(self)
        MiningOptions.__post_init__(self)
        require(self.distill or self.contrastive_weight > 0, "contrastive_weight", "must be positive without --distill")
        require(not (self.refresh_negatives_every and self.num_workers), "num_workers",
                "must be 0 with --refresh-negatives-every (workers would batch with stale negatives)")
        require(not (self.distill and self.refresh_negatives_every), "refresh_negatives_every",
                "cannot be combined with --distill: re-mined negatives have no teacher scores")

    def negative_source(self, is_folder: bool) -> str:
        if self.negatives != "auto":
            return self.negatives
        return "none" if is_folder else "file"

    def resolved_group_size(self, source: str) -> int:
        return self.group_size or (1 if source == "none" and not self.refresh_negatives_every else 8)
