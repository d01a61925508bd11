"""Pre-training from end to end: config → token store or pairs → objective → training loop → exported encoder.

Owns: `PretrainConfig` (every option of `retromae pretrain`; the probes' come from `evaluation.probe`),
`pretrain(config)`, the choice of data for an objective (blocks of a token store; for the contrastive objectives,
two spans per document or given pairs), and continuing from a previous run (`--init-from`: its exported encoder
plus its pre-training head). Does not own data reading, masking, objectives or the loop itself; it wires them
together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torch.utils.data import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from retromae.backbone import load_masked_lm
from retromae.config import option, require, save_config
from retromae.data.collate import BlockCollator, BlockDataset
from retromae.data.contrastive import PairCollator, PairsDataset, SpanPairDataset
from retromae.data.token_store import TokenStore
from retromae.errors import ModelLoadError
from retromae.evaluation.probe import Probe, ProbeOptions
from retromae.export import export_encoder, export_sentence_transformer, load_head, save_head
from retromae.objectives import OBJECTIVES, PretrainingObjective, build_objective
from retromae.train import HeadTrainingConfig, Trainer, make_accelerator, seed_everything

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class PretrainConfig(ProbeOptions, HeadTrainingConfig):
    """Options of `retromae pretrain`; the papers' defaults where they give them."""

    model: str | None = option(None, "Hugging Face masked-LM checkpoint: hub name or local folder (BERT, RoBERTa, "
                                     "MiniLM); give this or --init-from")
    init_from: str | None = option(None, "continue from a previous `retromae pretrain` output folder: its encoder/ "
                                         "and pretrain_head.safetensors (stage 2); replaces --model")
    corpus: list[str] = option([], "corpus files or folders (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG])")
    pairs: str | None = option(None, "contrastive objectives: JSON lines of {\"query\": str, \"pos\": str or [str]} "
                                     "pairs, used instead of two spans per --corpus document")
    from_config: bool = option(False, "start from fresh weights built from --model's config (scratch)")
    objective: str = option("retromae", "pre-training objective", choices=tuple(OBJECTIVES))
    decoding: str = option("enhanced", "RetroMAE decoding: enhanced (two-stream, all tokens) or basic",
                           choices=("enhanced", "basic"))
    decoder_layers: int | None = option(None, "decoder transformer layers (default: the objective's; retromae 1, "
                                              "and enhanced decoding uses exactly 1; seed 3)")
    attention_window: int = option(2, "seed: the decoder attends to this many previous tokens (plus [CLS])")
    temperature: float = option(0.05, "contrastive objectives: InfoNCE temperature over cosine similarities")
    encoder_mask_ratio: float = option(0.3, "share of encoder input tokens masked (80/10/10 rule)")
    decoder_mask_ratio: float = option(0.5, "share of tokens hidden from the decoder")
    whole_word_mask: bool = option(False, "mask whole words rather than single sub-word tokens")
    max_length: int = option(256, "tokens per packed block, special tokens included (the paper uses 512)")
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)")

    def __post_init__(self) -> None:
        super().__post_init__()
        objective = OBJECTIVES[self.objective]
        require((self.model is None) != (self.init_from is None), "model",
                "give exactly one of --model and --init-from (which loads DIR/encoder)")
        require(not (self.init_from and self.from_config), "from_config", "cannot be combined with --init-from")
        require(0 < self.encoder_mask_ratio < 1, "encoder_mask_ratio", "must lie in (0, 1)")
        require(0 < self.decoder_mask_ratio < 1, "decoder_mask_ratio", "must lie in (0, 1)")
        require(self.decoder_layers is None or self.decoder_layers >= 1, "decoder_layers", "must be at least 1")
        objective.check_config(self)
        require(self.max_length >= 8, "max_length", "must be at least 8")
        require(self.pairs is None or objective.pair_batches, "pairs",
                f"the {self.objective} objective reads blocks of --corpus, not pairs")
        require(self.pairs is None or not self.corpus, "pairs", "give --pairs or --corpus, not both")
        require(len(self.corpus) > 0 or self.pairs is not None, "corpus", "give at least one corpus file")
        require(not (self.freeze_encoder_steps and self.objective == "contrastive"), "freeze_encoder_steps",
                "the contrastive objective has no head to train while the encoder is frozen")


