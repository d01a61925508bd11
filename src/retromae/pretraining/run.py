"""Pre-training from end to end: config → token store or pairs → objective → training loop → exported encoder.

Owns: `pretrain(config)` (its options, `PretrainConfig`, live in the import-light `retromae.pretraining.config`), the
choice of data for an objective (blocks of a token store; for the contrastive objectives, two spans per document or
given pairs), and continuing from a previous run (`--init-from`: its exported encoder plus its pre-training
head). Does not own data reading, masking, objectives or the loop itself; it wires them together.
`retromae.pretrain(...)` (`retromae.api`) calls `pretrain`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from retromae.data.collate import BlockCollator, BlockDataset
from retromae.data.contrastive import CropPairDataset, PairCollator, PairsDataset, SpanPairDataset
from retromae.data.token_store import TokenStore
from retromae.evaluation.probe_options import BEST_PROBE_DIR
from retromae.losses.vocabulary_choice import auto_kind
from retromae.losses.vocabulary_choice import describe as describe_choice
from retromae.models.export import (
    HEAD_FILE,
    HeadMismatchError,
    declared_max_length,
    export_encoder,
    export_sentence_transformer,
    load_head,
    save_head,
)
from retromae.models.masked_lm import check_max_length, load_masked_lm
from retromae.models.model_card import write_model_cards
from retromae.models.model_source import check_unknown_share, unfinished_run
from retromae.objectives import OBJECTIVES, PretrainingObjective, build_objective
from retromae.objectives.summary import describe_pretraining
from retromae.pretraining.config import PretrainConfig as PretrainConfig  # re-exported: `retromae pretrain`'s options
from retromae.runtime.broadcast import from_main
from retromae.runtime.console import say
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.lines import loads_finite, quoted, read_json_file
from retromae.runtime.options import config_to_dict
from retromae.training.loop import Trainer
from retromae.training.setup import AUTOCAST_DTYPES, claim_output, start_run, whole_model

logger = logging.getLogger(__name__)
OUTPUTS = ("encoder", "sentence-transformer", HEAD_FILE)  # beside the training loop's own (`TRAINING_OUTPUTS`)
CUDA_PADDING_MULTIPLE = 64  # batch lengths on CUDA: few shapes, each a multiple of the tensor cores' tiles
TOKENIZER_SAMPLE = 100_000  # corpus tokens checked for [UNK] before training


def pretrain(config: PretrainConfig | None = None, /, **options: Any) -> Path:
    """Run pre-training as `config` (or `PretrainConfig(**options)`) says; returns the output folder."""
    config = config if config is not None else PretrainConfig(**options)
    output = Path(config.output)
    accelerator = start_run(config, ("--probe/--probe-sts", "evaluate the encoder after training (retromae evaluate)")
                            if config.probing else None)
    encoder, tokenizer = load_backbone(config, cuda=accelerator.device.type == "cuda")
    check_max_length(encoder.config, config.max_length, "max_length", tokenizer)
    claim_output(config, "pretrain", OUTPUTS, accelerator)
    objective = build_objective(config.objective, encoder, tokenizer, config)
    choose_vocabulary_loss(objective, config, accelerator)
    if config.init_from:
        init_head(objective, config)
    with accelerator.main_process_first():  # one process tokenises; the others load its cache
        dataset, collate = pretraining_data(config, tokenizer, objective, config.max_length,
                                            show_progress=accelerator.is_local_main_process,
                                            pad_to_multiple_of=padding_multiple(config, accelerator.device))
    probe = make_probe(config, tokenizer, accelerator.is_main_process)
    trainer = Trainer(objective, dataset, collate, config, accelerator=accelerator, description=describe(config),
                      log_extra=probe)
    trainer.run()
    trained = whole_model(accelerator, trainer.model,
                          lambda: build_objective(config.objective, load_backbone(config)[0], tokenizer, config))
    if trainer.accelerator.is_main_process:
        export_outputs(trained, tokenizer, output, declared_max_length(model_source(config)))
        if probe is not None:
            probe.finish()
        write_cards(config, output)
    trainer.accelerator.wait_for_everyone()
    trainer.say_summary()
    return output


def choose_vocabulary_loss(objective: PretrainingObjective, config: PretrainConfig, accelerator) -> None:
    """On the CPU, `--vocabulary-loss auto` becomes the kernel measured fastest at the run's shapes on the main
    process's CPU (`retromae.losses.vocabulary_choice`), which every process runs (`from_main`), and the run's log
    says which; elsewhere, and for any other choice, as given."""
    if config.vocabulary_loss != "auto" or accelerator.device.type != "cpu":
        return
    kind = ""
    if accelerator.is_main_process:
        projection = objective.vocabulary.projection.weight  # (V, E)
        dtype = AUTOCAST_DTYPES.get(accelerator.mixed_precision, torch.float32)
        kind, timings, fresh = auto_kind(projection.shape[1], projection.shape[0],
                                         config.batch_size * config.max_length, dtype)
        say(describe_choice(kind, timings, fresh))
    objective.use_vocabulary_loss(from_main(kind, accelerator))


def make_probe(config: PretrainConfig, tokenizer: PreTrainedTokenizerFast, main_process: bool):
    """The retrieval probe the Trainer calls at log steps, or None without --probe/--probe-sts (nothing imported)."""
    if not config.probing:
        return None
    from retromae.evaluation.probe import Probe  # search, faiss and scipy: only for runs that probe

    return Probe(config, tokenizer, config.max_length, Path(config.output), main_process,
                 declared_max_length(model_source(config)))


def describe(config: PretrainConfig) -> str:
    """The run's name on its progress bar and summary, e.g. "pre-training RetroMAE (200 steps)"."""
    return f"pre-training {OBJECTIVES[config.objective].title or config.objective} ({config.max_steps:,} steps)"


