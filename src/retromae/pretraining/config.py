"""The options of `retromae pretrain`, declared apart from the run so that parsing them imports no torch.

Owns: `PretrainConfig` and `ProbeOptions` (its `--probe*` and `--keep-best-probe` options, run by
`retromae.evaluation.probe`). The objectives it offers and their options come from the table in
`retromae.objectives`: each objective's options class (`retromae.objectives.options`) gives its flat fields
(`ObjectiveOptionFields`), one section of `--help` each, and a config file may nest them under the objective's name
(`retromae: {decoder_mask_ratio: 0.5}`). Checking a config asks the objective's class what it accepts, so
constructing one imports torch; declaring the options does not. Does not own pre-training itself
(`retromae.pretraining.run`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from retromae.backbones import ATTENTION_NAMES
from retromae.backbones.families import family_titles
from retromae.config import NON_NEGATIVE, OPEN_UNIT, POSITIVE, SEED, Options, at_least, option, require
from retromae.evaluation.metric_registry import CORRELATION, RANKING, Metric, long_title, parse_key, reported_keys
from retromae.objectives import OBJECTIVES, flat_options
from retromae.training_config import HeadTrainingConfig

BEST_PROBE_DIR = "best-probe"  # where --keep-best-probe exports (`retromae.evaluation.probe`)
# `retromae.fused_loss.VOCABULARY_LOSSES`
VOCABULARY_LOSS_NAMES = ("auto", "chunked", "chunked-torch", "liger", "unfused")
STS_PREFIX = "sts_"  # the probe names of correlations, scored on --probe-sts pairs: sts_spearman


def probe_metrics(kind: str) -> dict[str, str]:
    """What one kind of probe scores, each name (its record key less `probe_`, a --probe-metric choice) → the metric's
    registry key: the reported ranking keys on --probe's queries (ndcg@10, recall@100), the reported correlations on
    --probe-sts's pairs (sts_spearman)."""
    return {(STS_PREFIX if kind == CORRELATION else "") + key: key for key in reported_keys(kind)}


class ProbeMetricChoices:
    """--probe-metric's choices, read from the metric registry when asked: a metric registered after this module
    was imported is offered too."""

    def __iter__(self) -> Iterator[str]:
        return iter({**probe_metrics(RANKING), **probe_metrics(CORRELATION)})

    def __contains__(self, name: object) -> bool:
        return name in set(self)


def _probe_help(kind: str) -> tuple[str, str, str]:
    """The help's words for one kind of probe: its metrics' titles, its record keys and its first name."""
    names = probe_metrics(kind)
    return (" and ".join(map(long_title, names.values())), ", ".join(f"probe_{name}" for name in names),
            next(iter(names)))


RETRIEVAL_HELP, STS_HELP = _probe_help(RANKING), _probe_help(CORRELATION)


@dataclass(kw_only=True)
class ProbeOptions(Options):
    """Options of the retrieval probes run while pre-training (a mixin of `PretrainConfig`)."""

    probe: str | None = option(None, "probe retrieval while training: a BEIR (or MS MARCO) folder whose --probe-split "
                                     "queries are searched zero-shot with the encoder's vector (the objective's "
                                     f"pooling: [CLS], mean for Contriever); {RETRIEVAL_HELP[0]} go into "
                                     f"metrics.jsonl as {RETRIEVAL_HELP[1]}")
    probe_split: str = option("test", "qrels split of --probe")
    probe_sts: str | None = option(None, f"probe STS too (or only): an STS Benchmark tsv; {STS_HELP[0]} of cosine "
                                         f"similarities → {STS_HELP[1]}")
    probe_every: int = option(500, "probe every N steps (a multiple of --log-every), before the first step and at "
                                   "the last", POSITIVE)
    probe_queries: int = option(200, "probe a seeded sample of at most this many judged queries", POSITIVE)
    probe_documents: int = option(5000, "probe against the sampled queries' judged documents plus a seeded sample "
                                        "of others, this many documents in all (more when the judged ones are more)",
                                        POSITIVE)
    probe_seed: int = option(0, "seed of the query and document sample (the same sample for every run)", SEED)
    probe_batch_size: int = option(128, "texts per forward pass while probing", POSITIVE)
    probe_metric: str | None = option(None, f"the probe score --keep-best-probe maximises (default: "
                                            f"{RETRIEVAL_HELP[2]}, or {STS_HELP[2]} with --probe-sts alone)",
                                      choices=ProbeMetricChoices())
    keep_best_probe: bool = option(False, "export the encoder of the best probe score to OUTPUT/best-probe/ "
                                          "(encoder/, sentence-transformer/, pretrain_head.safetensors, probe.json)")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.probe_every % self.log_every == 0 or not self.probing, "probe_every",
                f"must be a positive multiple of --log-every ({self.log_every}): probes join the logged records")
        require(self.probing or not self.keep_best_probe, "keep_best_probe", "needs --probe or --probe-sts")
        require(self.probe_metric is None or self.probe_metric_key in self.probe_keys, "probe_metric",
                f"{self.probe_metric} is not probed: {'give --probe-sts' if self.probe else 'give --probe'}")

    @property
    def probing(self) -> bool:
        return self.probe is not None or self.probe_sts is not None

    @property
    def probe_keys(self) -> list[str]:
        """The record keys the probes write (besides probe_seconds)."""
        names = [*(probe_metrics(RANKING) if self.probe else []),
                 *(probe_metrics(CORRELATION) if self.probe_sts else [])]
        return [f"probe_{name}" for name in names]

    @property
    def probe_metric_key(self) -> str:
        """The record key of the score the best probe maximises."""
        return f"probe_{self.probe_metric}" if self.probe_metric else self.probe_keys[0]

    @property
    def probe_metric_entry(self) -> Metric:
        """The registered metric of the score --keep-best-probe keeps the best of."""
        name = self.probe_metric_key.removeprefix("probe_")
        return parse_key({**probe_metrics(RANKING), **probe_metrics(CORRELATION)}[name])[0]


