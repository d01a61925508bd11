"""Bound what a tokenizer reads of a text that a model truncates: one huge text costs what its first tokens cost.

Owns `clip_texts(tokenizer, texts, max_length)`: the texts, each one longer than `CHARACTERS_PER_TOKEN * max_length`
characters replaced by a prefix that tokenises, truncated to `max_length`, to exactly the tokens of the whole text
truncated. Every place that tokenises texts for a model with truncation (`Encoder.tokenize`, the fine-tuning and
cross-encoder collators, the cross-encoder's scoring, the fine-tuning length plan) passes its texts through it first.
Texts under the bound are returned unchanged, so normal data tokenises as before. This bounds the characters a
tokenizer reads, not what its normaliser makes of each: that is bounded where a tokenizer is loaded
(`retromae.models.model_source.check_tokenizer_growth`), so that one text costs a bounded amount to read. Does not own
tokenisation itself, truncation rules or the pre-training token store (which tokenises whole documents in pieces,
`retromae.data.token_store`, cut where `last_cut` finds, so that the pieces give the whole document's tokens).

Why the prefix is exact. A fast tokenizer normalises the text, splits it into pre-tokens, tokenises each pre-token
on its own (WordPiece, BPE and Unigram never look across a pre-token) and adds special tokens; truncation keeps the
first tokens (every tokenizer loaded truncates on the right: `retromae.models.pretrained.read_from_the_start`). Cut
the text just before a whitespace character at which the pre-tokenizer always splits, the character before the cut
not being whitespace. The normalisers of the supported families act character by character
(lower-casing, accent stripping, NFKC, BERT's control-character cleaning and CJK spacing; a whitespace character
composes with nothing before it) and the pre-tokens before the cut end there in the whole text as in the prefix:
BERT splits at every whitespace, byte-level BPE's pattern ends every letter, digit or punctuation run at whitespace
(and a whitespace run before the cut is followed by the same character in both), Metaspace splits at spaces. So the
prefix's tokens are the whole text's first tokens, and once the prefix has at least `max_length` tokens, truncating
either keeps the same ones (for a pair, fewer still). Which of space, newline and tab split
is asked of the tokenizer itself (`split_characters`: Metaspace after NFKC keeps a newline inside a word); an added
token holding one of them rules it out (it would be matched across the cut).

The prefix starts at `CHARACTERS_PER_TOKEN * max_length` characters and doubles while it holds fewer than
`max_length` tokens, up to `CEILING_PER_TOKEN * max_length` characters. Two cases fall inside a word, outside the
argument above. A stretch without whitespace longer than the prefix (one enormous "word"; CJK text under Metaspace
or byte-level BPE) is cut before the next whitespace when that lies within the ceiling (exact), else at a character
boundary (not inside a combining sequence) at the prefix's size: the tokens kept are the first `max_length` of a
prefix that holds at least that many, and only the last tokens of that prefix are those of a cut word (the tests
find the whole text's tokens for every family). A text with fewer than `max_length` tokens in the ceiling's
characters (a whitespace run or a word that long) is cut at the ceiling, not read whole: its tokens before that
word are the whole text's, and the rest is lost.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

CHARACTERS_PER_TOKEN = 20  # a text over 20 characters per token of max_length is clipped (tokens average 4 to 5)
CEILING_PER_TOKEN = 500  # the longest prefix the tokenizer reads, per token of max_length
CANDIDATES = " \n\t"
JOINERS = {"\u200c", "\u200d"}  # zero-width (non-)joiner: part of the character sequence around it


def clip_texts(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int,
               prefix: str = "") -> list[str]:
    """`prefix + text` for each of `texts`, those over `CHARACTERS_PER_TOKEN * max_length` characters cut to a
    prefix whose first `max_length` tokens are those of the whole (module docstring); the whole text is never
    copied or handed to the tokenizer."""
    start = CHARACTERS_PER_TOKEN * max_length
    long = {row: start for row, text in enumerate(texts) if len(prefix) + len(text) > start}
    if not prefix:
        clipped = list(texts)
    else:  # a long text gets its prefix once cut
        clipped = [text if row in long else prefix + text for row, text in enumerate(texts)]
    if not long:
        return clipped
    splits = split_characters(tokenizer)
    ceiling = CEILING_PER_TOKEN * max_length
    while long:
        rows = list(long)
        ends = [prefix_end(texts[row], long[row], ceiling, splits) for row in rows]
        prefixes = [prefix + texts[row][:end] for row, end in zip(rows, ends, strict=True)]
        counts = [len(ids) for ids in tokenizer(prefixes, add_special_tokens=False, truncation=True,
                                                max_length=max_length, return_attention_mask=False,
                                                return_token_type_ids=False)["input_ids"]]
        for row, end, text, count in zip(rows, ends, prefixes, counts, strict=True):
            size = long.pop(row)
            if count >= max_length or end >= len(texts[row]):
                clipped[row] = text
            elif size < ceiling:
                long[row] = min(2 * size, ceiling)
            else:  # fewer tokens than max_length in `ceiling` characters: the last resort, a cut at the ceiling
                clipped[row] = prefix + texts[row][:character_boundary(texts[row], ceiling)]
    return clipped


def split_characters(tokenizer: PreTrainedTokenizerBase) -> str:
    """Which of space, newline and tab the tokenizer's normaliser and pre-tokenizer always split a word at (asked
    of them on a probe), leaving out those inside an added token."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow tokenizer: none of the supported families; cut before spaces only
        return " "
    added = [token.content for token in tokenizer.added_tokens_decoder.values()]
    splits = ""
    for char in CANDIDATES:
        probe = f"ab{char}cd"
        text = backend.normalizer.normalize_str(probe) if backend.normalizer else probe
        pieces = backend.pre_tokenizer.pre_tokenize_str(text) if backend.pre_tokenizer else [(text, (0, 0))]
        if not any("b" in piece and "c" in piece for piece, _ in pieces) and not any(char in a for a in added):
            splits += char
    return splits