def pretrain(config: PretrainConfig) -> Path:
    """Run pre-training as configured; returns the output folder."""
    output = Path(config.output)
    accelerator = make_accelerator(config)
    seed_everything(config.seed)
    encoder, tokenizer = load_backbone(config)
    objective = build_objective(config.objective, encoder, tokenizer, config)
    if config.init_from:
        init_head(objective, config)
    max_length = min(config.max_length, encoder.config.max_position_embeddings)
    with accelerator.main_process_first():  # one process tokenises; the others load its cache
        dataset, collate = pretraining_data(config, tokenizer, objective, max_length,
                                            show_progress=accelerator.is_local_main_process)
    probe = Probe(config, tokenizer, max_length, output, accelerator.is_main_process) if config.probing else None
    trainer = Trainer(objective, dataset, collate, config, accelerator=accelerator, log_extra=probe)
    if trainer.accelerator.is_main_process:
        save_config(config, output / "config.json")
    trainer.run()
    if trainer.accelerator.is_main_process:
        export_outputs(trainer.unwrapped_model, tokenizer, output)
        if probe is not None:
            probe.finish()
    trainer.accelerator.wait_for_everyone()
    return output


def load_backbone(config: PretrainConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """The masked LM to train: --model, or the encoder exported by the run named by --init-from."""
    if config.init_from is None:
        return load_masked_lm(config.model, from_config=config.from_config)
    encoder_dir = Path(config.init_from) / "encoder"
    if not encoder_dir.is_dir():
        raise ModelLoadError(f"--init-from {config.init_from}: no encoder/ folder; give the output folder of a "
                             "finished `retromae pretrain` run")
    return load_masked_lm(str(encoder_dir))


def init_head(objective: PretrainingObjective, config: PretrainConfig) -> None:
    """Load the previous run's MLM head and decoder into `objective`; its unused tensors are skipped, with a note."""
    previous = previous_objective(Path(config.init_from))
    try:
        unused = load_head(objective, Path(config.init_from), allow_unused=True)
    except ModelLoadError as error:
        raise ModelLoadError(f"--init-from {config.init_from}: the head of its {previous} run does not fit the "
                             f"{config.objective} objective ({error})") from error
    if unused:
        logger.warning("--init-from: the %s objective leaves %d tensors of the previous %s head unused (e.g. %s)",
                       config.objective, len(unused), previous, unused[0])


def previous_objective(folder: Path) -> str:
    """The objective named in a previous run's config.json (with its decoding), or 'unknown'."""
    try:
        saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unknown"
    name = saved.get("objective", "unknown")
    return f"{name} ({saved.get('decoding')} decoding)" if name.startswith("retromae") else name


def pretraining_data(config: PretrainConfig, tokenizer: PreTrainedTokenizerFast, objective: PretrainingObjective,
                     max_length: int, show_progress: bool = True) -> tuple[Dataset, Callable]:
    """Dataset and collator for the objective: blocks, or two views per example (spans or given pairs)."""
    if config.pairs is not None:
        return PairsDataset(config.pairs, tokenizer, max_length, config.seed), PairCollator(tokenizer)
    store = TokenStore.build_or_load(config.corpus, tokenizer, max_length,
                                     cache_dir=Path(config.cache_dir) if config.cache_dir else None,
                                     show_progress=show_progress)
    if objective.pair_batches:
        return SpanPairDataset(store, config.seed), PairCollator(tokenizer)
    return BlockDataset(store), BlockCollator(tokenizer)


def export_outputs(objective, tokenizer, output: Path) -> None:
    """encoder/, sentence-transformer/ and the pre-training head of a finished run."""
    export_encoder(objective.encoder, tokenizer, output / "encoder")
    export_sentence_transformer(output / "encoder", output / "sentence-transformer")
    save_head(objective, output)
