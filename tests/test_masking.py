"""Mask invariants, equality of the vectorised enhanced mask with its per-row reference, seeding, whole words."""

from __future__ import annotations

import pytest
import torch
from conftest import make_sentences
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from retromae.objectives.masking import (
    IGNORE_INDEX,
    decoder_input_mask,
    draw_seeds,
    enhanced_decoding_mask,
    enhanced_decoding_mask_from_scores,
    hashed_uniform,
    mlm_mask,
    reference_enhanced_decoding_mask,
    seed_decoder_mask,
    select_positions,
)

MASK_ID = 4
VOCAB = 1000


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def right_padded(lengths: list[int], length: int) -> torch.Tensor:
    """An attention mask (B, L) of ones on each row's first `lengths[b]` positions."""
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()


def text_batch(batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (B, L) with [CLS]/[SEP]-like specials at both ends and right padding; returns (ids, special mask)."""
    g = generator(seed)
    lengths = torch.randint(3, length + 1, (batch,), generator=g)
    real = torch.arange(length)[None, :] < lengths[:, None]  # (B, L)
    special = ~real
    special[:, 0] = True
    special[torch.arange(batch), lengths - 1] = True
    ids = torch.randint(10, VOCAB, (batch, length), generator=g)
    return ids, special


def random_word_starts(candidates: torch.Tensor, seed: int) -> torch.Tensor:
    return candidates & (torch.rand(candidates.shape, generator=generator(seed)) < 0.4)


def words(candidates: torch.Tensor, word_starts: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per-row lists of words, each a list of (row, column): a word starts at a word start or after a non-candidate."""
    out = []
    for b in range(candidates.shape[0]):
        current: list[tuple[int, int]] | None = None
        for j in range(candidates.shape[1]):
            if not candidates[b, j]:
                current = None
                continue
            if current is None or word_starts[b, j]:
                current = []
                out.append(current)
            current.append((b, j))
    return out


# enhanced decoding: vectorised == reference


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_enhanced_mask_equals_reference_with_padding(ratio):
    g = generator(1)
    for _ in range(25):
        batch, length = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 13, (1,), generator=g))
        lengths = torch.randint(1, length + 1, (batch,), generator=g).tolist()
        attention_mask = right_padded(lengths, length)
        scores = torch.rand((batch, length, length), generator=g)
        expected = reference_enhanced_decoding_mask(attention_mask, scores, ratio)
        assert torch.equal(enhanced_decoding_mask_from_scores(attention_mask, scores, ratio), expected)


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.9])
def test_enhanced_mask_equals_reference_with_holes_and_tied_scores(ratio):
    g = generator(2)
    for _ in range(25):
        attention_mask = (torch.rand((3, 10), generator=g) < 0.7).long()  # padding anywhere, column 0 included
        scores = torch.randint(0, 3, (3, 10, 10), generator=g).float() / 3  # many ties: broken by column index
        expected = reference_enhanced_decoding_mask(attention_mask, scores, ratio)
        assert torch.equal(enhanced_decoding_mask_from_scores(attention_mask, scores, ratio), expected)


# enhanced decoding: invariants