# Every objective's options as flat fields (a flag each, `--decoder-layers`), made from the options classes.
ObjectiveOptionFields = dataclasses.make_dataclass("ObjectiveOptionFields", flat_options(), kw_only=True)


@dataclass(kw_only=True)
class PretrainConfig(ProbeOptions, ObjectiveOptionFields, HeadTrainingConfig):
    """Options of `retromae pretrain`; the papers' defaults where they give them."""

    SECTION_FIELD = "objective"  # a config file's section of that name holds the objective's options

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
    objective: str = option("retromae", "pre-training objective; its options are in the sections below that "
                                        "name it", choices=OBJECTIVES)
    vocabulary_loss: str = option("auto", "how the losses on the vocabulary run: fused with the projection onto it, "
                                          "a chunk of rows at a time, so the full logits never exist (chunked: "
                                          "PyTorch, its float32 products on oneDNN on the CPU; chunked-torch: "
                                          "PyTorch's own products, MKL on the CPU; liger: Liger Kernel's fused "
                                          "linear cross-entropy, CUDA), or unfused (every logit at once, then the "
                                          "loss); auto: unfused on CUDA, where it was faster (fused saves memory "
                                          "there); on the CPU the fastest of these at the run's shapes, measured "
                                          "once per CPU model and cached",
                                  choices=VOCABULARY_LOSS_NAMES)
    encoder_mask_ratio: float = option(0.3, "share of encoder input tokens masked (80/10/10 rule)", OPEN_UNIT)
    whole_word_mask: bool = option(False, "mask whole words rather than single sub-word tokens")
    max_length: int = option(256, "tokens per packed block, special tokens included (the paper uses 512)", at_least(8))
    pad_to_multiple_of: int | None = option(None, "round each batch's length up to a multiple of this (few distinct "
                                                  "shapes for the GPU's kernel caches and --compile); default: 64 on "
                                                  "CUDA, none on CPU (0: none)", NON_NEGATIVE)
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)")

    @classmethod
    def option_sections(cls) -> dict[str, set[str]]:
        """Config-file sections: each objective's name → the options it reads (`retromae.config.build_config`)."""
        return {name: {field.name for field in dataclasses.fields(OBJECTIVES.entry(name).options)
                       if field.metadata.get("help") is not None} for name in OBJECTIVES}

    def __post_init__(self) -> None:
        from retromae.fused_loss import liger_installed  # torch: a config is declared by --help, checked only on run

        super().__post_init__()
        require(self.objective in OBJECTIVES, "objective", f"choose from {', '.join(OBJECTIVES)}")
        objective = OBJECTIVES[self.objective]  # torch: only once a run is configured, never to parse --help
        require((self.model is None) != (self.init_from is None), "model",
                "give exactly one of --model and --init-from (which loads DIR/encoder)")
        require(not (self.init_from and self.from_config), "from_config", "cannot be combined with --init-from")
        require(self.init_from is not None or not self.init_missing_head, "init_missing_head",
                "only with --init-from (from --model the whole head starts fresh)")
        self.check_objective_options(objective)
        require(self.vocabulary_loss != "liger" or liger_installed(), "vocabulary_loss",
                "liger needs Liger Kernel (pip install liger-kernel) and a CUDA device; give auto or chunked")
        require(self.pairs is None or objective.pairs_views is not None, "pairs",
                f"the {self.objective} objective reads --corpus, not pairs")
        require(self.pairs is None or not self.corpus, "pairs", "give --pairs or --corpus, not both")
        require(len(self.corpus) > 0 or self.pairs is not None, "corpus", "give at least one corpus file")
        require(not self.freeze_encoder_steps or objective.trains_a_head(), "freeze_encoder_steps",
                f"the {self.objective} objective has no head to train while the encoder is frozen")

    def check_objective_options(self, objective: type) -> None:
        """The objective's options, checked by its class; an option given that it does not read is refused (every
        flat default is None, "not given", `retromae.objectives.flat_options`)."""
        reads = {field.name for field in dataclasses.fields(objective.options)}
        for field in dataclasses.fields(ObjectiveOptionFields):
            readers = ", ".join(OBJECTIVES.readers(field.name))
            require(field.name in reads or getattr(self, field.name) is None, field.name,
                    f"the {self.objective} objective does not read it (read by --objective {readers})")
        objective.check_config(objective.options.from_values(self), self)
