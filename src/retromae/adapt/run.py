"""`retromae adapt` from end to end: check the inputs, split off validation, score the base, train, guard, export.

Owns `adapt(config)`: the stages in order, each with one display (reading and splitting the corpus, scoring the base,
the training stage, the guard), the budget sized from the corpus, the training stage's config (a `retromae pretrain`
run in `OUTPUT/training/`, its checkpoints the guard's candidates), the export of the winner as `OUTPUT/encoder/` and
`OUTPUT/sentence-transformer/` with the base's pooling and similarity, `OUTPUT/guard.json`, and the closing summary
against the base. Does not own the objective, the loop or the scoring (`retromae.adapt.guard`).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retromae.adapt.config import AdaptConfig
from retromae.adapt.data import (
    base_pooling,
    check_language,
    read_documents,
    split_corpus,
    write_training_corpus,
    write_validation,
)
from retromae.adapt.guard import METRIC, Candidate, run_guard, score
from retromae.config import option, save_config
from retromae.console import Stages, step
from retromae.data.retrieval_sets import RetrievalSet, load_retrieval_set
from retromae.data.token_store import TokenStore
from retromae.encoder import Encoder, PoolingConfig
from retromae.evaluation.probe import sample_retrieval_set
from retromae.export import declared_max_length, export_encoder, export_sentence_transformer
from retromae.finetune.run import FinetuneConfig, finetune
from retromae.io import write_text_atomic
from retromae.objectives import OBJECTIVES
from retromae.pretraining.config import PretrainConfig
from retromae.run_folder import claim_folder, input_paths, mark_started, run_identity

GUARD_FILE = "guard.json"
ENCODE_BATCH = 64  # texts per forward pass while the validation set is encoded
OUTPUTS = ("encoder", "sentence-transformer", GUARD_FILE, "data", "validation", "training", "finetuned", "config.json")


@dataclass(kw_only=True)
class StageConfig(PretrainConfig):
    """The training stage: `retromae pretrain`'s options plus the pooling the objective trains (the base's)."""

    pooling: str = option("cls", "the sentence vector's pooling (the base's)")
    normalize: bool = option(False, "whether the sentence vector is L2-normalised (the base's similarity)")


def adapt(config: AdaptConfig | None = None, /, **options: Any) -> Path:
    """Adapt `config.model` to `config.corpus` as `config` (or `AdaptConfig(**options)`) says; returns the output
    folder, whose encoder/ is the best of the base and its adapted candidates on the validation set."""
    config = config if config is not None else AdaptConfig(**options)
    output = Path(config.output)
    pooling = base_pooling(config.model, config.pooling, config.normalize)
    claim_folder(output, "adapt", run_identity(config), OUTPUTS, resume=config.resume, overwrite=config.overwrite,
                 inputs=input_paths(config), started=False)
    save_config(config, output / "config.json")
    stages = Stages(4 if config.train is None else 5)
    stages.start("reading the corpus and holding out validation")
    encoder = Encoder.load(config.model, pooling=pooling.pooling, normalize=pooling.normalize,
                           max_length=config.max_length)
    validation, blocks = prepare_data(config, encoder, output)
    stages.start(f"scoring the base on {len(validation.queries):,} validation queries")
    with step(f"{METRIC} of the base"):
        base_score = score(encoder, validation, ENCODE_BATCH)
    stages.start("adapting")
    mark_started(output)
    stage = stage_config(config, output, blocks, pooling)
    from retromae.pretraining.run import pretrain  # the training stack: only once the inputs have passed their checks

    pretrain(stage)
    stages.start("guarding: scoring the adapted encoder against the base")
    prefix = f"encoder.{encoder.model.base_model_prefix}."
    best, scored, state = run_guard(encoder, validation, output / "training", prefix, config.mix,
                                    config.candidates == "last", base_score, ENCODE_BATCH)
    encoder.model.load_state_dict(state)
    export(encoder, config, output, pooling.normalize)
    record = {"metric": METRIC, "validation": config.validation or str(output / "validation"),
              "chosen": best.name, "base": base_score, "steps": stage.max_steps,
              "candidates": [{"name": c.name, "step": c.step, "weight": c.weight, METRIC: c.score} for c in scored]}
    report = summary(best, scored) + pseudo_query_caution(config, best)
    if config.train is not None:
        stages.start(f"fine-tuning the adapted encoder on {config.train}")
        record["finetuned"] = finetune_adapted(config, output, validation)
        report += f"\nfine-tuned on {config.train}: {record['finetuned']:.4f} on the same validation set"
    write_text_atomic(output / GUARD_FILE, json.dumps(record, indent=2) + "\n")
    print(report, file=sys.stderr)
    return output


def finetune_adapted(config: AdaptConfig, output: Path, validation: RetrievalSet) -> float:
    """`retromae finetune` of OUTPUT/encoder on --train into OUTPUT/finetuned/ (its defaults; the adapted encoder's
    pooling and similarity); returns the fine-tuned encoder's score on the validation set."""
    tuned = finetune(FinetuneConfig(model=str(output / "encoder"), data=config.train, split=config.train_split,
                                    output=str(output / "finetuned"), seed=config.seed, resume=config.resume,
                                    overwrite=config.overwrite, mixed_precision=config.mixed_precision))
    return score(Encoder.load(tuned / "encoder", max_length=config.max_length), validation, ENCODE_BATCH)


