"""Two views per example for the contrastive objectives: two spans of one document, or a given pair.

Owns: `SpanPairDataset` (coCondenser-style positives: two random spans of the same document of a `TokenStore`),
`PairsDataset` (given pairs from `{"query": str, "pos": str | [str]}` JSON lines, e.g. NLI entailment pairs),
reading and checking those files (errors name file and line), and `PairCollator` (pairs of blocks → one padded
batch of 2B rows: the B first views, then the B second views in the same order).

One example is one document (or one query), so a batch never holds two documents' views as false negatives of
each other. Random choices (which spans, which positive) come from a generator seeded by the run seed and the
indices of the whole batch (`__getitems__`, which the DataLoader calls with a batch's indices): reproducible,
identical after a resume (the sampler replays the same batches), and different from epoch to epoch (a document
lands in another batch). No model code and no masking.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from retromae.data.collate import Block, BlockCollator
from retromae.data.lines import numbered_lines, parse_json_line
from retromae.data.token_store import TokenStore, plain_backend, word_starts_of
from retromae.errors import DataError

SUBSPAN_SHARE = (0.25, 0.5)


def batch_generator(seed: int, indices: Sequence[int]) -> np.random.Generator:
    """The generator for one batch's random choices: a function of the run seed and the batch's indices."""
    return np.random.default_rng([seed, *(int(i) for i in indices)])


class _BatchSeeded(torch.utils.data.Dataset):
    """A map-style dataset whose items are drawn together per batch, from `batch_generator`."""

    seed: int

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, Block]:
        raise NotImplementedError

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[Block, Block]]:
        rng = batch_generator(self.seed, indices)
        return [self.draw(int(index), rng) for index in indices]

    def __getitem__(self, index: int) -> tuple[Block, Block]:
        return self.__getitems__([index])[0]


def random_subspan(block: Block, rng: np.random.Generator) -> Block:
    """A contiguous crop of 25-50% of the block's tokens (at least one), starting at a word start."""
    ids, starts = block
    length = len(ids)
    low = max(1, int(np.ceil(SUBSPAN_SHARE[0] * length)))
    high = max(low, int(np.ceil(SUBSPAN_SHARE[1] * length)))
    size = int(rng.integers(low, high + 1))
    word_starts = np.flatnonzero(starts[:length - size + 1])  # the first token of a block always starts a word
    first = int(rng.choice(word_starts)) if word_starts.size else int(rng.integers(length - size + 1))
    crop_starts = starts[first:first + size].copy()
    crop_starts[0] = True
    return ids[first:first + size].copy(), crop_starts


class SpanPairDataset(_BatchSeeded):
    """Item d: two spans of document d of the store (coCondenser, Gao and Callan 2021b).

    A document of several blocks gives two distinct blocks drawn at random; a one-block document gives two
    independent random sub-spans of its block (`random_subspan`).
    """

    def __init__(self, store: TokenStore, seed: int) -> None:
        self.store, self.seed = store, seed
        self.offsets = store.document_block_offsets()  # (num_documents + 1,)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, Block]:
        first, end = int(self.offsets[index]), int(self.offsets[index + 1])
        if end - first >= 2:
            a, b = rng.choice(end - first, size=2, replace=False)
            return self.store.block(first + int(a)), self.store.block(first + int(b))
        block = self.store.block(first)
        return random_subspan(block, rng), random_subspan(block, rng)


def iter_pairs(path: Path) -> Iterator[tuple[str, list[str], str]]:
    """(query, positives, "file:line") for each line of a pairs file; other fields (e.g. "neg") are ignored."""
    for number, line in numbered_lines(Path(path)):
        where = f"{path}:{number}"
        yield (*_check_pair(parse_json_line(path, number, line), where), where)


def _check_pair(record: object, where: str) -> tuple[str, list[str]]:
    if not isinstance(record, dict) or "query" not in record or "pos" not in record:
        raise DataError(f"{where}: expected a JSON object with fields 'query' and 'pos'")
    query, positives = record["query"], record["pos"]
    positives = [positives] if isinstance(positives, str) else positives
    if not isinstance(query, str) or not query.strip():
        raise DataError(f"{where}: field 'query' must be a non-empty string")
    if not isinstance(positives, list) or not positives:
        raise DataError(f"{where}: field 'pos' must be a string or a non-empty list of strings")
    if not all(isinstance(text, str) and text.strip() for text in positives):
        raise DataError(f"{where}: every entry of 'pos' must be a non-empty string")
    return query, positives


class PairsDataset(_BatchSeeded):
    """Item i: (query i, one of its positives drawn at random), tokenised once at load, cut to `max_length`."""

    def __init__(self, path: str | Path, tokenizer: PreTrainedTokenizerBase, max_length: int, seed: int) -> None:
        self.seed = seed
        if not Path(path).is_file():
            raise DataError(f"{path}: pairs file not found")
        pairs = list(iter_pairs(Path(path)))
        if not pairs:
            raise DataError(f"{path}: no pairs in the file")
        texts = [text for query, positives, _ in pairs for text in (query, *positives)]
        blocks = text_blocks(texts, tokenizer, max_length - tokenizer.num_special_tokens_to_add(pair=False))
        self.queries: list[Block] = []
        self.positives: list[list[Block]] = []
        first = 0
        for _, positives, where in pairs:
            group, first = blocks[first:first + 1 + len(positives)], first + 1 + len(positives)
            if any(len(ids) == 0 for ids, _ in group):
                raise DataError(f"{where}: a text has no tokens")
            self.queries.append(group[0])
            self.positives.append(group[1:])

    def __len__(self) -> int:
        return len(self.queries)

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, Block]:
        positives = self.positives[index]
        return self.queries[index], positives[int(rng.integers(len(positives)))]


def text_blocks(texts: list[str], tokenizer: PreTrainedTokenizerBase, max_tokens: int) -> list[Block]:
    """Token ids (no special tokens) and word starts of each text, cut to `max_tokens`."""
    encodings = plain_backend(tokenizer).encode_batch(texts, add_special_tokens=False)
    return [(np.asarray(e.ids[:max_tokens], dtype=np.int32), word_starts_of(e.word_ids)[:max_tokens])
            for e in encodings]


class PairCollator:
    """Pairs of blocks → one `BlockCollator` batch of 2B rows: rows 0..B-1 the first views, B..2B-1 the second."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.blocks = BlockCollator(tokenizer)

    def __call__(self, pairs: list[tuple[Block, Block]]) -> dict[str, torch.Tensor]:
        return self.blocks([first for first, _ in pairs] + [second for _, second in pairs])
