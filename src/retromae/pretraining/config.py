"""The options of `retromae pretrain`, declared apart from the run so that parsing them imports no torch.

Owns: `PretrainConfig`, the names of the objectives it offers, and `ProbeOptions` (its `--probe*` and
`--keep-best-probe` options, run by `retromae.evaluation.probe`). Checking a config asks each objective class
(`retromae.objectives`) what it accepts, so constructing one imports torch; declaring the options does not.
Does not own pre-training itself (`retromae.pretraining.run`).
"""

from __future__ import annotations

from dataclasses import dataclass

from retromae.backbones import ATTENTION_NAMES
from retromae.backbones.families import family_titles
from retromae.config import option, require
from retromae.training_config import HeadTrainingConfig

# The keys of `retromae.objectives.OBJECTIVES`, in its order; named here so that the options need no objective code.
OBJECTIVE_NAMES = ("retromae", "mlm", "seed", "contrastive", "retromae+contrastive", "dupmae", "condenser",
                   "cocondenser", "contriever", "simcse", "tsdae", "cropping")
PROBE_METRICS = ("ndcg@10", "recall@100", "sts_spearman")
BEST_PROBE_DIR = "best-probe"  # where --keep-best-probe exports (`retromae.evaluation.probe`)
VOCABULARY_LOSS_NAMES = ("auto", "chunked", "liger", "unfused")  # `retromae.fused_loss.VOCABULARY_LOSSES`


@dataclass(kw_only=True)
class ProbeOptions:
    """Options of the retrieval probes run while pre-training (a mixin of `PretrainConfig`)."""

    probe: str | None = option(None, "probe retrieval while training: a BEIR (or MS MARCO) folder whose --probe-split "
                                     "queries are searched zero-shot with the encoder's vector (the objective's "
                                     "pooling: [CLS], mean for Contriever); NDCG@10 and Recall@100 go into "
                                     "metrics.jsonl as probe_ndcg@10, probe_recall@100")
    probe_split: str = option("test", "qrels split of --probe")
    probe_sts: str | None = option(None, "probe STS too (or only): an STS Benchmark tsv; Spearman of cosine "
                                         "similarities → probe_sts_spearman")
    probe_every: int = option(500, "probe every N steps (a multiple of --log-every), before the first step and at "
                                   "the last")
    probe_queries: int = option(200, "probe a seeded sample of at most this many judged queries")
    probe_documents: int = option(5000, "probe against the sampled queries' judged documents plus a seeded sample "
                                        "of others, this many documents in all (more when the judged ones are more)")
    probe_seed: int = option(0, "seed of the query and document sample (the same sample for every run)")
    probe_batch_size: int = option(128, "texts per forward pass while probing")
    probe_metric: str | None = option(None, "the probe score --keep-best-probe maximises (default: ndcg@10, or "
                                            "sts_spearman with --probe-sts alone)", choices=PROBE_METRICS)
    keep_best_probe: bool = option(False, "export the encoder of the best probe score to OUTPUT/best-probe/ "
                                          "(encoder/, sentence-transformer/, pretrain_head.safetensors, probe.json)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.probe_every > 0 and (self.probe_every % self.log_every == 0 or not self.probing), "probe_every",
                f"must be a positive multiple of --log-every ({self.log_every}): probes join the logged records")
        require(self.probe_queries > 0, "probe_queries", "must be positive")
        require(self.probe_documents > 0, "probe_documents", "must be positive")
        require(self.probe_batch_size > 0, "probe_batch_size", "must be positive")
        require(self.probing or not self.keep_best_probe, "keep_best_probe", "needs --probe or --probe-sts")
        require(self.probe_metric is None or self.probe_metric_key in self.probe_keys, "probe_metric",
                f"{self.probe_metric} is not probed: {'give --probe-sts' if self.probe else 'give --probe'}")

    @property
    def probing(self) -> bool:
        return self.probe is not None or self.probe_sts is not None

    @property
    def probe_keys(self) -> list[str]:
        """The record keys the probes write (besides probe_seconds)."""
        retrieval = ["probe_ndcg@10", "probe_recall@100"] if self.probe else []
        return retrieval + (["probe_sts_spearman"] if self.probe_sts else [])

    @property
    def probe_metric_key(self) -> str:
        """The record key of the score the best probe maximises."""
        return f"probe_{self.probe_metric}" if self.probe_metric else self.probe_keys[0]