def check_enhanced_invariants(visible: torch.Tensor, attention_mask: torch.Tensor, ratio: float) -> None:
    batch, length = attention_mask.shape
    real = attention_mask.bool().clone()
    real[:, 0] = True
    eye = torch.eye(length, dtype=torch.bool)
    assert visible.dtype == torch.bool and visible.shape == (batch, length, length)
    assert not visible[:, eye].any(), "diagonal visible"
    assert visible[:, 1:, 0].all(), "column 0 hidden in a row other than 0"
    assert not visible[:, 0, 0].any(), "row 0 sees itself"
    assert not (visible & ~real[:, None, :]).any(), "padding column visible"
    assert visible.any(dim=-1).all(), "empty row"
    pad_rows = visible[~real]  # (P, L)
    assert pad_rows[:, 0].all() and not pad_rows[:, 1:].any(), "padding row sees more than column 0"
    columns = real.clone()
    columns[:, 0] = False
    n = columns.sum(dim=1) - 1  # candidates of a real row i >= 1
    counted = visible[:, 1:, 1:].sum(dim=-1)  # (B, L - 1): visible candidates of rows 1..
    if ratio in (0.0, 1.0):  # the Binomial sample is certain at the extremes
        expected = n[:, None] if ratio == 0.0 else torch.zeros_like(n)[:, None]
        assert torch.equal(counted[real[:, 1:]], expected.expand_as(counted)[real[:, 1:]])


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.5, 0.9, 1.0])
def test_enhanced_mask_invariants(ratio):
    g = generator(3)
    length = 48
    lengths = torch.randint(2, length + 1, (64,), generator=g).tolist()
    attention_mask = right_padded(lengths, length)
    visible = enhanced_decoding_mask(attention_mask, ratio=ratio, generator=g)
    check_enhanced_invariants(visible, attention_mask, ratio)
    candidates = attention_mask.bool()[:, None, :] & attention_mask.bool()[:, :, None] & ~torch.eye(length).bool()
    candidates[:, :, 0] = False
    candidates[:, 0, :] = False
    share = (visible & candidates).sum() / candidates.sum()
    assert abs(share.item() - (1 - ratio)) < 0.01


def test_enhanced_rows_are_sampled_independently():
    visible = enhanced_decoding_mask(torch.ones(1, 40), ratio=0.5, generator=generator(4))
    rows = {tuple(row.tolist()) for row in visible[0, 1:]}
    assert len(rows) == 39
    per_column = visible[0, 1:, 1:].float().mean(dim=0)  # every column visible in about half the rows
    assert per_column.min() > 0.2 and per_column.max() < 0.8


def test_enhanced_row_zero_is_never_empty():
    attention_mask = right_padded([1, 2, 3], 4)
    visible = enhanced_decoding_mask(attention_mask, ratio=1.0, generator=generator(5))
    assert visible[0, 0].tolist() == [True, False, False, False]  # only [CLS] is real: it sees itself
    assert visible[1, 0].tolist() == [False, True, False, False]
    assert visible[2, 0].sum() == 1 and not visible[2, 0, 0]
    assert visible[:, 1:].any(dim=-1).all()


def test_enhanced_mask_ignores_attention_mask_dtype():
    attention_mask = right_padded([5, 8, 3], 8)
    expected = enhanced_decoding_mask(attention_mask, ratio=0.5, generator=generator(6))
    for dtype in (torch.bfloat16, torch.bool, torch.int32):
        got = enhanced_decoding_mask(attention_mask.to(dtype), ratio=0.5, generator=generator(6))
        assert got.dtype == torch.bool and torch.equal(got, expected)


# seeding


def all_masks(seed: int) -> list[torch.Tensor]:
    ids, special = text_batch(8, 32)
    attention_mask = (~special).long()
    attention_mask[:, 0] = 1
    return [
        *mlm_mask(ids, special, ratio=0.3, mask_token_id=MASK_ID, vocab_size=VOCAB, generator=generator(seed)),
        decoder_input_mask(special, ratio=0.5, generator=generator(seed)),
        decoder_input_mask(special, ratio=0.5, generator=generator(seed), word_starts=random_word_starts(~special, 0)),
        enhanced_decoding_mask(attention_mask, ratio=0.5, generator=generator(seed)),
    ]


def test_same_seed_same_masks_whatever_the_global_rng():
    torch.manual_seed(123)
    first = all_masks(7)
    torch.manual_seed(456)
    second = all_masks(7)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_different_seed_different_masks():
    assert not any(torch.equal(a, b) for a, b in zip(all_masks(7), all_masks(8), strict=True))


def test_ratio_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match="ratio"):
        select_positions(torch.ones(2, 3, dtype=torch.bool), 1.5, generator())
    with pytest.raises(ValueError, match="ratio"):
        enhanced_decoding_mask(torch.ones(2, 3), ratio=-0.1, generator=generator())


# encoder MLM


