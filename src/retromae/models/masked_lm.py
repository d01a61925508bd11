"""The masked-LM backbone used for pre-training: loading, and the generic handles objectives need.

Owns: loading any Hugging Face masked-LM encoder from a checkpoint or from a config (scratch) with the attention
implementation asked for (`--attention`), saying which of its weights start fresh (a sentence-transformers folder's
do_lower_case applied to its tokenizer, `models.encoder.lowercase_as_declared`); the backbone's final or
per-layer hidden states, its embeddings and its longest input, as the model's family adapter answers them
(`retromae.backbones`, which objectives also ask for the MLM head and decoder positions); the encoder MLM loss
computed at masked positions only. Does not own masking, the objectives' decoders, any family's particulars
(`retromae.backbones`), inference-time pooling (`retromae.models.encoder`) or export (`retromae.models.export`).
"""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerFast

from retromae.backbones import ATTENTION_NAMES
from retromae.backbones.registry import adapter_for, find_adapter
from retromae.models.finite import check_weights
from retromae.models.model_source import HEAD_FILE, ModelSource, check_tokenizer, resolve_model
from retromae.models.pretrained import load_config, load_model, load_tokenizer
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError

IGNORE_INDEX = -100
logger = logging.getLogger(__name__)


def position_limit(config) -> int | None:
    """The most tokens a model with this config can read, as its family's adapter says (for a family no adapter
    knows: its `max_position_embeddings`, None when it has none)."""
    adapter = find_adapter(config)
    return adapter.max_length(config) if adapter else getattr(config, "max_position_embeddings", None)


def check_max_length(config, value: int | None, option_name: str, tokenizer, pair: bool = False,
                     argument: bool = False) -> None:
    """ConfigError naming the option when `value` tokens exceed what the model reads, or leave no room for text
    beside the tokenizer's special tokens (one token of text; for a `pair`, one of each text): below that a
    tokenizer ignores the truncation and reads whole texts, or keeps only its special tokens. The one length check of
    every command and of the Python API (`argument`: `option_name` is an argument, named as it is)."""
    if value is None:
        return
    flag = option_name if argument else f"--{option_name.replace('_', '-')}"
    special = tokenizer.num_special_tokens_to_add(pair=pair)
    least = special + (2 if pair else 1)
    if value < least:
        raise ConfigError(f"{flag} {value}: the tokenizer adds {special} special tokens to each "
                          f"{'pair' if pair else 'text'}, so at least {least} tokens are needed to keep any text; "
                          f"give {least} or more")
    limit = position_limit(config)
    if limit is not None and value > limit:
        raise ConfigError(f"{flag} {value}: the model reads at most {limit} tokens "
                          f"(its position embeddings); give {limit} or less")


def attention_implementation(model_class: type, requested: str = "auto", cuda: bool = False) -> str:
    """The attention kernel to load `model_class` with. "auto": FlashAttention-2 on CUDA where the model supports
    it and `flash_attn` is installed (it runs padded batches unpadded, as variable-length sequences), else PyTorch
    SDPA where supported, else eager. An explicit choice the model cannot honour is a ConfigError."""
    supported = {"flash_attention_2": bool(getattr(model_class, "_supports_flash_attn", False)),
                 "sdpa": bool(getattr(model_class, "_supports_sdpa", False)), "eager": True}
    if requested == "auto":
        flash = cuda and supported["flash_attention_2"] and importlib.util.find_spec("flash_attn") is not None
        return "flash_attention_2" if flash else "sdpa" if supported["sdpa"] else "eager"
    if requested not in supported:
        raise ConfigError(f"--attention {requested}: choose from {', '.join(ATTENTION_NAMES)}")
    if not supported[requested]:
        raise ConfigError(f"--attention {requested}: {model_class.__name__} does not support it; give "
                          f"{' or '.join(name for name, ok in supported.items() if ok)}")
    return requested