@dataclass(kw_only=True)
class PretrainConfig(ProbeOptions, HeadTrainingConfig):
    """Options of `retromae pretrain`; the papers' defaults where they give them."""

    model: str | None = option(None, "Hugging Face masked-LM checkpoint: hub name or local folder, of a supported "
                                     f"family ({family_titles()})", required_unless="--init-from")
    init_from: str | None = option(None, "continue from a previous `retromae pretrain` output folder: its encoder/ "
                                         "and pretrain_head.safetensors (stage 2)", required_unless="--model")
    init_missing_head: bool = option(False, "with --init-from: start the head tensors the previous run lacks (e.g. "
                                            "RetroMAE's decoder after an MLM run) from fresh weights, as a run from "
                                            "--model does, and name them; without it such a run is refused")
    corpus: list[str] = option([], "corpus files or folders (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG])",
                               required_unless="--pairs")
    pairs: str | None = option(None, "contrastive objectives: JSON lines of {\"query\": str, \"pos\": str or [str]} "
                                     "pairs, used instead of two spans per --corpus document; simcse (supervised) "
                                     "also needs \"neg\": str or [str], hard negatives")
    from_config: bool = option(False, "start from fresh weights built from --model's config (scratch)")
    attention: str = option("auto", "the backbone's attention kernel; auto: FlashAttention-2 on CUDA where the model "
                                    "supports it and flash-attn is installed (padded batches run unpadded, as "
                                    "variable-length sequences), else PyTorch SDPA, else eager (DeBERTa)",
                            choices=ATTENTION_NAMES)
    objective: str = option("retromae", "pre-training objective", choices=OBJECTIVE_NAMES)
    vocabulary_loss: str = option("auto", "how the losses on the vocabulary run: fused with the projection onto it, "
                                          "a chunk of rows at a time, so the full logits never exist (chunked: "
                                          "PyTorch; liger: Liger Kernel's fused linear cross-entropy, CUDA; auto: "
                                          "liger on CUDA where liger-kernel is installed, else chunked), or unfused "
                                          "(every logit at once, then the loss)", choices=VOCABULARY_LOSS_NAMES)
    decoding: str = option("enhanced", "RetroMAE decoding: enhanced (two-stream, all tokens) or basic",
                           choices=("enhanced", "basic"))
    decoder_layers: int | None = option(None, "decoder (or head) transformer layers (default: the objective's; "
                                              "retromae and dupmae 1, and enhanced decoding uses exactly 1; seed 3; "
                                              "condenser and cocondenser 2)")
    attention_window: int = option(2, "seed: the decoder attends to this many previous tokens (plus [CLS])")
    temperature: float | None = option(None, "contrastive objectives: similarity temperature (default: the "
                                             "objective's; 0.05 over cosine similarities, cocondenser 1.0 over dot "
                                             "products, contriever 0.05 over dot products)")
    bow_weight: float = option(0.1, "dupmae: weight of the bag-of-words loss")
    skip_from: int | None = option(None, "condenser, cocondenser: the layer whose token states the head reads "
                                         "(default: half the depth, 6 of 12)")
    momentum: float = option(0.9995, "contriever: momentum of the key encoder's moving average")
    queue_size: int = option(131_072, "contriever: keys kept in the MoCo queue as negatives")
    contrastive_weight: float | None = option(None, "retromae+contrastive: weight of the InfoNCE term in the sum "
                                                    "(default 1, the paper's sum; 0 = RetroMAE alone on the same "
                                                    "pairs); from random weights it must be given (docs/guide.md)")
    encoder_mask_ratio: float = option(0.3, "share of encoder input tokens masked (80/10/10 rule)")
    decoder_mask_ratio: float = option(0.5, "share of tokens hidden from the decoder")
    whole_word_mask: bool = option(False, "mask whole words rather than single sub-word tokens")
    max_length: int = option(256, "tokens per packed block, special tokens included (the paper uses 512)")
    pad_to_multiple_of: int | None = option(None, "round each batch's length up to a multiple of this (few distinct "
                                                  "shapes for the GPU's kernel caches and --compile); default: 64 on "
                                                  "CUDA, none on CPU (0: none)")
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)")

    def __post_init__(self) -> None:
        from retromae.fused_loss import liger_installed
        from retromae.objectives import OBJECTIVES  # torch: only once a run is configured, never to parse --help

        super().__post_init__()
        objective = OBJECTIVES[self.objective]
        require((self.model is None) != (self.init_from is None), "model",
                "give exactly one of --model and --init-from (which loads DIR/encoder)")
        require(not (self.init_from and self.from_config), "from_config", "cannot be combined with --init-from")
        require(self.init_from is not None or not self.init_missing_head, "init_missing_head",
                "only with --init-from (from --model the whole head starts fresh)")
        require(0 < self.encoder_mask_ratio < 1, "encoder_mask_ratio", "must lie in (0, 1)")
        require(0 < self.decoder_mask_ratio < 1, "decoder_mask_ratio", "must lie in (0, 1)")
        require(self.decoder_layers is None or self.decoder_layers >= 1, "decoder_layers", "must be at least 1")
        objective.check_config(self)
        require(self.vocabulary_loss != "liger" or liger_installed(), "vocabulary_loss",
                "liger needs Liger Kernel (pip install liger-kernel) and a CUDA device; give auto or chunked")
        require(self.max_length >= 8, "max_length", "must be at least 8")
        require(self.pairs is None or objective.pairs_views is not None, "pairs",
                f"the {self.objective} objective reads --corpus, not pairs")
        require(self.pairs is None or not self.corpus, "pairs", "give --pairs or --corpus, not both")
        require(len(self.corpus) > 0 or self.pairs is not None, "corpus", "give at least one corpus file")
        require(self.contrastive_weight is None or self.objective == "retromae+contrastive", "contrastive_weight",
                "only the retromae+contrastive objective has a contrastive term to weigh")
        require(not (self.freeze_encoder_steps and self.objective in ("contrastive", "contriever", "cropping")),
                "freeze_encoder_steps", f"the {self.objective} objective has no head to train while the encoder is "
                                        "frozen")