def prefix_end(text: str, size: int, ceiling: int, splits: str) -> int:
    """Where the prefix of about `size` characters of `text` ends: at a cut (a character of `splits` after a
    non-whitespace character), the last at or before `size`; with none, the first after it within `ceiling`; with
    none either, at a character boundary at `size`."""
    if len(text) <= size:
        return len(text)
    end = last_cut(text, size, splits)
    if end is None:
        end = _first_cut(text, size + 1, min(len(text), ceiling + 1), splits)
    return end if end is not None else character_boundary(text, size)


def last_cut(text: str, high: int, splits: str, low: int = 1) -> int | None:
    """The last cut at a position in [low, high] (`low` at least 1): before a character of `splits` that follows a
    non-whitespace character, where the text's pre-tokens end alike whether it goes on or not (module docstring).
    Searched back from `high` in spans growing fourfold: time in proportion to the distance to the cut, whatever
    whitespace the text holds."""
    if not splits:
        return None
    pattern = _cut_pattern(splits)
    end, span = high + 1, 256
    while end > low:
        begin = max(low, end - span)
        cuts = [match.start() for match in pattern.finditer(text, begin, end)]  # lookbehind: sees text[begin - 1]
        if cuts:
            return cuts[-1]
        end, span = begin, 4 * span
    return None


@functools.cache
def _cut_pattern(splits: str) -> re.Pattern[str]:
    """A character of `splits` after a non-whitespace one (a str pattern's `\\s` is exactly `str.isspace`)."""
    return re.compile(rf"(?<=\S)[{re.escape(splits)}]")


def _first_cut(text: str, low: int, high: int, splits: str) -> int | None:
    """The first cut at a position in [low, high)."""
    found = _cut_pattern(splits).search(text, low, high) if splits else None
    return found.start() if found else None


def character_boundary(text: str, position: int) -> int:
    """`position`, moved back off combining marks and joiners so that no character sequence is split."""
    while position > 1 and (text[position] in JOINERS or unicodedata.category(text[position]) in ("Mn", "Mc", "Me")):
        position -= 1
    return position
