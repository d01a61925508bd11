"""Masks for RetroMAE-style pre-training: pure, seeded, vectorised tensor functions.

Owns: choosing positions to corrupt (token-level or whole-word), BERT's 80/10/10 MLM corruption for the encoder,
the decoder's [MASK] positions for basic decoding, and the position-specific attention mask of enhanced decoding
(RetroMAE paper, Sec. 3.1-3.3, Eq. 7), whole or a block of rows at a time from counter-based scores
(`hashed_uniform`, for long inputs), plus a per-row reference of the latter for tests and benchmarks, and the
windowed causal mask of SEED-Encoder's weak decoder (Lu et al., 2021, Eq. 9).

Does not own: tokenisation (word starts come from the caller, e.g. a fast tokenizer's `word_ids`), models, losses.
Every random function takes a `torch.Generator` on the inputs' device and draws from it alone (no global RNG);
everything is built with tensor ops on that device, so the same code runs on CPU and CUDA. Masks are boolean
(True = selected / may attend), never float -inf, so a fully hidden row cannot turn into NaN under bf16/fp16.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100
MASK_SHARE = 0.8
RANDOM_SHARE = 0.1


def _check_ratio(ratio: float) -> None:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"mask ratio must lie in [0, 1], got {ratio}")


def _word_index(candidates: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
    """Number each candidate token's word, 1..W per row; a candidate after a non-candidate also starts a word."""
    after_gap = torch.ones_like(candidates)  # (B, L)
    after_gap[:, 1:] = ~candidates[:, :-1]
    starts = candidates & (word_starts.bool() | after_gap)  # (B, L)
    return starts.long().cumsum(dim=1)  # (B, L)


def select_positions(
    candidates: torch.Tensor,
    ratio: float,
    generator: torch.Generator,
    word_starts: torch.Tensor | None = None,
) -> torch.Tensor:
    """Choose about `ratio` of the candidate positions of each row, independently (Bernoulli, as in BERT).

    With `word_starts` (True where a word begins, e.g. from a fast tokenizer's `word_ids`), whole words are
    chosen: a word is a word-start candidate plus the following non-start candidates, and a chosen word selects
    all its tokens. Words never cross a non-candidate (special/padding) token. Returns a bool tensor (B, L).
    """
    _check_ratio(ratio)
    candidates = candidates.bool()
    batch, length = candidates.shape
    if word_starts is None:
        draws = torch.rand((batch, length), generator=generator, device=candidates.device)  # (B, L)
        return candidates & (draws < ratio)
    word_draws = torch.rand((batch, length + 1), generator=generator, device=candidates.device)  # (B, L + 1)
    token_draws = word_draws.gather(1, _word_index(candidates, word_starts))  # (B, L)
    return candidates & (token_draws < ratio)


