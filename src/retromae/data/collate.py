"""Turn token-store blocks into padded batches: special tokens around each block, right padding, masks.

Owns: `BlockDataset` (a torch Dataset over a `TokenStore`) and `BlockCollator`. Does not own masking or
any model code; the masks it returns say which positions a masking function may touch.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from retromae.data.token_store import TokenStore
from retromae.runtime.errors import ModelLoadError

Block = tuple[np.ndarray, np.ndarray]


def special_token_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after one sequence, e.g. ([CLS], [SEP]) or (<s>, </s>)."""
    encoded = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
    ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
    content = [i for i, flag in enumerate(special) if not flag]
    if not content:
        return list(ids), []
    return list(ids[:content[0]]), list(ids[content[-1] + 1:])


class BlockDataset(torch.utils.data.Dataset):
    """The blocks of a token store as a map-style dataset: item i is `store.block(i)`."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int) -> Block:
        return self.store.block(index)

    def lengths(self) -> np.ndarray:
        """(N,) int64: the tokens of every block, without special tokens (for batches grouped by length)."""
        return self.store.block_lengths()


class BlockCollator:
    """Blocks → {input_ids, attention_mask, special_tokens_mask, word_starts}, each (B, L), right-padded."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, pad_to_multiple_of: int | None = None,
                 max_length: int | None = None) -> None:
        """`pad_to_multiple_of`: round each batch's length up to a multiple of it (fewer distinct shapes for the
        GPU's kernel and plan caches and for torch.compile), never past `max_length` (the position table's reach)."""
        if tokenizer.pad_token_id is None:
            raise ModelLoadError(f"tokenizer {tokenizer.name_or_path!r} has no pad token; set one before training")
        prefix, suffix = special_token_template(tokenizer)
        self.prefix = np.asarray(prefix, dtype=np.int64)
        self.suffix = np.asarray(suffix, dtype=np.int64)
        self.pad_id = int(tokenizer.pad_token_id)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.max_length = max_length

    def _length(self, blocks: list[Block]) -> int:
        longest = max(len(ids) for ids, _ in blocks) + len(self.prefix) + len(self.suffix)
        multiple = self.pad_to_multiple_of
        if not multiple:
            return longest
        return max(longest, min(-(-longest // multiple) * multiple, self.max_length or longest + multiple))

    def __call__(self, blocks: list[Block]) -> dict[str, torch.Tensor]:
        length, head = self._length(blocks), len(self.prefix)
        input_ids = np.full((len(blocks), length), self.pad_id, dtype=np.int64)  # (B, L)
        attention_mask = np.zeros((len(blocks), length), dtype=np.int64)  # (B, L)
        special = np.ones((len(blocks), length), dtype=bool)  # (B, L)
        word_starts = np.zeros((len(blocks), length), dtype=bool)  # (B, L)
        for row, (ids, starts) in enumerate(blocks):
            end = head + len(ids)
            input_ids[row, :head] = self.prefix
            input_ids[row, head:end] = ids
            input_ids[row, end:end + len(self.suffix)] = self.suffix
            attention_mask[row, :end + len(self.suffix)] = 1
            special[row, head:end] = False
            word_starts[row, head:end] = starts
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "special_tokens_mask": torch.from_numpy(special),
            "word_starts": torch.from_numpy(word_starts),
        }
