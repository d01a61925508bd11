"""Pre-training from end to end: config → token store → objective → training loop → exported encoder.

Owns: `PretrainConfig` (every option of `retromae pretrain`) and `pretrain(config)`. Does not own data
reading, masking, objectives or the loop itself; it wires them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retromae.backbone import load_masked_lm
from retromae.config import option, require, save_config
from retromae.data.collate import BlockCollator, BlockDataset
from retromae.data.token_store import TokenStore
from retromae.export import export_encoder, export_sentence_transformer, save_head
from retromae.objectives import OBJECTIVES, build_objective
from retromae.train import Trainer, TrainingConfig, make_accelerator, seed_everything


@dataclass(kw_only=True)
class PretrainConfig(TrainingConfig):
    """Options of `retromae pretrain`; the paper's defaults where it gives them."""

    model: str = option(help="Hugging Face masked-LM checkpoint: hub name or local folder (BERT, RoBERTa, MiniLM)")
    corpus: list[str] = option(help="corpus files or folders (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG])")
    from_config: bool = option(False, "start from fresh weights built from --model's config (scratch)")
    objective: str = option("retromae", "pre-training objective", choices=tuple(OBJECTIVES))
    decoding: str = option("enhanced", "RetroMAE decoding: enhanced (two-stream, all tokens) or basic",
                           choices=("enhanced", "basic"))
    decoder_layers: int = option(1, "decoder transformer layers (basic decoding only; enhanced uses one)")
    encoder_mask_ratio: float = option(0.3, "share of encoder input tokens masked (80/10/10 rule)")
    decoder_mask_ratio: float = option(0.5, "share of tokens hidden from the decoder")
    whole_word_mask: bool = option(False, "mask whole words rather than single sub-word tokens")
    max_length: int = option(256, "tokens per packed block, special tokens included (the paper uses 512)")
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.encoder_mask_ratio < 1, "encoder_mask_ratio", "must lie in (0, 1)")
        require(0 < self.decoder_mask_ratio < 1, "decoder_mask_ratio", "must lie in (0, 1)")
        require(self.decoder_layers >= 1, "decoder_layers", "must be at least 1")
        require(self.decoding == "basic" or self.decoder_layers == 1, "decoder_layers",
                "enhanced decoding uses exactly one layer; pass --decoding basic for deeper decoders")
        require(self.max_length >= 8, "max_length", "must be at least 8")
        require(len(self.corpus) > 0, "corpus", "give at least one corpus file")


def pretrain(config: PretrainConfig) -> Path:
    """Run pre-training as configured; returns the output folder."""
    output = Path(config.output)
    accelerator = make_accelerator(config)
    seed_everything(config.seed)
    encoder, tokenizer = load_masked_lm(config.model, from_config=config.from_config)
    max_length = min(config.max_length, encoder.config.max_position_embeddings)
    with accelerator.main_process_first():  # one process tokenises; the others load its cache
        store = TokenStore.build_or_load(config.corpus, tokenizer, max_length,
                                         cache_dir=Path(config.cache_dir) if config.cache_dir else None,
                                         show_progress=accelerator.is_local_main_process)
    objective = build_objective(config.objective, encoder, tokenizer, config)
    trainer = Trainer(objective, BlockDataset(store), BlockCollator(tokenizer), config, accelerator=accelerator)
    if trainer.accelerator.is_main_process:
        save_config(config, output / "config.json")
    trainer.run()
    if trainer.accelerator.is_main_process:
        export_outputs(trainer.unwrapped_model, tokenizer, output)
    trainer.accelerator.wait_for_everyone()
    return output


def export_outputs(objective, tokenizer, output: Path) -> None:
    """encoder/, sentence-transformer/ and the pre-training head of a finished run."""
    export_encoder(objective.encoder, tokenizer, output / "encoder")
    export_sentence_transformer(output / "encoder", output / "sentence-transformer")
    save_head(objective, output)