def mlm_mask(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    *,
    ratio: float,
    mask_token_id: int,
    vocab_size: int,
    generator: torch.Generator,
    word_starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption: select `ratio` of the non-special tokens; of those 80% [MASK], 10% random, 10% kept.

    `special_tokens_mask` is True on special tokens and padding, which are never selected. Returns
    `(corrupted_ids, labels)`, both (B, L); labels hold the original id at selected positions and -100 elsewhere.
    """
    selected = select_positions(~special_tokens_mask.bool(), ratio, generator, word_starts)  # (B, L)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))  # (B, L)
    action = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # (B, L)
    random_ids = torch.randint(
        vocab_size, input_ids.shape, generator=generator, device=input_ids.device, dtype=input_ids.dtype
    )  # (B, L)
    to_mask = selected & (action < MASK_SHARE)
    to_random = selected & (action >= MASK_SHARE) & (action < MASK_SHARE + RANDOM_SHARE)
    corrupted = torch.where(to_mask, torch.full_like(input_ids, mask_token_id), input_ids)
    corrupted = torch.where(to_random, random_ids, corrupted)  # (B, L)
    return corrupted, labels


def decoder_input_mask(
    special_tokens_mask: torch.Tensor,
    *,
    ratio: float,
    generator: torch.Generator,
    word_starts: torch.Tensor | None = None,
) -> torch.Tensor:
    """Basic decoding: positions of the decoder input to replace by [MASK] (all of them; no 80/10/10).

    Special tokens and padding (True in `special_tokens_mask`) are never chosen. Returns a bool tensor (B, L).
    """
    return select_positions(~special_tokens_mask.bool(), ratio, generator, word_starts)


def enhanced_decoding_mask(attention_mask: torch.Tensor, *, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """Enhanced decoding's position-specific attention mask (Eq. 7), True = row i may attend to column j.

    Draws uniform scores (B, L, L) from `generator` and applies `enhanced_decoding_mask_from_scores`.
    """
    batch, length = attention_mask.shape
    scores = torch.rand((batch, length, length), generator=generator, device=attention_mask.device)  # (B, L, L)
    return enhanced_decoding_mask_from_scores(attention_mask, scores, ratio)


def enhanced_decoding_mask_from_scores(
    attention_mask: torch.Tensor, scores: torch.Tensor, ratio: float, first_row: int = 0
) -> torch.Tensor:
    """Eq. 7 for given uniform scores: row i sees a random sample of the other real tokens, plus column 0 unless i = 0.

    Column 0 holds the sentence embedding ([CLS] position) and counts as real whatever `attention_mask[:, 0]` says.
    For a real row i, the candidates are the real columns j with j != i and j != 0; candidate j is hidden when
    scores[b, i, j] < ratio, so each row hides a Binomial(n, ratio) sample, `ratio` of its candidates on average.
    Column 0 is visible in every row but row 0; the diagonal is hidden; padding columns are never visible.
    No row is empty: when row 0 would see nothing, its highest-scoring candidate is shown (or, when [CLS] is the
    only real token, row 0 sees itself); padding rows see column 0 only.

    `scores` (B, C, L) may hold a block of C rows, first_row .. first_row + C - 1 (long inputs build the mask a
    block at a time, `retromae.objectives.retromae`). Returns a bool tensor (B, C, L).
    """
    _check_ratio(ratio)
    position = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (L,)
    rows = position[first_row:first_row + scores.shape[1]]  # (C,)
    real = (attention_mask != 0) | (position == 0)  # (B, L)
    columns = real & (position != 0)  # (B, L): real columns other than column 0
    visible = real[:, rows, None] & columns[:, None, :] & (scores >= ratio)  # (B, C, L)
    visible[:, torch.arange(rows.shape[0], device=rows.device), rows] = False  # the diagonal
    visible[:, :, 0] |= rows != 0
    if first_row == 0:
        _keep_first_row_non_empty(visible, columns, scores)
    return visible


def draw_seeds(count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` int32 seeds for `hashed_uniform`, drawn from `generator` on its device."""
    return torch.randint(-2**31, 2**31 - 1, (count,), generator=generator, device=generator.device, dtype=torch.int32)


def hashed_uniform(seeds: torch.Tensor, first_row: int, rows: int, length: int) -> torch.Tensor:
    """Uniform scores in [0, 1) for rows first_row .. first_row + rows - 1 of a (B, L, L) grid, shape (B, rows, L).

    A counter-based draw: score (b, i, j) is MurmurHash3's 32-bit finalizer of the cell's index i * L + j (times the
    golden ratio) plus seeds[b], so any block of rows can be drawn alone, and drawn again identically (in a backward
    pass that recomputes it), without a generator's state. 32-bit integers: half the memory traffic of 64-bit ones,
    and room for L up to 46,340. `seeds` (B,) int32, drawn once per step from the training generator."""
    cells = torch.arange(first_row * length, (first_row + rows) * length, device=seeds.device, dtype=torch.int32)
    x = cells.view(rows, length) * _GOLDEN + seeds[:, None, None]  # (B, rows, L) int32, wrapping
    x = (x ^ _logical_shift(x, 16)) * _MIX_1
    x = (x ^ _logical_shift(x, 13)) * _MIX_2
    x = x ^ _logical_shift(x, 16)
    return _logical_shift(x, 8).float() / 2.0**24  # the top 24 bits: exact in float32


# The golden ratio and MurmurHash3's fmix32 constants as signed 32-bit integers (torch has no uint32 arithmetic).
_GOLDEN = 0x9E3779B9 - 2**32
_MIX_1 = 0x85EBCA6B - 2**32
_MIX_2 = 0xC2B2AE35 - 2**32


def _logical_shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x >>> bits on int32 (zero-filled, as on unsigned integers)."""
    return (x >> bits) & ((1 << (32 - bits)) - 1)


def _keep_first_row_non_empty(visible: torch.Tensor, columns: torch.Tensor, scores: torch.Tensor) -> None:
    """Row 0 attends to its best-scoring candidate when its sample came out empty, to itself without candidates."""
    empty = ~visible[:, 0].any(dim=-1)  # (B,)
    best = torch.where(columns, scores[:, 0], -1.0).argmax(dim=-1)  # (B,)
    has_candidates = columns.any(dim=-1)  # (B,)
    target = torch.where(has_candidates, best, 0)  # (B,)
    rows = torch.arange(visible.shape[0], device=visible.device)
    visible[rows, 0, target] |= empty


def reference_enhanced_decoding_mask(
    attention_mask: torch.Tensor, scores: torch.Tensor, ratio: float
) -> torch.Tensor:
    """Straightforward per-row Python loop implementing the rule of `enhanced_decoding_mask_from_scores`.

    For tests (equality with the vectorised version on the same scores) and as the benchmark's baseline;
    do not use it in training.
    """
    _check_ratio(ratio)
    batch, length = attention_mask.shape
    mask_rows = (attention_mask != 0).tolist()
    score_rows = scores.tolist()
    out = []
    for b in range(batch):
        real = [j == 0 or bool(mask_rows[b][j]) for j in range(length)]
        rows = []
        for i in range(length):
            visible = [False] * length
            if real[i]:
                candidates = [j for j in range(length) if real[j] and j != i and j != 0]
                for j in candidates:
                    visible[j] = score_rows[b][i][j] >= ratio
                if i == 0 and not any(visible):
                    visible[max(candidates, key=lambda j: score_rows[b][0][j]) if candidates else 0] = True
            if i != 0:
                visible[0] = True
            rows.append(visible)
        out.append(rows)
    return torch.tensor(out, dtype=torch.bool, device=attention_mask.device)


def seed_decoder_mask(attention_mask: torch.Tensor, window: int) -> torch.Tensor:
    """SEED-Encoder's weak-decoder attention (Eq. 9), True = row i may attend to column j; shape (B, L, L).

    The decoder input is shifted: position 0 holds the encoder's [CLS] embedding and position i >= 1 the
    original token i, and row i predicts token i + 1. So the `window` previous tokens of that target are
    columns i - window + 1 .. i: row i sees those that are real (`attention_mask`), plus column 0 always.
    Causal (never j > i), never padding, never empty (column 0); deterministic, no generator.
    """
    if window < 1:
        raise ValueError(f"attention window must be at least 1, got {window}")
    length = attention_mask.shape[1]
    position = torch.arange(length, device=attention_mask.device)  # (L,)
    offset = position[:, None] - position[None, :]  # (L, L): i - j
    in_window = (offset >= 0) & (offset < window)  # (L, L)
    real = (attention_mask != 0) | (position == 0)  # (B, L)
    return (in_window[None] & real[:, None, :]) | (position == 0)[None, None, :]
