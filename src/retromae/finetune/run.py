"""Fine-tuning from end to end: config → training data → negatives → dual encoder → training loop → export.

Owns `FinetuneConfig` (every option of `retromae finetune`) and `finetune(config)`. Does not own reading data,
mining, batching, the model or the loop; it wires them together. The output folder has the pre-training
layout: `encoder/` and `sentence-transformer/` (the passage tower, with the pooling it was trained with;
untied runs add `query-encoder/` and `query-sentence-transformer/`), `config.json`, `metrics.jsonl`,
`checkpoints/` and, when negatives are mined, `negatives/`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retromae.backbone import check_max_length
from retromae.config import ConfigError, option, require, save_config
from retromae.data.training_groups import TrainingSet, load_training_data
from retromae.encoder import POOLINGS, Encoder
from retromae.export import declared_max_length, export_encoder, export_sentence_transformer
from retromae.finetune.batches import GroupBatchSampler, GroupCollator, GroupDataset, count_tokens
from retromae.finetune.model import DualEncoder, LossOptions, freeze_unused_parameters
from retromae.finetune.negatives import NEGATIVES_DIR, Miner, NegativeRefresher, load_latest_negatives, save_negatives
from retromae.model_source import check_unknown_share
from retromae.retrieval.mining import MiningOptions
from retromae.train import Trainer, TrainingConfig, claim_output, latest_checkpoint, make_accelerator, seed_everything

TOKENIZER_SAMPLE = 200  # passages checked for [UNK] before training
NEGATIVE_SOURCES = ("auto", "none", "file", "bm25", "model")
OUTPUTS = ("encoder", "sentence-transformer", "query-encoder", "query-sentence-transformer", NEGATIVES_DIR)


@dataclass(kw_only=True)
class FinetuneConfig(MiningOptions, TrainingConfig):
    """Options of `retromae finetune`."""

    model: str = option(help="encoder to start from: a `retromae pretrain`/`finetune` output's encoder/ (or the "
                             "output folder itself), a sentence-transformers folder, or any Hugging Face encoder")
    data: str = option(help="training file (JSON lines: query, pos, neg[, pos_scores, neg_scores]) or a BEIR / "
                            "MS MARCO folder whose --split qrels give the positives")
    split: str = option("train", "qrels split of a --data folder")
    negatives: str = option("auto", "hard negatives: none (in-batch only), file (the training file's neg lists), "
                                    "bm25 or model (mined before training from the training set's passages); "
                                    "auto: file for a training file, none for a folder", choices=NEGATIVE_SOURCES)
    group_size: int | None = option(None, "passages per query in a batch: 1 positive + group_size - 1 hard "
                                          "negatives; default 1 with no negatives, else 8")
    refresh_negatives_every: int = option(0, "ANCE: re-encode the passages and re-mine negatives with the model "
                                             "being trained every N steps (0: never)")
    temperature: float | None = option(None, "InfoNCE temperature; default 0.05 for normalised vectors, else 1")
    pooling: str | None = option(None, "pooling; default: what the model folder declares, else cls", choices=POOLINGS)
    normalize: bool | None = option(None, "L2-normalise embeddings (cosine scores); default: the model folder's")
    untie: bool = option(False, "train separate query and passage encoders (both start from --model)")
    query_max_length: int = option(64, "max tokens per query")
    passage_max_length: int = option(256, "max tokens per passage")
    chunk_size: int = option(0, "gradient caching: encode a batch this many texts at a time and backpropagate "
                                "through cached embeddings, so the batch size is bounded by time, not memory "
                                "(0: off)")
    distill: bool = option(False, "distil the teacher scores of the training file (pos_scores, neg_scores) with a "
                                  "KL divergence over each query's group")
    distill_temperature: float = option(1.0, "temperature of both score distributions in the KL divergence")
    contrastive_weight: float = option(1.0, "weight of the InfoNCE loss (0 with --distill: distillation alone)")
    epochs: float | None = option(None, "train for this many epochs over the queries (overrides --max-steps)")
    encode_batch_size: int = option(64, "texts per forward pass when mining negatives")
    learning_rate: float = option(2e-5, "peak learning rate of AdamW")

    def __post_init__(self) -> None:
        TrainingConfig.__post_init__(self)
        MiningOptions.__post_init__(self)
        require(self.group_size is None or self.group_size >= 1, "group_size", "must be at least 1")
        require(self.refresh_negatives_every >= 0, "refresh_negatives_every", "must be 0 or positive")
        require(self.temperature is None or self.temperature > 0, "temperature", "must be positive")
        require(self.chunk_size >= 0, "chunk_size", "must be 0 or positive")
        require(self.distill_temperature > 0, "distill_temperature", "must be positive")
        require(self.contrastive_weight >= 0, "contrastive_weight", "must be 0 or positive")
        require(self.distill or self.contrastive_weight > 0, "contrastive_weight", "must be positive without --distill")
        require(self.epochs is None or self.epochs > 0, "epochs", "must be positive")
        require(self.query_max_length >= 4 and self.passage_max_length >= 4, "passage_max_length",
                "max lengths must be at least 4")
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


def _load_encoders(config: FinetuneConfig, device) -> tuple[Encoder, Encoder]:
    """(passage encoder, query encoder): the same object unless --untie."""
    passage = Encoder.load(config.model, config.pooling, config.normalize, device=device)
    query = Encoder.load(config.model, config.pooling, config.normalize, device=device) \
        if config.untie else passage
    return passage, query


def _check_data(config: FinetuneConfig, data: TrainingSet, source: str) -> None:
    if config.distill and not data.has_scores:
        raise ConfigError("--distill: the training data has no teacher scores; add them with `retromae score`")
    if config.distill and source != "file":
        raise ConfigError("--distill: needs --negatives file (the scored negatives of the training file)")
    if source == "file" and not any(example.negatives for example in data.examples):
        raise ConfigError(f"--negatives: {data.source} lists no negatives; use --negatives none, bm25 or model")


def _prepare_negatives(config: FinetuneConfig, data: TrainingSet, source: str, miner: Miner, accelerator) -> None:
    """Clear, keep, mine or restore (on resume) the examples' negatives."""
    checkpoint = latest_checkpoint(Path(config.output)) if config.resume else None
    if source == "none":
        for example in data.examples:
            example.negatives = []
    resumed_step = int(checkpoint.name.split("-")[1]) if checkpoint is not None else None
    if resumed_step is not None and load_latest_negatives(data, Path(config.output), resumed_step) is not None:
        return
    if source in ("bm25", "model"):
        miner.mine(source, accelerator, config.seed)
        if accelerator.is_main_process:
            save_negatives(data, Path(config.output), 0)


