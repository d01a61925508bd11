"""The options of `retromae pretrain`, declared apart from the run so that parsing them imports no torch.

Owns: `PretrainConfig` and the names of the objectives it offers. Checking a config asks each objective class
(`retromae.objectives`) what it accepts, so constructing one imports torch; declaring the options does not.
Does not own pre-training itself (`retromae.pretrain`).
"""

from __future__ import annotations

from dataclasses import dataclass

from retromae.config import option, require
from retromae.training_config import HeadTrainingConfig

# The keys of `retromae.objectives.OBJECTIVES`, in its order; named here so that the options need no objective code.
OBJECTIVE_NAMES = ("retromae", "mlm", "seed", "contrastive", "retromae+contrastive")


@dataclass(kw_only=True)
class PretrainConfig(HeadTrainingConfig):
    """Options of `retromae pretrain`; the papers' defaults where they give them."""

    model: str | None = option(None, "Hugging Face masked-LM checkpoint: hub name or local folder (BERT, RoBERTa, "
                                     "MiniLM)", required_unless="--init-from")
    init_from: str | None = option(None, "continue from a previous `retromae pretrain` output folder: its encoder/ "
                                         "and pretrain_head.safetensors (stage 2)", required_unless="--model")
    corpus: list[str] = option([], "corpus files or folders (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG])",
                               required_unless="--pairs")
    pairs: str | None = option(None, "contrastive objectives: JSON lines of {\"query\": str, \"pos\": str or [str]} "
                                     "pairs, used instead of two spans per --corpus document")
    from_config: bool = option(False, "start from fresh weights built from --model's config (scratch)")
    objective: str = option("retromae", "pre-training objective", choices=OBJECTIVE_NAMES)
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
        from retromae.objectives import OBJECTIVES  # torch: only once a run is configured, never to parse --help

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
