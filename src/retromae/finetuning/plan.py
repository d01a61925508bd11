"""What a fine-tuning run takes from its data when options are left unset, and how long it is expected to take.

Owns: the defaults scaled to the training set (`resolve_defaults`): the batch size (32 queries, at most half of those
one process sees, so that an epoch holds two steps or more and its batches can keep their positives apart), the
query and passage max lengths (the length that covers 95% of a seeded sample of the set's queries and passages,
rounded up to a multiple of 16, at most 64 and 256 tokens and what the model reads), and the number of steps
(`resolve_steps`: `--epochs` passes over the queries, 2 unless `--epochs` or `--max-steps` is given); and the line a
run prints when it starts (`plan_line`): its steps and batch shape, its expected duration from a timed forward pass
over its first batch (three of them make a step, four with gradient caching) and its expected peak memory
(`finetuning.memory`, which also chooses gradient caching when a step at once would not fit). Does not own training,
batching or reading data.
"""

from __future__ import annotations

import math
import random

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from retromae.data.long_texts import clip_texts
from retromae.data.training_groups import TrainingSet
from retromae.finetuning.config import FinetuneConfig
from retromae.models.masked_lm import position_limit
from retromae.runtime.console import format_seconds
from retromae.runtime.options import steps_from_passes

DEFAULT_EPOCHS = 2.0
DEFAULT_BATCH_SIZE = 32
QUERY_LENGTH_CAP = 64
PASSAGE_LENGTH_CAP = 256
LENGTH_SAMPLE = 2_000  # texts tokenised to find the lengths: a second or two, whatever the set's size
LENGTH_COVERAGE = 0.95
LENGTH_MULTIPLE = 16


def covering_length(tokenizer: PreTrainedTokenizerBase, texts: list[str], cap: int, seed: int) -> int:
    """Tokens (special tokens included) that cover `LENGTH_COVERAGE` of a seeded sample of `texts`, rounded up to a
    multiple of `LENGTH_MULTIPLE`, at most `cap`."""
    sample = random.Random(seed).sample(texts, min(len(texts), LENGTH_SAMPLE))
    tokens = tokenizer(clip_texts(tokenizer, sample, cap), truncation=True, max_length=cap)["input_ids"]
    lengths = sorted(len(ids) for ids in tokens)
    covered = lengths[max(0, math.ceil(LENGTH_COVERAGE * len(lengths)) - 1)] if lengths else cap
    return min(cap, math.ceil(covered / LENGTH_MULTIPLE) * LENGTH_MULTIPLE)


def resolve_defaults(config: FinetuneConfig, data: TrainingSet, tokenizer: PreTrainedTokenizerBase,
                     model_config: PretrainedConfig, processes: int) -> None:
    """Fill in the batch size and max lengths left unset, from `data` (in place; given values are kept)."""
    if config.batch_size is None:
        config.batch_size = max(1, min(DEFAULT_BATCH_SIZE, len(data.examples) // (2 * processes)))
    limit = position_limit(model_config) or PASSAGE_LENGTH_CAP
    if config.query_max_length is None:
        config.query_max_length = covering_length(tokenizer, [example.query for example in data.examples],
                                                  min(QUERY_LENGTH_CAP, limit), config.seed)
    if config.passage_max_length is None:
        config.passage_max_length = covering_length(tokenizer, data.texts, min(PASSAGE_LENGTH_CAP, limit),
                                                    config.seed)


def resolve_steps(config: FinetuneConfig, batches_per_epoch: int) -> None:
    """Set `max_steps` from `--epochs`, which overrides `--max-steps` (2 epochs when neither is given), by
    `runtime.options.steps_from_passes`, which refuses a count beyond the step domain."""
    if config.epochs is None and config.max_steps is None:
        config.epochs = DEFAULT_EPOCHS
    if config.epochs is not None:
        config.max_steps = steps_from_passes("--epochs", config.epochs, batches_per_epoch,
                                             config.gradient_accumulation_steps)


def plan_line(config: FinetuneConfig, queries: int, group_size: int, seconds_per_step: float,
              memory: str = "") -> str:
    """What the run will do, how long it should take and (`memory`, `MemoryPlan.describe`) the memory it needs, e.g.
    "50 steps (2 epochs of 809 queries) of 32 queries x 1 passage, queries up to 32 tokens, passages up to 256: about
    4m05s (4.9 s a step, from a timed forward pass over the first batch); peak memory about 2.9 GB of the 21.4 GB
    this process may use"."""
    passes = f" ({config.epochs:g} epochs of {queries:,} queries)" if config.epochs is not None else ""
    micro = config.batch_size * config.gradient_accumulation_steps
    per_step = seconds_per_step * config.gradient_accumulation_steps
    mining = (f", plus re-mining negatives every {config.refresh_negatives_every} steps"
              if config.refresh_negatives_every else "")
    return (f"{config.max_steps:,} steps{passes} of {micro} queries x {group_size} "
            f"passage{'s' if group_size > 1 else ''}, queries up to {config.query_max_length} tokens, passages up "
            f"to {config.passage_max_length}: about {format_seconds(config.max_steps * per_step)} "
            f"({per_step:.3g} s a step, from a timed forward pass over the first batch){mining}"
            f"{'; ' + memory if memory else ''}")
