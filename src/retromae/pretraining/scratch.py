"""Starting points for pre-training from scratch: a random masked LM of any supported family beside a tokenizer.

Owns: saving a randomly initialised masked LM of an architecture (one that a family of `backbones.families`
builds) and a chosen size beside a tokenizer (one trained on text by `retromae.models.tokenizer_training`, or any
existing one, such as BERT's uncased vocabulary), as a folder that `retromae pretrain --model` and `retromae finetune
--model` load like a hub checkpoint; and telling such a folder apart, also one an init-model made before its runs
were recorded (`unrecorded_init_model`). Does not own training, tokenizer training, or any family's config (its
adapter builds it) or facts (its entry in the family table).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformers import AutoModelForMaskedLM, PretrainedConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from retromae.backbones.families import architecture_names, family_building
from retromae.backbones.registry import architecture_adapter
from retromae.data.corpus import CorpusTexts
from retromae.models.encoder import default_max_length, lowercase_as_declared
from retromae.models.export import ENCODER_METADATA, SENTENCE_TRANSFORMERS_FILES, write_encoding_files
from retromae.models.masked_lm import position_limit
from retromae.models.model_source import (
    RANDOM_INIT_MARKER,
    SAVED_FILES,
    check_tokenizer,
    resolve_tokenizer,
    saved_files,
)
from retromae.models.pretrained import config_number_problem, load_tokenizer
from retromae.models.tokenizer_training import train_tokenizer
from retromae.pretraining.config import InitModelConfig, check_model_fits
from retromae.runtime.console import Result, given
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import loads_finite
from retromae.runtime.options import ConfigError, require
from retromae.runtime.run_folder import (
    MARKER,
    check_claim,
    claim_folder,
    input_paths,
    mark_started,
    outputs_in,
    run_identity,
)
from retromae.training.setup import seed_everything

# What `save_random_model` writes beside the model and its tokenizer (`model_source.saved_files`): init-model's outputs.
INIT_FILES = (RANDOM_INIT_MARKER, ENCODER_METADATA, *SENTENCE_TRANSFORMERS_FILES, "1_Pooling")
# An init-model of before its runs were recorded wrote random-init.json after the weights and the tokenizer, and its
# encoding files right after: none of its outputs changed later than this (in nanoseconds) in a folder as it left it.
UNRECORDED_GRACE_NS = 10 * 10**9
SMALL_RECORD_BYTES = 1 << 16  # random-init.json and config.json of a masked LM are far smaller


def family_tokenizer(texts: Iterable[str], architecture: str, vocab_size: int,
                     model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """The kind of tokenizer `architecture` trains (WordPiece, Unigram, byte-level BPE), with its family's special
    tokens (`<s>`-style where the family table says so), trained on `texts`."""
    family = family_building(architecture)
    return train_tokenizer(texts, family.architectures[architecture], vocab_size, model_max_length,
                           angle_tokens=family.angle_tokens)


def save_random_model(tokenizer: PreTrainedTokenizerBase, folder: Path, *, hidden_size: int, layers: int,
                      max_positions: int = 512, seed: int = 42, architecture: str = "bert",
                      max_length: int | None = None) -> Path:
    """A randomly initialised masked LM of `architecture` sized for `tokenizer` (`random_model_config`), saved with it
    (`write_random_model`)."""
    config = random_model_config(tokenizer, hidden_size=hidden_size, layers=layers, max_positions=max_positions,
                                 architecture=architecture)
    return write_random_model(tokenizer, folder, config, seed=seed, architecture=architecture, max_length=max_length)


def random_model_config(tokenizer: PreTrainedTokenizerBase, *, hidden_size: int, layers: int,
                        max_positions: int = 512, architecture: str = "bert") -> PretrainedConfig:
    """The config of a masked LM of `architecture` sized for `tokenizer` (heads of 64), with every refusal of its
    sizes: those that depend on the tokenizer's vocabulary and special tokens too, so that a command runs them all
    before it claims its output (`init_model`)."""
    require(hidden_size > 0 and hidden_size % 64 == 0, "hidden_size", "must be a positive multiple of 64 (heads of 64)")
    require(layers > 0, "layers", "must be positive")
    special_ids = {"pad": tokenizer.pad_token_id, "cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id}
    missing = [name for name, value in special_ids.items() if value is None]
    require(not missing, "tokenizer", f"has no {', '.join(missing)} token; a masked LM needs [PAD], [CLS] and [SEP]")
    config = architecture_adapter(architecture).scratch_config(
        architecture, len(tokenizer), special_ids, hidden_size=hidden_size, layers=layers, max_positions=max_positions)
    problem = config_number_problem(config.to_dict())  # the reader's rule: no folder written that every loader refuses
    if problem:
        raise ConfigError(f"--hidden-size, --layers, --max-positions: the model's config.json would say {problem}, "
                          "which no command loads")
    check_model_fits(architecture, len(tokenizer), hidden_size, layers, max_positions)  # before torch allocates
    return config


def write_random_model(tokenizer: PreTrainedTokenizerBase, folder: Path, config: PretrainedConfig, *, seed: int,
                       architecture: str, max_length: int | None = None) -> Path:
    """A masked LM of `config` (`random_model_config`) initialised with `seed`, saved with `tokenizer` and with the
    length and pooling it encodes text with (`export.write_encoding_files`): `max_length`, by default all its
    positions (at most its tokenizer's limit), and [CLS] pooling."""
    seed_everything(seed)
    model = AutoModelForMaskedLM.from_config(config)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_text_atomic(folder / RANDOM_INIT_MARKER, json.dumps({"seed": seed, "architecture": architecture}) + "\n")
    write_encoding_files(folder, "cls", False,
                         max_length or default_max_length(model, tokenizer, position_limit(model.config)))
    return folder


def init_model(config: InitModelConfig) -> Result:
    """A random model and its tokenizer as `config` says, in --output claimed as every command claims its folder
    (`run_folder.claim_folder`: no model, run or file of another's written over, nor an input; a folder of an
    init-model of before its runs were recorded replaced with --overwrite, `unrecorded_init_model`). Every refusal
    comes before the claim: the folder's (`check_claim`) once an existing tokenizer is read and before one is
    trained, then the sizes the tokenizer makes (`random_model_config`). Returns the model folder
    (`retromae.init_model(...)`) and the line describing it."""
    tokenizer = existing_tokenizer(config.tokenizer) if config.tokenizer else None
    claim: dict[str, Any] = dict(overwrite=config.overwrite, resumable=False, inputs=input_paths(config),
                                 unrecorded=unrecorded_init_model)
    claimed = (config.output, "init-model", run_identity(config), (*saved_files(tokenizer), *INIT_FILES))
    check_claim(*claimed, **claim)
    tokenizer = tokenizer or trained_tokenizer(config)
    model = random_model_config(tokenizer, hidden_size=config.hidden_size, layers=config.layers,
                                max_positions=config.positions, architecture=config.architecture)
    claim_folder(*claimed, **claim, started=False)
    folder = write_random_model(tokenizer, config.output, model, seed=config.seed, architecture=config.architecture)
    mark_started(folder)
    return Result(Path(folder), (f"random {config.architecture} ({config.layers} layers, hidden {config.hidden_size}, "
                                 f"vocabulary {len(tokenizer)}, {config.positions} positions) → {given(folder)}",))


def trained_tokenizer(config: InitModelConfig) -> PreTrainedTokenizerFast:
    """The family's kind of tokenizer trained on --corpus."""
    return family_tokenizer(CorpusTexts(config.corpus), config.architecture, config.vocab_size, config.positions)


def existing_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer of --tokenizer, checked as every command checks one."""
    source = resolve_tokenizer(name)
    tokenizer = load_tokenizer(source.folder, source.subfolder, f"--tokenizer {name}")
    lowercase_as_declared(tokenizer, source)
    check_tokenizer(tokenizer, f"--tokenizer {name}")
    return tokenizer


def unrecorded_init_model(folder: Path) -> bool:
    """Whether `folder`, which holds no run marker (`run_folder.claim_folder` asks only then), is as an init-model of
    before its runs were recorded (commit 7ef76e7) left it: no run marker above it either (the quickstart's initial
    model lies in its run's folder), `random-init.json` (written since commit
    faeab30) a small regular file holding its seed and, since b6b061b, an architecture this version builds, nothing
    else, `config.json` a masked LM's, and none of init-model's outputs there changed more than UNRECORDED_GRACE_NS
    after `random-init.json` was written (a model trained in place, a file edited since, is newer). What an
    init-model wrote before faeab30 holds nothing that tells it from a trained model: not recognised."""
    folder = Path(folder)
    flag, model = _small_json(folder / RANDOM_INIT_MARKER), _small_json(folder / "config.json")
    if any((place / MARKER).exists() for place in folder.resolve().parents) or not isinstance(flag, dict):
        return False
    seed, architecture = flag.get("seed"), flag.get("architecture", "bert")
    if set(flag) - {"seed", "architecture"} or type(seed) is not int or architecture not in architecture_names():
        return False
    kinds = model.get("architectures") if isinstance(model, dict) else None
    if not (isinstance(kinds, list) and len(kinds) == 1 and str(kinds[0]).endswith("ForMaskedLM")):
        return False
    latest = os.lstat(folder / RANDOM_INIT_MARKER).st_mtime_ns + UNRECORDED_GRACE_NS
    written = outputs_in(folder, (*SAVED_FILES, *INIT_FILES))
    files = [file for path in written for file in (path, *(path.rglob("*") if path.is_dir() else ()))]
    return all(os.lstat(file).st_mtime_ns <= latest for file in files)


def _small_json(path: Path) -> Any:
    """The JSON value of a small regular file (a symbolic link not followed), or None for anything else."""
    try:
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_size > SMALL_RECORD_BYTES:
            return None
        return loads_finite(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