def _dual_encoder(config: FinetuneConfig, passage: Encoder, query: Encoder, group_size: int) -> DualEncoder:
    options = LossOptions(temperature=config.temperature or (0.05 if passage.normalize else 1.0),
                          group_size=group_size, contrastive_weight=config.contrastive_weight,
                          distill_weight=1.0 if config.distill else 0.0,
                          distill_temperature=config.distill_temperature, chunk_size=config.chunk_size)
    return DualEncoder(query.model, passage.model if config.untie else None, passage.config, options)


def finetune(config: FinetuneConfig | None = None, /, **options: Any) -> Path:
    """Fine-tune a dense retriever as `config` (or `FinetuneConfig(**options)`) says; returns the output folder."""
    config = config if config is not None else FinetuneConfig(**options)
    output = Path(config.output)
    accelerator = make_accelerator(config)
    seed_everything(config.seed)
    passage_encoder, query_encoder = _load_encoders(config, accelerator.device)
    check_max_length(passage_encoder.model.config, config.query_max_length, "query_max_length")
    check_max_length(passage_encoder.model.config, config.passage_max_length, "passage_max_length")
    data = load_training_data(config.data, config.split)
    sample = passage_encoder.tokenize(data.texts[:TOKENIZER_SAMPLE], config.passage_max_length)
    check_unknown_share(passage_encoder.tokenizer, [token for ids in sample for token in ids], config.model,
                        data.source)
    source = config.negative_source(Path(config.data).is_dir())
    _check_data(config, data, source)
    claim_output(config, "finetune", OUTPUTS, accelerator)
    group_size = config.resolved_group_size(source)
    miner = Miner(data, config, passage_encoder, query_encoder if config.untie else None, config.query_max_length,
                  config.passage_max_length, config.encode_batch_size)
    _prepare_negatives(config, data, source, miner, accelerator)
    model = _dual_encoder(config, passage_encoder, query_encoder, group_size)

    def sampler(rank: int, world: int, start: int) -> GroupBatchSampler:
        return GroupBatchSampler(data, config.batch_size, group_size, config.seed, rank, world, start,
                                 with_scores=config.distill)

    collate, dataset = GroupCollator(passage_encoder.tokenizer, config.query_max_length,
                                     config.passage_max_length), GroupDataset(data)
    probe = sampler(0, accelerator.num_processes, 0)
    if config.epochs is not None:
        config.max_steps = max(1, math.ceil(config.epochs * probe.batches_per_epoch
                                            / config.gradient_accumulation_steps))
    first = collate([dataset[group] for group in next(iter(probe))])
    freeze_unused_parameters(model, {key: value.to(accelerator.device) for key, value in first.items()})
    refresher = (NegativeRefresher(miner, config.refresh_negatives_every, config.seed)
                 if config.refresh_negatives_every else None)
    trainer = Trainer(model, dataset, collate, config, count_tokens=count_tokens, accelerator=accelerator,
                      batch_sampler=sampler, on_step=refresher, description=describe(config, source))
    if accelerator.is_main_process:
        save_config(config, output / "config.json")
    trainer.run()
    if accelerator.is_main_process:
        export_towers(trainer.unwrapped_model, passage_encoder, output,
                      declared_max_length(config.model))
    accelerator.wait_for_everyone()
    return output


def describe(config: FinetuneConfig, negatives: str) -> str:
    """The run's name on its progress bar and summary, e.g. "fine-tuning with bm25 negatives (120 steps)"."""
    kind = {"none": "in-batch", "file": "the training file's"}.get(negatives, negatives)
    distill = ", distilling the teacher's scores" if config.distill else ""
    return f"fine-tuning with {kind} negatives{distill} ({config.max_steps:,} steps)"


def export_towers(model: DualEncoder, encoder: Encoder, output: Path, max_length: int | None = None) -> None:
    """encoder/ + sentence-transformer/ of the passage tower; query-* folders too when the towers are untied.
    They keep the starting model's pooling and declared `max_length`."""
    towers = {"": model.passage_model}
    if model.untied_passage_model is not None:
        towers["query-"] = model.query_model
    for prefix, tower in towers.items():
        export_encoder(tower, encoder.tokenizer, output / f"{prefix}encoder", encoder.pooling, encoder.normalize,
                       max_length)
        export_sentence_transformer(output / f"{prefix}encoder", output / f"{prefix}sentence-transformer",
                                    encoder.pooling, encoder.normalize)