def test_mlm_mask_80_10_10():
    ids, special = text_batch(256, 128)
    corrupted, labels = mlm_mask(ids, special, ratio=0.3, mask_token_id=MASK_ID, vocab_size=VOCAB,
                                 generator=generator(9))
    selected = labels != IGNORE_INDEX
    assert corrupted.dtype == ids.dtype and labels.dtype == ids.dtype
    assert not (selected & special).any()
    assert abs(selected.sum().item() / (~special).sum().item() - 0.3) < 0.01
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(corrupted[~selected], ids[~selected])
    masked = (corrupted[selected] == MASK_ID).float().mean().item()
    kept = (corrupted[selected] == ids[selected]).float().mean().item()
    replaced = 1 - masked - kept
    assert abs(masked - 0.8) < 0.02 and abs(kept - 0.1) < 0.01 and abs(replaced - 0.1) < 0.01
    assert corrupted.min() >= 0 and corrupted.max() < VOCAB


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_mlm_mask_extreme_ratios(ratio):
    ids, special = text_batch(16, 32)
    corrupted, labels = mlm_mask(ids, special, ratio=ratio, mask_token_id=MASK_ID, vocab_size=VOCAB,
                                 generator=generator())
    assert torch.equal(labels != IGNORE_INDEX, ~special if ratio else torch.zeros_like(special))
    if not ratio:
        assert torch.equal(corrupted, ids)


def test_mlm_mask_whole_words():
    ids, special = text_batch(128, 64)
    word_starts = random_word_starts(~special, 10)
    _, labels = mlm_mask(ids, special, ratio=0.3, mask_token_id=MASK_ID, vocab_size=VOCAB, generator=generator(11),
                         word_starts=word_starts)
    check_whole_words(labels != IGNORE_INDEX, ~special, word_starts, 0.3)


# basic decoding input


def test_decoder_input_mask():
    _, special = text_batch(256, 128)
    chosen = decoder_input_mask(special, ratio=0.5, generator=generator(12))
    assert chosen.dtype == torch.bool and not (chosen & special).any()
    assert abs(chosen.sum().item() / (~special).sum().item() - 0.5) < 0.01


def test_decoder_input_mask_whole_words():
    _, special = text_batch(128, 64)
    word_starts = random_word_starts(~special, 13)
    chosen = decoder_input_mask(special, ratio=0.5, generator=generator(14), word_starts=word_starts)
    check_whole_words(chosen, ~special, word_starts, 0.5)


def test_words_never_cross_special_tokens():
    candidates = torch.tensor([[False, True, True, False, True, True, False]]).repeat(400, 1)
    word_starts = torch.tensor([[False, True, False, False, False, False, False]]).repeat(400, 1)
    chosen = select_positions(candidates, 0.5, generator(16), word_starts)
    assert torch.equal(chosen[:, 1], chosen[:, 2]) and torch.equal(chosen[:, 4], chosen[:, 5])
    assert (chosen[:, 1] != chosen[:, 4]).any(), "the token after a special token must start its own word"
    assert not chosen[:, [0, 3, 6]].any()


# whole words from real tokenizers


def check_whole_words(chosen: torch.Tensor, candidates: torch.Tensor, word_starts: torch.Tensor, ratio: float):
    assert not (chosen & ~candidates).any()
    groups = words(candidates, word_starts)
    chosen_words = 0
    for group in groups:
        states = {bool(chosen[b, j]) for b, j in group}
        assert len(states) == 1, f"word {group} partly chosen"
        chosen_words += states.pop()
    assert abs(chosen_words / len(groups) - ratio) < 0.03


