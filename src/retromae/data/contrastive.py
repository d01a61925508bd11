"""Two or three views per example for the contrastive objectives: spans or crops of one document, or given pairs.

Owns: `SpanPairDataset` (coCondenser-style positives: two random spans of the same document of a `TokenStore`),
`CropPairDataset` (Contriever's positives: two independent random crops of one block of a document, each with
random token deletion), `PairsDataset` (given pairs from `{"query": str, "pos": str | [str]}` JSON lines, e.g.
NLI entailment pairs, and with `"neg"` hard negatives, triples for supervised SimCSE; the files are read by
`data.pairs`), the check that enough documents are long enough for two views, and
`PairCollator` (tuples of blocks → one padded batch of 2B or 3B rows: the B first views, then the B second views,
then any third views, in the same order).

One example is one document (or one query), so a batch never holds two documents' views as false negatives of
each other. Random choices (which spans, which positive) come from a generator seeded by the run seed and the
indices of the whole batch (`__getitems__`, which the DataLoader calls with a batch's indices): reproducible,
identical after a resume (the sampler replays the same batches), and different from epoch to epoch (a document
lands in another batch). No model code and no masking.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from retromae.data.collate import Block, BlockCollator
from retromae.data.pairs import iter_pairs
from retromae.data.token_store import TokenStore, plain_backend, word_starts_of
from retromae.runtime.errors import DataError
from retromae.runtime.lines import check_regular_file

SUBSPAN_SHARE = (0.25, 0.5)
CROP_SHARE = (0.1, 0.5)  # Contriever's ratio_min, ratio_max
DELETE_PROBABILITY = 0.1  # Contriever's token deletion (prob_augmentation)
logger = logging.getLogger(__name__)


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


def random_crop(block: Block, rng: np.random.Generator) -> Block:
    """Contriever's view: a contiguous crop of a uniform 10-50% of the block (at least one token), then each token
    deleted with probability 0.1 (at least one kept)."""
    ids, starts = block
    size = max(1, int(len(ids) * rng.uniform(*CROP_SHARE)))
    first = int(rng.integers(len(ids) - size + 1))
    kept = rng.random(size) > DELETE_PROBABILITY
    kept[int(rng.integers(size))] |= not kept.any()
    crop_starts = starts[first:first + size][kept].copy()
    crop_starts[0] = True
    return ids[first:first + size][kept].copy(), crop_starts


def long_enough_documents(store: TokenStore, min_tokens: int, min_documents: int, objective: str) -> np.ndarray:
    """The documents with at least `min_tokens` tokens; a DataError saying how many qualify when fewer than
    `min_documents` do."""
    counts = store.document_token_counts()  # (num_documents,)
    qualified = np.flatnonzero(counts >= min_tokens)
    if len(qualified) < min_documents:
        sources = ", ".join(store.meta.get("sources", [])) or str(store.path)
        raise DataError(f"{sources}: only {len(qualified)} of {len(counts)} documents have the {min_tokens} tokens "
                        f"that two views of the {objective} objective need, fewer than one batch of {min_documents}; "
                        "give longer documents or a smaller --batch-size")
    return qualified


class SpanPairDataset(_BatchSeeded):
    """Item i: two spans of the i-th document of the store that has `min_tokens` tokens (coCondenser, Gao and
    Callan 2021b).

    A document of several blocks gives two distinct blocks drawn at random; a one-block document gives two
    independent random sub-spans of its block (`random_subspan`). Fewer than `min_documents` such documents is a
    DataError naming how many qualify.
    """

    def __init__(self, store: TokenStore, seed: int, min_tokens: int = 1, min_documents: int = 1,
                 objective: str = "contrastive") -> None:
        self.store, self.seed = store, seed
        self.offsets = store.document_block_offsets()  # (num_documents + 1,)
        self.documents = long_enough_documents(store, min_tokens, min_documents, objective)  # (N,)

    def __len__(self) -> int:
        return len(self.documents)

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, Block]:
        document = int(self.documents[index])
        first, end = int(self.offsets[document]), int(self.offsets[document + 1])
        if end - first >= 2:
            a, b = rng.choice(end - first, size=2, replace=False)
            return self.store.block(first + int(a)), self.store.block(first + int(b))
        block = self.store.block(first)
        return random_subspan(block, rng), random_subspan(block, rng)


class CropPairDataset(SpanPairDataset):
    """Item i: two independent `random_crop`s of one random block of the i-th long-enough document (Contriever:
    the reference crops 256-token chunks; here a block of --max-length tokens)."""

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, Block]:
        document = int(self.documents[index])
        first, end = int(self.offsets[document]), int(self.offsets[document + 1])
        block = self.store.block(first + int(rng.integers(end - first)))
        return random_crop(block, rng), random_crop(block, rng)


def _with_negatives(pairs: list, path: str | Path) -> list:
    """The pairs whose query has a hard negative; the others are left out, with a warning saying how many."""
    kept = [pair for pair in pairs if pair[2]]
    if not kept:
        raise DataError(f"{path}: no line has a hard negative ('neg' is empty on all {len(pairs)}); supervised "
                        "SimCSE needs (query, positive, hard negative) triples")
    if len(kept) < len(pairs):
        logger.warning("%s: %d of %d queries have no hard negative ('neg': []) and are left out", path,
                       len(pairs) - len(kept), len(pairs))
    return kept


class PairsDataset(_BatchSeeded):
    """Item i: (query i, one of its positives drawn at random), and with `negatives` one of its hard negatives
    drawn at random too; tokenised once at load, cut to `max_length`."""

    def __init__(self, path: str | Path, tokenizer: PreTrainedTokenizerBase, max_length: int, seed: int,
                 negatives: bool = False) -> None:
        self.seed = seed
        check_regular_file(Path(path), "pairs file")
        pairs = list(iter_pairs(Path(path), negatives))
        if not pairs:
            raise DataError(f"{path}: no pairs in the file")
        if negatives:
            pairs = _with_negatives(pairs, path)
        texts = [text for query, positives, hard, _ in pairs for text in (query, *positives, *hard)]
        blocks = iter(text_blocks(texts, tokenizer, max_length - tokenizer.num_special_tokens_to_add(pair=False)))
        self.groups: list[list[list[Block]]] = []  # per item: [[query], positives, negatives (maybe empty)]
        for _, positives, hard, where in pairs:
            group = [[next(blocks)], [next(blocks) for _ in positives], [next(blocks) for _ in hard]]
            if any(len(ids) == 0 for texts in group for ids, _ in texts):
                raise DataError(f"{where}: a text has no tokens")
            self.groups.append(group if negatives else group[:2])

    def __len__(self) -> int:
        return len(self.groups)

    def draw(self, index: int, rng: np.random.Generator) -> tuple[Block, ...]:
        query, *choices = self.groups[index]
        return (query[0], *(texts[int(rng.integers(len(texts)))] for texts in choices))


def text_blocks(texts: list[str], tokenizer: PreTrainedTokenizerBase, max_tokens: int) -> list[Block]:
    """Token ids (no special tokens) and word starts of each text, cut to `max_tokens`."""
    encodings = plain_backend(tokenizer).encode_batch(texts, add_special_tokens=False)
    return [(np.asarray(e.ids[:max_tokens], dtype=np.int32), word_starts_of(e.word_ids)[:max_tokens])
            for e in encodings]


class PairCollator:
    """Pairs (or triples) of blocks → one `BlockCollator` batch of 2B (3B) rows: rows 0..B-1 the first views,
    B..2B-1 the second, then any third."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, pad_to_multiple_of: int | None = None,
                 max_length: int | None = None) -> None:
        self.blocks = BlockCollator(tokenizer, pad_to_multiple_of, max_length)

    def __call__(self, pairs: list[tuple[Block, ...]]) -> dict[str, torch.Tensor]:
        return self.blocks([block for view in zip(*pairs, strict=True) for block in view])
