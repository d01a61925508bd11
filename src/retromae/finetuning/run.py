"""Fine-tuning from end to end: config → training data → negatives → dual encoder → training loop → export.

Owns `finetune(config)`; its options are `FinetuneConfig` (`retromae.finetuning.config`). Does not own reading data,
mining, batching, the model or the loop; it wires them together. The output folder has the pre-training
layout: `encoder/` and `sentence-transformer/` (the passage tower, with the pooling it was trained with;
untied runs add `query-encoder/` and `query-sentence-transformer/`), `config.json`, `metrics.jsonl`,
`checkpoints/` and, when negatives are mined, `negatives/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retromae.data.training_groups import TrainingSet, load_training_data
from retromae.finetuning.batches import GroupBatchSampler, GroupCollator, GroupDataset, count_tokens
from retromae.finetuning.config import FinetuneConfig
from retromae.finetuning.memory import measure_step_memory, memory_budget, plan_memory
from retromae.finetuning.model import DualEncoder, LossOptions, estimated_step_seconds, freeze_unused_parameters
from retromae.finetuning.negatives import NEGATIVES_DIR, Miner, NegativeRefresher, load_latest_negatives, save_negatives
from retromae.finetuning.plan import plan_line, resolve_defaults, resolve_steps
from retromae.models.encoder import Encoder, side_prefix
from retromae.models.export import export_encoder, export_sentence_transformer
from retromae.models.model_card import write_model_cards
from retromae.models.model_source import check_unknown_share
from retromae.runtime.broadcast import from_main
from retromae.runtime.console import say
from retromae.runtime.options import ConfigError
from retromae.training.checkpoints import latest_checkpoint
from retromae.training.loop import Trainer
from retromae.training.setup import claim_output, start_run, whole_model

TOKENIZER_SAMPLE = 200  # passages checked for [UNK] before training
OUTPUTS = ("encoder", "sentence-transformer", "query-encoder", "query-sentence-transformer", NEGATIVES_DIR)


def _load_encoders(config: FinetuneConfig, device) -> tuple[Encoder, Encoder]:
    """(passage encoder, query encoder): the same object unless --untie, where each tower of an untied fine-tune
    given as the base continues its own side (`model_source.resolve_model`)."""
    sides = ("passage", "query") if config.untie else (None,)
    towers = [Encoder.load(config.model, config.pooling, config.normalize, device=device, side=side)
              for side in sides]
    return towers[0], towers[-1]


def _check_data(config: FinetuneConfig, data: TrainingSet, source: str) -> None:
    if config.distill and not data.has_scores:
        raise ConfigError(f"--distill: {data.source} has no teacher scores; {_scoring_hint(config)}")
    if config.distill and source != "file":
        raise ConfigError("--distill: needs --negatives file (the scored negatives of the training file)")
    if source == "file" and not any(example.negatives for example in data.examples):
        raise ConfigError(f"--negatives: {data.source} lists no negatives; use --negatives none, bm25 or model")


def _scoring_hint(config: FinetuneConfig) -> str:
    """How to give training data teacher scores: score its training file (a folder is mined into one first)."""
    scored = "`retromae score --model RERANKER --data {} --output SCORED.jsonl` (RERANKER: the reranker/ of a " \
             "`retromae train-reranker` run), then fine-tune on SCORED.jsonl"
    if Path(config.data).is_file():
        return f"add them with {scored.format(config.data)}"
    return (f"mine a training file first (`retromae mine --model {config.model} --data {config.data} --split "
            f"{config.split} --output MINED.jsonl`), then score it with {scored.format('MINED.jsonl')}")


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
                          distill_temperature=config.distill_temperature, chunk_size=config.chunk_size or 0)
    return DualEncoder(query.model, passage.model if config.untie else None, passage.config, options)


def finetune(config: FinetuneConfig | None = None, /, **options: Any) -> Path:
    """Fine-tune a dense retriever as `config` (or `FinetuneConfig(**options)`) says; returns the output folder."""
    config = config if config is not None else FinetuneConfig(**options)
    output = Path(config.output)
    accelerator = start_run(config, ("--refresh-negatives-every", "mine the negatives once, before training")
                            if config.refresh_negatives_every else None)
    passage_encoder, query_encoder = _load_encoders(config, accelerator.device)
    passage_encoder.check_lengths(config)
    data, source = _training_data(config, passage_encoder)
    resolve_defaults(config, data, passage_encoder.tokenizer, passage_encoder.model.config, accelerator.num_processes)
    group_size = config.resolved_group_size(source)
    prefixes = training_prefixes(config, passage_encoder, query_encoder)

    def sampler(rank: int, world: int, start: int) -> GroupBatchSampler:
        return GroupBatchSampler(data, config.batch_size, group_size, config.seed, rank, world, start,
                                 with_scores=config.distill, accumulation=config.gradient_accumulation_steps)

    probe = sampler(0, accelerator.num_processes, 0)  # its batches drawn once the negatives are in place
    resolve_steps(config, probe.batches_per_epoch)  # a count of steps beyond the step domain refused before the claim
    claim_output(config, "finetune", OUTPUTS, accelerator)
    miner = Miner(data, config, passage_encoder, query_encoder if config.untie else None, config.query_max_length,
                  config.passage_max_length, config.encode_batch_size, prefixes)
    _prepare_negatives(config, data, source, miner, accelerator)
    model = _dual_encoder(config, passage_encoder, query_encoder, group_size)
    collate, dataset = GroupCollator(passage_encoder.tokenizer, config.query_max_length,
                                     config.passage_max_length, prefixes), GroupDataset(data)
    _fit_to_first_batch(config, model, collate([dataset[group] for group in next(iter(probe))]),
                        passage_encoder.tokenizer.pad_token_id, accelerator, len(data.examples), group_size)
    refresher = (NegativeRefresher(miner, config.refresh_negatives_every, config.seed)
                 if config.refresh_negatives_every else None)
    trainer = Trainer(model, dataset, collate, config, count_tokens=count_tokens, accelerator=accelerator,
                      batch_sampler=sampler, on_step=refresher, description=describe(config, source))
    trainer.run()
    trained = whole_model(accelerator, trainer.model,
                          lambda: _dual_encoder(config, *_load_encoders(config, accelerator.device), group_size))
    if accelerator.is_main_process:
        _export(trained, passage_encoder, config, describe(config, source), prefixes)
    accelerator.wait_for_everyone()
    trainer.say_summary()
    return output


def _training_data(config: FinetuneConfig, passage_encoder: Encoder) -> tuple[TrainingSet, str]:
    """The training set (its texts checked against the tokenizer's vocabulary) and where its negatives come from."""
    data = load_training_data(config.data, config.split)
    sample = passage_encoder.tokenize(data.texts[:TOKENIZER_SAMPLE], config.passage_max_length)
    check_unknown_share(passage_encoder.tokenizer, [token for ids in sample for token in ids], config.model,
                        data.source)
    source = config.negative_source(Path(config.data).is_dir())
    _check_data(config, data, source)
    return data, source


def _fit_to_first_batch(config: FinetuneConfig, model: DualEncoder, first: dict, pad_id: int, accelerator,
                        queries: int, group_size: int) -> None:
    """The parameters no loss reaches frozen, and the memory and time plan, both from the first batch."""
    first = {key: value.to(accelerator.device) for key, value in first.items()}
    freeze_unused_parameters(model, first)
    _plan(config, model, first, pad_id, accelerator, queries, group_size)


def _export(trained: DualEncoder, passage_encoder: Encoder, config: FinetuneConfig, description: str,
            prefixes: dict[str, str]) -> None:
    """The towers as encoder and sentence-transformers folders, each with its model card, naming the `prefixes` they
    were trained with as their prompts."""
    output = Path(config.output)
    export_towers(trained, passage_encoder, output, passage_encoder.max_length, prefixes)
    folders = [output / f"{tower}{kind}" for tower in ("", "query-") for kind in ("encoder", "sentence-transformer")]
    write_model_cards(folders, f"{output.name}: a dense retriever fine-tuned by retromae",
                      finetuning_facts(config, description))


def _plan(config: FinetuneConfig, model: DualEncoder, first: dict, pad_id: int, accelerator, queries: int,
          group_size: int) -> None:
    """Plan memory and time on the main process and print the plan line: the gradient-caching chunk size is
    --chunk-size, else the one `plan_memory` chooses for the memory this process may use; every process trains with
    the main process's (`from_main`)."""
    chunk = ""
    if accelerator.is_main_process:
        with accelerator.autocast():
            memory = measure_step_memory(model, first, config.query_max_length, config.passage_max_length, pad_id)
            plan = plan_memory(memory, config.batch_size, config.batch_size * group_size,
                               memory_budget(accelerator.device), accelerator.device.type, config.chunk_size)
            model.options.chunk_size = plan.chunk_size
            chunk = str(plan.chunk_size)
            per_step = estimated_step_seconds(model, first)
        say(plan_line(config, queries, group_size, per_step, plan.describe()))
    model.options.chunk_size = int(from_main(chunk, accelerator))


def describe(config: FinetuneConfig, negatives: str) -> str:
    """The run's name on its progress bar and summary, e.g. "fine-tuning with bm25 negatives (120 steps)"."""
    kind = {"none": "in-batch", "file": "the training file's"}.get(negatives, negatives)
    distill = ", distilling the teacher's scores" if config.distill else ""
    return f"fine-tuning with {kind} negatives{distill} ({config.max_steps:,} steps)"


def training_prefixes(config: Any, passage: Encoder, query: Encoder) -> dict[str, str]:
    """The prefix put before every query and every passage that a training run (`config`: finetune's or adapt's) trains,
    mines and scores on: `side_prefix`'s (--query-prefix and --passage-prefix as given,
    else the prompts the base's folder names, as E5's and BGE's recipes fine-tune with their prompts), which the
    export names as its prompts (`export_towers`, `adaptation.run.export`), so that it encodes as it was trained."""
    return {"query": side_prefix(query, "query", config.query_prefix),
            "passage": side_prefix(passage, "passage", config.passage_prefix)}


def export_towers(model: DualEncoder, encoder: Encoder, output: Path, max_length: int | None = None,
                  prefixes: dict[str, str] | None = None) -> None:
    """encoder/ + sentence-transformer/ of the passage tower; query-* folders too when the towers are untied, each
    encoder folder then recording its side (`tower`: `model_source.tower_side`).
    They keep the starting model's pooling and `max_length` (the length it declares, else the one it was loaded
    with), and name the `prefixes` (side → text) put in training as the prompts of their sides."""
    untied = model.untied_passage_model is not None
    towers = {"": ("passage" if untied else "", model.passage_model)}
    if untied:
        towers["query-"] = ("query", model.query_model)
    for prefix, (side, tower) in towers.items():
        export_encoder(tower, encoder.tokenizer, output / f"{prefix}encoder", encoder.pooling, encoder.normalize,
                       max_length, prefixes, side)
        export_sentence_transformer(output / f"{prefix}encoder", output / f"{prefix}sentence-transformer",
                                    encoder.pooling, encoder.normalize)


def finetuning_facts(config: Any, description: str) -> dict[str, str]:
    """The card's facts of a `retromae finetune` run; `description` (its progress bar's) names its negatives,
    distillation and steps."""
    data = f"{config.data} (split {config.split})" if Path(config.data).is_dir() else str(config.data)
    return {"Base model": str(config.model),
            "Training": f"dense-retrieval {description}",
            "Training data": data,
            "Steps": f"{config.max_steps:,} steps of {config.batch_size} queries per device, queries up to "
                     f"{config.query_max_length} and passages up to {config.passage_max_length} tokens, peak "
                     f"learning rate {config.learning_rate:g}, seed {config.seed}"}