def load_masked_lm(name_or_path: str, from_config: bool = False, head_restored: bool = False,
                   option: str = "--model", attention: str = "auto", cuda: bool = False,
                   head_used: bool = True) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A masked-LM model and its fast tokenizer from any source `retromae.models.model_source` resolves; `from_config`
    builds fresh weights from the config alone; `head_restored` (the caller loads the MLM head itself, as
    `--init-from` does) or `head_used` False (an objective that never calls it) silences the note that the checkpoint
    has none; `attention` and `cuda` pick the attention kernel (`attention_implementation`)."""
    source = resolve_model(name_or_path, option)
    what = f"{option} {name_or_path}"
    tokenizer = load_tokenizer(source.folder, source.subfolder, what, needs=("mask",), use_fast=True)
    config = load_config(source.folder, source.subfolder, what)
    try:
        model_class = masked_lm_class(config)
    except ValueError as error:
        raise ModelLoadError(f"cannot load model {name_or_path!r}: {error}") from error
    kernel = attention_implementation(model_class, attention, cuda)
    if from_config:
        model = AutoModelForMaskedLM.from_config(config, attn_implementation=kernel)
    else:
        model, fresh = load_model(AutoModelForMaskedLM, source.folder, source.subfolder, what, fresh_head=True,
                                  attn_implementation=kernel)
        _report_fresh_head(source, fresh, head_restored or not head_used)
    if not tokenizer.is_fast:
        raise ModelLoadError(f"{name_or_path!r}: a fast (Rust) tokenizer is required (tokenizer.json)")
    from retromae.models.encoder import lowercase_as_declared  # the encoder's module imports this one

    lowercase_as_declared(tokenizer, source)
    check_tokenizer(tokenizer, f"{option} {name_or_path}", model.config.vocab_size)
    check_weights(model, name_or_path)
    return model, tokenizer


def _report_fresh_head(source: ModelSource, head: list[str], head_restored: bool) -> None:
    """Say once, in our words, that the checkpoint lacked the masked-LM head (sentence encoders such as
    all-MiniLM-L6-v2 ship none); body weights it lacks are refused by `retromae.models.pretrained.load_model`."""
    if head and not head_restored:
        # Only a pre-training run leaves a head to continue with (a fine-tuning run's folder has none).
        has_head = source.kind == "run" and (Path(source.folder).parent / HEAD_FILE).is_file()
        hint = f" (--init-from {source.given} continues with its head)" if has_head else ""
        logger.warning("%s has no masked-LM head (%d tensors); a fresh one is initialised and trained from scratch%s",
                       source.given, len(head), hint)


def masked_lm_class(config) -> type[PreTrainedModel]:
    """The masked-LM class transformers maps `config` to; a ValueError naming the model type when there is none."""
    if type(config) not in AutoModelForMaskedLM._model_mapping:
        raise ValueError(f"model type {config.model_type!r} has no masked-LM class in transformers")
    return AutoModelForMaskedLM._model_mapping[type(config)]


def token_embeddings(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """The backbone's embedding block on `input_ids`, shape (B, L, D): e(x_i) (+ p_i where the backbone adds an
    absolute position; + token type, normalisation, dropout)."""
    return model.base_model.embeddings(input_ids=input_ids)


def hidden_states(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Final hidden states of the backbone, shape (B, L, D)."""
    return adapter_for(model).body(model, input_ids, attention_mask).last_hidden_state


def layer_hidden_states(model: PreTrainedModel, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The embedding output, then every layer's hidden states, each (B, L, D): index i is layer i's output."""
    return adapter_for(model).body(model, input_ids, attention_mask, all_layers=True).hidden_states


def label_capacity(positions: int, ratio: float) -> int:
    """How many positions the MLM loss projects onto the vocabulary for a mask drawn at `ratio` over `positions`
    tokens: the expected count plus 8 standard deviations of a token-level draw (4 of a whole-word draw whose
    words average 4 tokens) plus 16, at most `positions`. A fixed number, so that the loss never asks the device
    how many positions were drawn; a draw past it (beyond 8 sigma) leaves its last labels out of the loss."""
    spread = math.sqrt(positions * ratio * (1 - ratio))
    return min(positions, math.ceil(ratio * positions + 8 * spread) + 16)


def masked_lm_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor,
                   capacity: int | None = None) -> torch.Tensor:
    """Mean cross-entropy over the labelled positions (labels != -100), with no read from the device.

    With `capacity` (`label_capacity`), the vocabulary projection runs on that many positions, the labelled ones
    first (a stable sort of the flattened labels, then a gather): shapes never depend on the draw, so there is no
    boolean indexing to wait for and no graph break under torch.compile. Without, it runs on every position (for
    losses over nearly all tokens). A batch without labels gives 0."""
    hidden, labels = labelled_rows(hidden, labels, capacity)  # (C, D), (C,)
    logits = head(hidden)  # (C, V)
    total = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def labelled_rows(hidden: torch.Tensor, labels: torch.Tensor,
                  capacity: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """States (..., D) and labels (...) flattened to (N, D) and (N,); with `capacity` (`label_capacity`), only that
    many rows, the labelled ones first (a stable sort of the flattened labels, then a gather)."""
    hidden, labels = hidden.flatten(0, -2), labels.flatten()  # (N, D), (N,)
    if capacity is not None and capacity < labels.numel():
        first = torch.argsort((labels == IGNORE_INDEX).to(torch.uint8), stable=True)[:capacity]  # (C,) labelled first
        hidden, labels = hidden[first], labels[first]  # (C, D), (C,)
    return hidden, labels