def byte_level_bpe_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(make_sentences(300), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", 0), trim_offsets=True)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   mask_token="<mask>")


def word_starts_from_encoding(encoding, batch: int) -> torch.Tensor:
    """True where a token's word id differs from the previous token's: the data pipeline's rule."""
    rows = []
    for b in range(batch):
        word_ids = encoding.word_ids(b)
        rows.append([w is not None and (j == 0 or w != word_ids[j - 1]) for j, w in enumerate(word_ids)])
    return torch.tensor(rows)


@pytest.mark.parametrize("kind", ["wordpiece", "byte-level-bpe"])
def test_whole_word_masking_with_real_tokenizers(kind, tiny_tokenizer):
    tokenizer = tiny_tokenizer if kind == "wordpiece" else byte_level_bpe_tokenizer()
    sentences = make_sentences(64, seed=3)
    encoding = tokenizer(sentences, padding=True, return_special_tokens_mask=True, return_tensors="pt")
    special = encoding["special_tokens_mask"].bool()
    word_starts = word_starts_from_encoding(encoding, len(sentences))
    chosen = decoder_input_mask(special, ratio=0.5, generator=generator(15), word_starts=word_starts)
    for b in range(len(sentences)):
        by_word: dict[int, set[bool]] = {}
        for j, w in enumerate(encoding.word_ids(b)):
            if w is not None:
                by_word.setdefault(w, set()).add(bool(chosen[b, j]))
        assert all(len(states) == 1 for states in by_word.values())
    multi_piece = (~special & ~word_starts).sum().item()
    assert multi_piece > 50, "the sentences should contain words split into several tokens"
    assert 0.35 < chosen.sum().item() / (~special).sum().item() < 0.65


# --- SEED-Encoder's weak-decoder mask ----------------------------------------------------------------------


def reference_seed_mask(attention_mask: torch.Tensor, window: int) -> torch.Tensor:
    """Per-row loop: row i sees column 0 always, and the real columns j with i - window < j <= i."""
    batch, length = attention_mask.shape
    out = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for i in range(length):
            out[b, i, 0] = True
            for j in range(max(1, i - window + 1), i + 1):
                out[b, i, j] = bool(attention_mask[b, j])
    return out


@pytest.mark.parametrize("window", [1, 2, 3, 40])
def test_seed_mask_equals_reference(window):
    attention = right_padded([12, 3, 1, 7], 12)
    attention[3, 4] = 0  # a hole inside a row
    assert torch.equal(seed_decoder_mask(attention, window), reference_seed_mask(attention, window))


def test_seed_mask_is_causal_windowed_and_keeps_cls():
    attention = right_padded([8, 5], 8)
    visible = seed_decoder_mask(attention, 2)
    assert not torch.triu(visible, diagonal=1).any()  # never a later column
    assert visible[:, :, 0].all()  # [CLS] (the encoder embedding) in every row
    assert visible[0, 5].nonzero().flatten().tolist() == [0, 4, 5]  # previous two positions + [CLS]
    assert visible[0, 0].nonzero().flatten().tolist() == [0]
    assert not visible[1, :, 5:].any()  # padding columns never visible
    assert visible.sum(-1).min() >= 1  # no empty row


def test_seed_mask_rejects_an_empty_window():
    with pytest.raises(ValueError, match="window"):
        seed_decoder_mask(right_padded([3], 3), 0)


# --- enhanced decoding a block of rows at a time (long inputs) ------------------------------------------------------


def test_hashed_scores_are_uniform_and_any_block_draws_the_same_cells():
    seeds = draw_seeds(4, torch.Generator().manual_seed(0))
    scores = hashed_uniform(seeds, 0, 128, 128)  # (4, 128, 128)
    assert scores.min() >= 0 and scores.max() < 1
    assert abs(scores.mean().item() - 0.5) < 0.01 and abs(scores.var().item() - 1 / 12) < 0.002
    assert torch.equal(hashed_uniform(seeds, 37, 11, 128), scores[:, 37:48])
    assert not torch.equal(scores[0], scores[1])  # each example its own seed


def test_the_mask_built_a_block_of_rows_at_a_time_is_the_whole_mask():
    attention_mask = torch.ones(3, 40, dtype=torch.long)
    attention_mask[1, 25:] = 0
    attention_mask[2, 2:] = 0  # [CLS] and one token
    scores = hashed_uniform(draw_seeds(3, torch.Generator().manual_seed(1)), 0, 40, 40)
    whole = enhanced_decoding_mask_from_scores(attention_mask, scores, 0.5)
    assert torch.equal(whole, reference_enhanced_decoding_mask(attention_mask, scores, 0.5))
    blocks = [enhanced_decoding_mask_from_scores(attention_mask, scores[:, start:start + 7], 0.5, start)
              for start in range(0, 40, 7)]
    assert torch.equal(torch.cat(blocks, dim=1), whole)
