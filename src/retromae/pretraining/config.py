"""The options of `retromae pretrain`, declared apart from the run so that parsing them imports no torch.

Owns: `PretrainConfig` (its `--probe*` and `--keep-best-probe` options are `retromae.evaluation.probe_options`'s
`ProbeOptions`) and `InitModelConfig` (`retromae init-model`). The objectives it offers and their options come from the
table in `retromae.objectives`: each objective's options class (`retromae.objectives.options`) gives its flat fields
(`ObjectiveOptionFields`), one section of `--help` each, and a config file may nest them under the objective's name
(`retromae: {decoder_mask_ratio: 0.5}`). Checking a config asks the objective's class what it accepts, so
constructing one imports torch; declaring the options does not. Does not own pre-training itself
(`retromae.pretraining.run`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from retromae.backbones import ATTENTION_NAMES
from retromae.backbones.families import (
    architecture_names,
    family_building,
    family_titles,
    max_positions_help,
    tokenizer_kinds_help,
)
from retromae.evaluation.probe_options import ProbeOptions
from retromae.losses import VOCABULARY_LOSSES, liger_installed
from retromae.models.pretrained import CONFIG_NUMBERS
from retromae.objectives import OBJECTIVES, flat_options
from retromae.objectives.options import RUN_DEFAULTS
from retromae.runtime.cgroups import available_memory
from retromae.runtime.io import check_folder_option
from retromae.runtime.options import (
    NON_NEGATIVE,
    OPEN_UNIT,
    SEED,
    ConfigError,
    Domain,
    acts_with,
    at_least,
    option,
    require,
)
from retromae.runtime.run_folder import OutputOptions
from retromae.training.config import HeadTrainingConfig

# Every objective's options as flat fields (a flag each, `--decoder-layers`), made from the options classes.
ObjectiveOptionFields = dataclasses.make_dataclass("ObjectiveOptionFields", flat_options(), kw_only=True)


@dataclass(kw_only=True)
class PretrainConfig(ProbeOptions, ObjectiveOptionFields, HeadTrainingConfig):
    """Options of `retromae pretrain`; the papers' defaults where they give them."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"corpus": "documents", "pairs": "pairs"}

    SECTION_FIELD = "objective"  # a config file's section of that name holds the objective's options

    model: str | None = option(None, "Hugging Face masked-LM checkpoint: hub name or local folder, of a supported "
                                     f"family ({family_titles()})", required_unless="--init-from", reads="model")
    init_from: str | None = option(None, "continue from a previous `retromae pretrain` output folder: its encoder/ "
                                         "and pretrain_head.safetensors (stage 2)", required_unless="--model",
                                   reads="path")
    init_missing_head: bool = option(False, "with --init-from: start the head tensors the previous run lacks (e.g. "
                                            "RetroMAE's decoder after an MLM run) from fresh weights, as a run from "
                                            "--model does, and name them; without it such a run is refused")
    corpus: list[str] = option([], "corpus files or folders (.txt, .jsonl, .parquet, BEIR folder, hf:NAME[:CONFIG])",
                               required_unless="--pairs", reads="path")
    pairs: str | None = option(None, "contrastive objectives: JSON lines of {\"query\": str, \"pos\": str or [str]} "
                                     "pairs, used instead of two spans per --corpus document; simcse (supervised) "
                                     "also needs \"neg\": str or [str], hard negatives", reads="path")
    from_config: bool = option(False, "start from fresh weights built from --model's config (scratch)")
    attention: str = option("auto", "the backbone's attention kernel; auto: FlashAttention-2 on CUDA where the model "
                                    "supports it and flash-attn is installed (padded batches run unpadded, as "
                                    "variable-length sequences), else PyTorch SDPA, else eager (DeBERTa)",
                            choices=ATTENTION_NAMES)
    objective: str = option("retromae", "pre-training objective; its options are in the sections below that "
                                        "name it", choices=OBJECTIVES)
    vocabulary_loss: str = option(RUN_DEFAULTS["vocabulary_loss"],
                                  "how the losses on the vocabulary run: fused with the projection onto it, "
                                  "a chunk of rows at a time, so the full logits never exist (chunked: "
                                  "PyTorch, its float32 products on oneDNN on the CPU; chunked-torch: "
                                  "PyTorch's own products, MKL on the CPU; liger: Liger Kernel's fused "
                                  "linear cross-entropy, CUDA), or unfused (every logit at once, then the "
                                  "loss); auto: unfused on CUDA, where it was faster (fused saves memory "
                                  "there); on the CPU the fastest of these at the run's shapes, measured "
                                  "once per CPU model and cached",
                                  choices=VOCABULARY_LOSSES)
    encoder_mask_ratio: float = option(RUN_DEFAULTS["encoder_mask_ratio"],
                                       "share of encoder input tokens masked (80/10/10 rule)", OPEN_UNIT)
    whole_word_mask: bool = option(RUN_DEFAULTS["whole_word_mask"],
                                   "mask whole words rather than single sub-word tokens")
    max_length: int = option(256, "tokens per packed block, special tokens included (the paper uses 512)", at_least(8))
    pad_to_multiple_of: int | None = option(None, "round each batch's length up to a multiple of this (few distinct "
                                                  "shapes for the GPU's kernel caches and --compile); default: 64 on "
                                                  "CUDA, none on CPU (0: none)", NON_NEGATIVE)
    cache_dir: str | None = option(None, "token store cache folder (default: $RETROMAE_CACHE or ~/.cache/retromae)",
                                    check=check_folder_option)

    @classmethod
    def option_sections(cls) -> dict[str, set[str]]:
        """Config-file sections: each objective's name → the options it reads
        (`retromae.runtime.options.build_config`)."""
        return {name: {field.name for field in dataclasses.fields(OBJECTIVES.entry(name).options)
                       if field.metadata.get("help") is not None} for name in OBJECTIVES}

    def makes_token_store(self) -> bool:
        """Whether the run tokenises its corpus into a token store (`data.token_store`): all but a --pairs run."""
        return self.pairs is None

    def __post_init__(self) -> None:
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


