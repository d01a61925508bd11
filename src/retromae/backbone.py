"""The masked-LM backbone used for pre-training: loading, and the generic handles objectives need.

Owns: loading any Hugging Face masked-LM encoder (BERT, RoBERTa, MiniLM, ...) from a checkpoint or from a
config (scratch) with PyTorch SDPA attention, saying which of its weights start fresh; finding its MLM head and
absolute position embeddings through public accessors only; the longest input its position embeddings allow; the
encoder MLM loss computed at masked positions only. Does not own masking, the objectives' decoders, inference-time
pooling (`retromae.encoder`) or export (`retromae.export`).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from retromae.config import ConfigError
from retromae.errors import ModelLoadError
from retromae.model_source import ModelSource, check_tokenizer, resolve_model

IGNORE_INDEX = -100
logger = logging.getLogger(__name__)
# Models whose position ids start after the padding index: two of their position embeddings are never used.
PADDING_OFFSET_MODELS = frozenset({"roberta", "xlm-roberta", "camembert", "longformer"})


def position_limit(config) -> int | None:
    """The most tokens a model with this config can read (None when it has no absolute position embeddings)."""
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None or getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    offset = (config.pad_token_id or 0) + 1 if config.model_type in PADDING_OFFSET_MODELS else 0
    return positions - offset


def check_max_length(config, value: int | None, option_name: str) -> None:
    """ConfigError naming the option when `value` tokens exceed what the model's position embeddings allow."""
    limit = position_limit(config)
    if value is not None and limit is not None and value > limit:
        raise ConfigError(f"--{option_name.replace('_', '-')} {value}: the model reads at most {limit} tokens "
                          f"(its position embeddings); give {limit} or less")


def load_masked_lm(name_or_path: str, from_config: bool = False, head_restored: bool = False,
                   option: str = "--model") -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A masked-LM model and its fast tokenizer from any source `retromae.model_source` resolves; `from_config`
    builds fresh weights from the config alone; `head_restored` (the caller loads the MLM head itself, as
    `--init-from` does) silences the note that the checkpoint has none."""
    source = resolve_model(name_or_path, option)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.folder, subfolder=source.subfolder, use_fast=True)
        if from_config:
            config = AutoConfig.from_pretrained(source.folder, subfolder=source.subfolder)
            model = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
        else:
            model, info = AutoModelForMaskedLM.from_pretrained(source.folder, subfolder=source.subfolder,
                                                               attn_implementation="sdpa", output_loading_info=True)
            _report_missing(source, model, info["missing_keys"], head_restored)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot load model {name_or_path!r}: {error}") from error
    if not tokenizer.is_fast:
        raise ModelLoadError(f"{name_or_path!r}: a fast (Rust) tokenizer is required (tokenizer.json)")
    if tokenizer.mask_token_id is None:
        raise ModelLoadError(f"{name_or_path!r}: the tokenizer has no mask token")
    check_tokenizer(tokenizer, f"{option} {name_or_path}", model.config.vocab_size)
    return model, tokenizer


def _report_missing(source: ModelSource, model: PreTrainedModel, missing: list[str], head_restored: bool) -> None:
    """Say once, in our words, which weights the checkpoint lacked: a missing MLM head is expected (sentence
    encoders such as all-MiniLM-L6-v2 ship none), missing body weights are not."""
    body = [key for key in missing if key.startswith(f"{model.base_model_prefix}.")]
    head = sorted(set(missing) - set(body))
    if head and not head_restored:
        hint = f" (--init-from {source.given} continues with its head)" if source.kind == "run" else ""
        logger.warning("%s has no masked-LM head (%d tensors); a fresh one is initialised and trained from scratch%s",
                       source.given, len(head), hint)
    if body:
        logger.warning("%s lacks %d tensors of the encoder body (e.g. %s); they start random", source.given,
                       len(body), body[0])


def mlm_head(model: PreTrainedModel) -> nn.Module:
    """The module mapping hidden states (..., D) to vocabulary logits (..., V): the one child beside the base model."""
    heads = [child for child in model.children() if child is not model.base_model and _has_parameters(child)]
    if len(heads) != 1:
        raise ModelLoadError(f"{type(model).__name__}: expected one MLM head module beside the base model, "
                             f"found {len(heads)}; this architecture is not supported")
    return heads[0]


def _has_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def position_embeddings(model: PreTrainedModel, length: int, device: torch.device) -> torch.Tensor:
    """The absolute position embeddings p_0 .. p_{length-1} of the backbone, shape (length, D)."""
    embeddings = getattr(model.base_model, "embeddings", None)
    table = getattr(embeddings, "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        raise ModelLoadError(f"{type(model).__name__}: RetroMAE's decoder needs absolute position embeddings")
    # RoBERTa-style embeddings number positions from padding_idx + 1.
    padding_idx = getattr(embeddings, "padding_idx", None)
    offset = padding_idx + 1 if padding_idx is not None else 0
    return table(torch.arange(offset, offset + length, device=device))


def token_embeddings(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """e(x_i) + p_i (+ token type, LayerNorm, dropout) from the backbone's embedding block, shape (B, L, D)."""
    return model.base_model.embeddings(input_ids=input_ids)


def hidden_states(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Final hidden states of the backbone, shape (B, L, D).

    The padding mask goes in as (B, 1, 1, L) booleans, which transformers hands to attention as it is: from a 2D
    mask it would first ask whether the batch has any padding (`padding_mask.all()`), a read from the device on
    every step (under torch.compile it skips the question and always builds the mask, as here)."""
    visible = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): True = may attend
    return model.base_model(input_ids=input_ids, attention_mask=visible).last_hidden_state


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
    hidden, labels = hidden.flatten(0, -2), labels.flatten()  # (N, D), (N,)
    if capacity is not None and capacity < labels.numel():
        first = torch.argsort((labels == IGNORE_INDEX).to(torch.uint8), stable=True)[:capacity]  # (C,) labelled first
        hidden, labels = hidden[first], labels[first]  # (C, D), (C,)
    logits = head(hidden)  # (C, V)
    total = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)