def model_source(config: PretrainConfig) -> str:
    """The folder or hub name the encoder is loaded from."""
    return config.model if config.init_from is None else str(Path(config.init_from) / "encoder")


def load_backbone(config: PretrainConfig, cuda: bool = False) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """The masked LM to train: --model, or the encoder exported by the run named by --init-from; with the attention
    kernel --attention picks (`cuda`: whether the run trains on a GPU)."""
    if config.init_from is None:
        return load_masked_lm(config.model, from_config=config.from_config, attention=config.attention, cuda=cuda,
                              head_used=OBJECTIVES[config.objective].trains_mlm_head)
    encoder_dir = model_source(config)
    if not Path(encoder_dir).is_dir():
        found = unfinished_run(Path(config.init_from)) or "give the output folder of a finished `retromae pretrain` run"
        raise ModelLoadError(f"--init-from {config.init_from}: no encoder/ folder; {found}")
    return load_masked_lm(encoder_dir, head_restored=True, option="--init-from", attention=config.attention,
                          cuda=cuda)


def init_head(objective: PretrainingObjective, config: PretrainConfig) -> None:
    """Load the previous run's MLM head and decoder into `objective`; its unused tensors are skipped, with a note.
    Tensors it lacks are refused, or with --init-missing-head keep the fresh weights `objective` was built with (the
    same as from --model), with a note naming them."""
    previous = previous_objective(Path(config.init_from))
    try:
        unused, fresh = load_head(objective, Path(config.init_from), allow_unused=True,
                                  allow_missing=config.init_missing_head)
    except HeadMismatchError as error:
        raise ModelLoadError(f"--init-from {config.init_from}: the head of its {previous} run does not fit the "
                             f"{config.objective} objective ({error}); --init-missing-head starts the missing "
                             "tensors from fresh weights") from error
    if unused:
        logger.warning("--init-from: the %s objective leaves %d tensors of the previous %s head unused (e.g. %s)",
                       config.objective, len(unused), previous, quoted(unused[0]))
    if fresh:
        logger.warning("--init-missing-head: the %s objective starts %d tensors the previous %s head lacks from fresh "
                       "weights (%s)", config.objective, len(fresh), previous, ", ".join(head_modules(fresh)))


def head_modules(names: list[str]) -> list[str]:
    """Tensor names grouped by their module, e.g. ["decoder.0.*"] for every tensor of the first decoder layer."""
    return sorted({".".join(name.split(".")[:2]) + ".*" if name.count(".") > 1 else name for name in names})