def model_size(field: str, least: int = 1) -> Domain:
    """The domain of an `init-model` size: what the model-folder reader allows the config.json field it becomes
    (`models.pretrained.CONFIG_NUMBERS`, the one table of these bounds), from `least` up."""
    bound = CONFIG_NUMBERS[field][1]
    return Domain(max(least, bound.low), bound.high)


def model_parameters(architecture: str, vocab: int, hidden: int, layers: int, positions: int) -> int:
    """The parameters of the masked LM of `architecture` and this size that `init-model` builds, as its family counts
    them (`backbones.families.BackboneFamily.parameters`: ModernBERT and DeBERTa-v3 build no position table)."""
    return family_building(architecture).parameters(vocab, hidden, layers, positions)


def check_model_fits(architecture: str, vocab: int, hidden: int, layers: int, positions: int) -> None:
    """ConfigError naming the size options when the model's parameters (`model_parameters`), as float32 (4 bytes
    each), exceed the memory this machine still gives (`runtime.cgroups.available_memory`; no check where it cannot
    be read): refused before torch allocates anything, instead of dying in its allocator."""
    count = model_parameters(architecture, vocab, hidden, layers, positions)
    free = available_memory()
    if free is not None and 4 * count > free:
        tokens = f" and {vocab} tokens" if vocab else ""
        raise ConfigError(f"--hidden-size, --layers, --max-positions: a {architecture} model of {layers} layers, "
                          f"hidden size {hidden}, {positions} positions{tokens} holds about {count:,} parameters, "
                          f"{4 * count:,} bytes as float32, more than the {free:,} bytes this machine has free; give a "
                          "smaller size")


@dataclasses.dataclass(kw_only=True)
class InitModelConfig(OutputOptions):
    INPUT_FORMATS = {"corpus": "documents"}  # the format each input option is read in (`retromae.data.inputs`)
    output: Path = option(help="folder to write the model and tokenizer to")
    architecture: str = option("bert", f"model family to build, with its kind of tokenizer ({tokenizer_kinds_help()})",
                               choices=architecture_names)
    tokenizer: str | None = option(None, "existing tokenizer: hub name or a local model folder holding one",
                                   required_unless="--corpus", reads="tokenizer")
    corpus: list[str] | None = option(None, "train the family's kind of tokenizer on these corpus files (any "
                                      "`retromae pretrain --corpus` source)", required_unless="--tokenizer",
                                      reads="path")
    vocab_size: int = option(8000, "vocabulary of a tokenizer trained on --corpus", model_size("vocab_size", 100),
                             acts=acts_with("corpus", on=["x"], off=None))
    hidden_size: int = option(256, "hidden size (a multiple of 64; one attention head per 64)",
                              model_size("hidden_size", 64))
    layers: int = option(4, "transformer layers", model_size("num_hidden_layers"))
    max_positions: int | None = option(None, f"longest input ({max_positions_help()})",
                                       model_size("max_position_embeddings", 8))
    seed: int = option(42, "seed of the random initialisation", SEED)

    def __post_init__(self) -> None:
        if (self.tokenizer is None) == (self.corpus is None):
            raise ConfigError("--tokenizer: give either --tokenizer (an existing one) or --corpus (train one)")
        require(self.hidden_size % 64 == 0, "hidden_size", "must be a positive multiple of 64 (heads of 64)")
        # the vocabulary of --tokenizer is known once it is read (`save_random_model` weighs it then): here, none
        check_model_fits(self.architecture, self.vocab_size if self.corpus else 0, self.hidden_size, self.layers,
                         self.positions)

    @property
    def positions(self) -> int:
        return self.max_positions or family_building(self.architecture).max_positions