def prepare_data(config: AdaptConfig, encoder: Encoder, output: Path) -> tuple[RetrievalSet, int]:
    """The validation set (--validation's sample, or pseudo-queries of held-out documents written to
    OUTPUT/validation/), the training corpus (OUTPUT/data/train.jsonl) and its number of blocks."""
    where = ", ".join(config.corpus)
    with step(f"reading {where}"):
        documents = read_documents(config.corpus)
        check_language(encoder.tokenizer, documents, config.model, where)
        if config.validation is not None:
            full = load_retrieval_set(Path(config.validation), config.validation_split)
            validation = sample_retrieval_set(full, config.validation_queries, config.validation_documents,
                                              config.seed)
            training = documents
        else:
            split = split_corpus(documents, config.validation_queries, config.seed, where)
            write_validation(split, config.validation_documents, config.seed, output / "validation")
            validation = load_retrieval_set(output / "validation", "test")
            training = split.training
        write_training_corpus(training, output / "data" / "train.jsonl")
    store = TokenStore.build_or_load([str(output / "data" / "train.jsonl")], encoder.tokenizer, config.max_length,
                                     cache_dir=Path(config.cache_dir) if config.cache_dir else None)
    return validation, len(store)


def budget(config: AdaptConfig, blocks: int) -> int:
    """--max-steps, else --passes over the training blocks at --batch-size, at most --step-cap (at least 2 steps:
    one to warm the heads, one to move the encoder)."""
    if config.max_steps is not None:
        return config.max_steps
    return max(2, min(config.step_cap, math.ceil(config.passes * blocks / config.batch_size)))


def stage_config(config: AdaptConfig, output: Path, blocks: int, pooling: PoolingConfig) -> StageConfig:
    """The `retromae pretrain` run of the training stage, in OUTPUT/training/: the heads warmed for --head-warmup
    of the steps before the encoder moves, a checkpoint for each of --checkpoints: all kept when the guard scores
    them (--candidates all), else only the latest, which is what --resume and the guard read."""
    steps = budget(config, blocks)
    headless = not OBJECTIVES[config.objective].trains_a_head()  # no fresh head to warm: the encoder trains at once
    warmup = 0 if headless else min(steps - 1, round(config.head_warmup * steps))
    return StageConfig(
        model=config.model, corpus=[str(output / "data" / "train.jsonl")], output=str(output / "training"),
        objective=config.objective, decoder_layers=config.decoder_layers, max_length=config.max_length,
        **({} if config.decoding is None else {"decoding": config.decoding}),
        pooling=pooling.pooling, normalize=pooling.normalize, max_steps=steps, batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps, learning_rate=config.learning_rate,
        head_learning_rate=config.head_learning_rate, freeze_encoder_steps=warmup,
        weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio, max_grad_norm=config.max_grad_norm,
        mixed_precision=config.mixed_precision, gradient_checkpointing=config.gradient_checkpointing,
        compile=config.compile, group_by_length=config.group_by_length, seed=config.seed, log_every=config.log_every,
        save_every=math.ceil(steps / config.checkpoints),
        keep_checkpoints=config.checkpoints + 1 if config.candidates == "all" else 1,
        resume=config.resume, overwrite=config.overwrite, num_workers=config.num_workers,
        report_to=config.report_to, distributed_timeout=config.distributed_timeout, cache_dir=config.cache_dir)


def export(encoder: Encoder, config: AdaptConfig, output: Path, normalize: bool) -> None:
    """OUTPUT/encoder/ and OUTPUT/sentence-transformer/ of the encoder as it now is, with the base's pooling,
    similarity and declared input length."""
    export_encoder(encoder.model, encoder.tokenizer, output / "encoder", pooling=encoder.pooling,
                   normalize=normalize, max_length=declared_max_length(config.model))
    export_sentence_transformer(output / "encoder", output / "sentence-transformer", normalize=normalize)


def pseudo_query_caution(config: AdaptConfig, best: Candidate) -> str:
    """A warning when an adapted candidate won on pseudo-queries with an objective whose self-made pairs are pieces
    of one document, the very task those pseudo-queries pose (docs/RESULTS.md, section 10: on SciFact, cropping
    gained +0.043 on them and lost 0.018 NDCG@10 on the real test queries)."""
    if config.validation is not None or best.step == 0 or OBJECTIVES[config.objective].corpus_views == "blocks":
        return ""
    return (f"\ncaution: {config.objective} trains on pieces of one document, the kind of pair the pseudo-queries "
            "are, so they favour it; check the result on queries of your own (--validation)")


def summary(best: Candidate, scored: list[Candidate]) -> str:
    """Every candidate's score, then the verdict against the base, in plain words."""
    base = scored[0].score
    lines = [f"validation {METRIC}:"] + [f"  {c.name:<45} {c.score:.4f}" for c in scored]
    if best.step == 0:
        lines.append(f"no candidate beat the base ({base:.4f}): exported the base unchanged")
    else:
        lines.append(f"exported {best.name}: {best.score:.4f}, {best.score - base:+.4f} over the base ({base:.4f})")
    return "\n".join(lines)