def previous_objective(folder: Path) -> str:
    """The objective named in a previous run's config.json (with its variant, e.g. its decoding), or 'unknown'."""
    try:
        saved = loads_finite((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unknown"
    name = saved.get("objective") if isinstance(saved, dict) else None
    if not isinstance(name, str) or name not in OBJECTIVES:
        return name if isinstance(name, str) else "unknown"
    options = OBJECTIVES[name].options
    variant = options.from_values(saved).variant
    return f"{name} ({variant} {options.VARIANT})" if variant else name


def padding_multiple(config: PretrainConfig, device: torch.device) -> int | None:
    """The multiple batch lengths are rounded up to: --pad-to-multiple-of, else 64 on CUDA (at L=512 eight shapes,
    so cuDNN's attention plans and compiled graphs are built once each) and none on CPU (padding costs CPU time)."""
    if config.pad_to_multiple_of is not None:
        return config.pad_to_multiple_of or None
    return CUDA_PADDING_MULTIPLE if device.type == "cuda" else None


def pretraining_data(config: PretrainConfig, tokenizer: PreTrainedTokenizerFast, objective: PretrainingObjective,
                     max_length: int, show_progress: bool = True,
                     pad_to_multiple_of: int | None = None) -> tuple[Dataset, Callable]:
    """Dataset and collator for the objective: blocks, or two views per example (spans, crops or given pairs), or
    three (given triples), batches padded to a multiple of `pad_to_multiple_of`."""
    if config.pairs is not None:
        negatives = objective.pairs_views == "triples"
        pairs = PairsDataset(config.pairs, tokenizer, max_length, config.seed, negatives=negatives)
        return pairs, PairCollator(tokenizer, pad_to_multiple_of, max_length)
    store = TokenStore.build_or_load(config.corpus, tokenizer, max_length,
                                     cache_dir=Path(config.cache_dir) if config.cache_dir else None,
                                     show_progress=show_progress)
    check_unknown_share(tokenizer, store.first_ids(TOKENIZER_SAMPLE).tolist(), model_source(config),
                        ", ".join(map(str, config.corpus)))
    if objective.corpus_views == "blocks":
        return BlockDataset(store), BlockCollator(tokenizer, pad_to_multiple_of, max_length)
    views = CropPairDataset if objective.corpus_views == "crops" else SpanPairDataset
    return views(store, config.seed, objective.min_document_tokens, config.batch_size,
                 config.objective), PairCollator(tokenizer, pad_to_multiple_of, max_length)


def write_cards(config: PretrainConfig, output: Path) -> None:
    """The model cards of encoder/, sentence-transformer/ and, with --keep-best-probe, the best probe's folders
    (the step it was taken at)."""
    title = f"{output.name}: an encoder pre-trained with {config.objective}"
    write_model_cards([output / "encoder", output / "sentence-transformer"], title, pretraining_facts(config))
    best = output / BEST_PROBE_DIR
    if config.keep_best_probe and best.is_dir():
        from retromae.evaluation.probe import BEST_FILE  # search and faiss: only for runs that probe

        probe = read_json_file(best / BEST_FILE)
        facts = pretraining_facts(config, steps=probe["step"])
        metric = probe["metric"]
        facts["Chosen by"] = f"the best probe score ({metric} {probe[metric]:.4f}) at step {probe['step']}"
        write_model_cards([best / "encoder", best / "sentence-transformer"], f"{title} (best probe)", facts)


def export_outputs(objective, tokenizer, output: Path, max_length: int | None = None) -> None:
    """encoder/, sentence-transformer/ (the objective's pooling, the source model's max length) and the
    pre-training head."""
    normalize = getattr(objective, "normalize", False)  # an objective trained in a cosine similarity says so
    export_encoder(objective.encoder, tokenizer, output / "encoder", pooling=objective.pooling, normalize=normalize,
                   max_length=max_length)
    export_sentence_transformer(output / "encoder", output / "sentence-transformer", normalize=normalize)
    save_head(objective, output)


def pretraining_facts(config: Any, steps: int | None = None) -> dict[str, str]:
    """The card's facts of a `retromae pretrain` run (`steps`: those done, when fewer than --max-steps)."""
    done = config.max_steps if steps is None else steps
    start = (f"{config.init_from} (continued pre-training)" if config.init_from else
             f"random weights in the configuration of {config.model}" if config.from_config else config.model)
    return {"Base model": start,
            "Training": f"pre-training: {describe_pretraining(config_to_dict(config))}",
            "Training data": ", ".join(map(str, config.corpus or [config.pairs])),
            "Steps": (f"{done:,} of {config.max_steps:,}" if done != config.max_steps else f"{done:,}")
                     + f" steps of {config.batch_size} blocks of {config.max_length} tokens per device, peak learning "
                       f"rate {config.learning_rate:g}, seed {config.seed}"}
