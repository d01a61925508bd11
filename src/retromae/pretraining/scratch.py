"""Starting points for pre-training from scratch: a random masked LM of any supported family beside a tokenizer.

Owns: saving a randomly initialised masked LM of an architecture (one that a family of `backbones.families`
builds) and a chosen size beside a tokenizer (one trained on text by `retromae.models.tokenizer_training`, or any
existing one, such as BERT's uncased vocabulary), as a folder that `retromae pretrain --model` and `retromae finetune
--model` load like a hub checkpoint; and telling such a folder apart, also one an init-model made before its runs
were recorded, by what its files hold (`unrecorded_init_model`: its weights rebuilt from its seed). Does not own
training, tokenizer training, or any family's config (its adapter builds it) or facts (its entry in the family
table).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import (
    AutoModelForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from retromae.backbones.families import architecture_names, family_building
from retromae.backbones.registry import architecture_adapter
from retromae.data.corpus import CorpusTexts
from retromae.models.encoder import default_max_length, lowercase_as_declared
from retromae.models.export import ENCODER_METADATA, SENTENCE_TRANSFORMERS_FILES, write_encoding_files
from retromae.models.masked_lm import position_limit
from retromae.models.model_source import (
    RANDOM_INIT_MARKER,
    check_tokenizer,
    resolve_tokenizer,
    saved_files,
)
from retromae.models.pretrained import (
    LIBRARY_ERRORS,
    PICKLE_WEIGHTS,
    config_number_problem,
    load_config,
    load_tokenizer,
)
from retromae.models.tokenizer_training import train_tokenizer
from retromae.pretraining.config import InitModelConfig, check_model_fits
from retromae.runtime.console import Result, given
from retromae.runtime.errors import ModelLoadError
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
# Weights other than one model.safetensors: none in a folder init-model left at the sizes it is rebuilt at
OTHER_WEIGHTS = (*PICKLE_WEIGHTS, "pytorch_model-*.bin", "model.safetensors.index.json",
                 "model-?????-of-?????.safetensors")
# The largest model.safetensors an unrecorded init-model's is rebuilt to be compared with (BERT-large's: 1.3 GB);
# a larger one is refused rather than rebuilt
MAX_REBUILT_BYTES = 2 << 30
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
    model = random_masked_lm(config, seed)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_text_atomic(folder / RANDOM_INIT_MARKER, json.dumps({"seed": seed, "architecture": architecture}) + "\n")
    write_encoding_files(folder, "cls", False,
                         max_length or default_max_length(model, tokenizer, position_limit(model.config)))
    return folder


def random_masked_lm(config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """The masked LM of `config` initialised with `seed`: what init-model saves (`write_random_model`), and what
    an init-model folder of before its runs were recorded is compared with (`unrecorded_init_model`)."""
    seed_everything(seed)
    return AutoModelForMaskedLM.from_config(config)


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
    before its runs were recorded (commit 7ef76e7) left it, judged by what its files hold (never by their times, which
    copies and clocks set): no run marker above it either (the quickstart's initial model lies in its run's folder),
    `random-init.json` (written since commit faeab30) a small regular file holding its seed and, since b6b061b, an
    architecture this version builds, nothing else, `config.json` a masked LM's, and its weights untouched
    (`untouched_weights`: a model trained in place, or its weights edited, is not one). What an init-model wrote
    before faeab30 holds nothing that tells it from a trained model: not recognised."""
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
    return untouched_weights(folder, seed)


def untouched_weights(folder: Path, seed: int) -> bool:
    """Whether `folder`'s only weights are a model.safetensors (a regular file of at most MAX_REBUILT_BYTES: a larger
    one is not rebuilt) holding, bit for bit, the tensors init-model saved: those of the masked LM its config.json
    describes initialised with `seed`, rebuilt by the code init-model runs (`random_masked_lm`). Where this version
    of torch or transformers initialises otherwise than the one that wrote the folder, they differ: not untouched.
    Judged once per process while the two files stay as they were (a claim checks, then takes: `_VERDICTS`)."""
    weights = folder / "model.safetensors"
    try:
        status = os.lstat(weights)
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_REBUILT_BYTES or outputs_in(folder, OTHER_WEIGHTS):
            return False
        key = (str(weights.resolve()), seed, *map(_unchanged, (status, os.lstat(folder / "config.json"))))
        if key not in _VERDICTS:
            rebuilt = random_masked_lm(load_config(str(folder)), seed).state_dict()
            with safe_open(str(weights), framework="pt", device="cpu") as saved:
                _VERDICTS[key] = _saved_as(rebuilt, set(saved.keys()), saved.get_tensor)
        return _VERDICTS[key]
    except (ModelLoadError, *LIBRARY_ERRORS):
        return False


_VERDICTS: dict[tuple, bool] = {}  # untouched_weights' answers, by the files' identity and times


def _unchanged(status: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is written: its size, modification and change times (the change time cannot be set
    back), its inode (as `run_folder.file_fingerprint` keys its memo)."""
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino


def _saved_as(state: dict[str, torch.Tensor], names: set[str], tensor: Any) -> bool:
    """Whether the tensors `names` (each read by `tensor(name)`) are what `save_pretrained` keeps of `state`: every
    one of its tensors but those tied to one kept, each of the same dtype, shape and bytes."""
    kept = {state[name].data_ptr() for name in names & state.keys()}
    if not names <= state.keys() or any(value.data_ptr() not in kept for value in state.values()):
        return False
    return all(_same_bytes(tensor(name), state[name]) for name in names)


def _same_bytes(one: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether two tensors are of one dtype and shape and hold the same bytes (a NaN equal to itself, 0.0 not -0.0)."""
    if one.dtype != other.dtype or one.shape != other.shape:
        return False
    return torch.equal(one.reshape(-1).view(torch.uint8), other.detach().reshape(-1).view(torch.uint8))


def _small_json(path: Path) -> Any:
    """The JSON value of a small regular file (a symbolic link not followed), or None for anything else."""
    try:
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_size > SMALL_RECORD_BYTES:
            return None
        return loads_finite(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
