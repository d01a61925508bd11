"""A pre-training objective under a transformers `Trainer` (or any loop that calls `model(**batch)`).

Owns: `ObjectiveModule`, a thin adapter whose forward takes the batch as keywords, draws that micro-batch's masks
from its own seeded generator (`retromae.training.loop.mask_generator` of the seed, the process's rank and a call count,
as the training loop does) and returns the objective's losses ("loss" and its components); and `TextCollator`, which
turns a list of texts into the batch the objectives read. Does not own any objective, nor the training loop.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from transformers import PreTrainedTokenizerBase

from retromae.data.collate import BlockCollator, special_token_template
from retromae.data.contrastive import text_blocks
from retromae.objectives import PretrainingObjective
from retromae.training.loop import mask_generator


class ObjectiveModule(nn.Module):
    """`objective` as a model whose forward(input_ids, attention_mask, special_tokens_mask, word_starts) returns its
    dict of losses; micro-batch n (counted on this process) masks with the generator of (seed, rank, n)."""

    def __init__(self, objective: PretrainingObjective, seed: int = 42) -> None:
        super().__init__()
        self.objective, self.seed = objective, seed
        self.calls = 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, special_tokens_mask: torch.Tensor,
                word_starts: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "special_tokens_mask": special_tokens_mask, "word_starts": word_starts}  # each (B, L)
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        generator = mask_generator(self.seed, rank, self.calls, input_ids.device)
        self.calls += 1
        return self.objective(batch, generator)


class TextCollator:
    """Texts → the objectives' batch {input_ids, attention_mask, special_tokens_mask, word_starts}, each (B, L):
    each text cut to `max_length` tokens with its special tokens. For a pair objective (contrastive), give two views
    of each example as `(first, second)` tuples of texts."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int = 256) -> None:
        prefix, suffix = special_token_template(tokenizer)
        self.tokenizer, self.max_tokens = tokenizer, max_length - len(prefix) - len(suffix)
        self.blocks = BlockCollator(tokenizer)

    def __call__(self, examples: list[str] | list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        if examples and isinstance(examples[0], tuple):
            examples = [first for first, _ in examples] + [second for _, second in examples]
        return self.blocks(text_blocks(list(examples), self.tokenizer, self.max_tokens))
