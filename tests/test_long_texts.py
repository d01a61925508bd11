"""A long text is read only as far as its first tokens, and gives exactly the tokens of the whole text truncated
(`retromae.data.long_texts`), and a long pre-training document tokenised in pieces gives the whole document's blocks,
for the tokenizer of every supported family."""

from __future__ import annotations

import functools
import random

import pytest
from conftest import WORDS, make_sentences

from retromae.data.long_texts import CEILING_PER_TOKEN, CHARACTERS_PER_TOKEN, clip_texts, split_characters

MAX_LENGTH = 16  # clipped above 320 characters; the tokenizer reads at most 8,000 of one text
CJK = "的一是不了人我在有他这中大为上个国和地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道行所然"
ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "deberta-v2", "modernbert")


def training_texts() -> list[str]:
    """English sentences, and some with accents, combining marks and CJK, so each tokenizer has pieces for them."""
    rng = random.Random(3)
    extra = ["café naïve résumé e\u0301le\u0300ve " + "".join(rng.choice(CJK) for _ in range(12)) for _ in range(60)]
    return make_sentences(400) + extra


@pytest.fixture(scope="module", params=ARCHITECTURES)
def tokenizer(request):
    from retromae.pretraining.scratch import family_tokenizer

    return family_tokenizer(training_texts(), request.param, 300)


def words(rng: random.Random, count: int, separators: str = " ") -> str:
    return "".join(rng.choice(WORDS) + rng.choice(separators) for _ in range(count))


@functools.cache
def adversarial_texts() -> tuple[str, ...]:
    rng = random.Random(11)
    combining = "".join(rng.choice(["e\u0301", "a\u0308\u0323", " \u0301", "n\u0303", "\u200d", "ﬁ"]) +
                        rng.choice(["", " ", "x"]) for _ in range(3000))
    return (
        words(rng, 2000),  # ordinary prose, long
        words(rng, 300, " \n\t"),  # every separator
        "a" + " " * 5_000 + words(rng, 200),  # a whitespace run longer than the first prefix
        words(rng, 3) + "\n" * 2_000 + "\t \u3000 " * 500 + words(rng, 300, " \n"),  # mixed runs
        "".join(rng.choice(WORDS) for _ in range(200_000)),  # one 1 MB word, no whitespace at all
        "x" * 7_000 + " " + words(rng, 100),  # a word longer than the first prefix, ended within the ceiling
        words(rng, 2) + "".join(rng.choice(WORDS) for _ in range(900)) + " " + words(rng, 50),  # a 6,000-char word
        combining,  # combining marks, also after a space; joiners; a ligature NFKC expands
        "".join(rng.choice(CJK) for _ in range(50_000)),  # CJK without spaces
        " ".join("".join(rng.choice(CJK) for _ in range(rng.randint(1, 30))) for _ in range(3_000)),
        "".join(chr(rng.choice([rng.randint(0x20, 0x2FF), rng.randint(0x4E00, 0x4FFF), 0x20, 0x0A]))
                for _ in range(40_000)),  # random code points
        "  leading spaces " + words(rng, 400),
        "short text stays as it is",
    )


def whole(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]


def test_split_characters_are_those_the_pre_tokenizer_splits_at(tokenizer):
    splits = split_characters(tokenizer)
    assert " " in splits
    # Metaspace after NFKC keeps a newline inside its word, so a cut before one would not be exact
    assert ("\n" in splits) == (type(tokenizer.backend_tokenizer.pre_tokenizer).__name__ != "Metaspace")


def test_a_long_document_is_tokenised_in_pieces_into_the_whole_texts_blocks(tokenizer, tmp_path, monkeypatch):
    """The token store's pieces (`retromae.data.corpus.cut_pieces`) are cut only where the family's tokenizer
    splits: Metaspace keeps tabs and newlines inside its words (before: other blocks for XLM-R and DeBERTa-v2)."""
    import json

    from retromae.data import token_store

    rng = random.Random(4)
    document = "".join(rng.choice([*WORDS, "café", "e\u0301", "12", "."]) +
                       rng.choice([" ", " ", "\n", "\t", "  ", " \n ", "\t\t"]) for _ in range(3_000))
    corpus = tmp_path / "long.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in (document, "a short one here.")))
    whole_store = token_store.TokenStore.build_or_load([corpus], tokenizer, 32, cache_dir=tmp_path / "whole",
                                                       show_progress=False)
    monkeypatch.setattr(token_store, "PIECE_CHARACTERS", 997)
    pieces = token_store.TokenStore.build_or_load([corpus], tokenizer, 32, cache_dir=tmp_path / "pieces",
                                                  show_progress=False)
    assert pieces.meta == whole_store.meta and whole_store.meta["num_documents"] == 2
    for name, _ in token_store.FILES.values():
        assert (pieces.path / name).read_bytes() == (whole_store.path / name).read_bytes(), name


def test_the_cuts_found_are_the_last_and_first_by_definition():
    """`last_cut` searches back in growing spans and `_first_cut` with a pattern: both find what a scan of every
    position finds (a character of `splits` after a non-whitespace character), on texts of whitespace runs."""
    from retromae.data.long_texts import _first_cut, last_cut

    rng = random.Random(8)
    for _ in range(300):
        text = "".join(rng.choice("ab \n\t\r\u3000") for _ in range(rng.randint(1, 3_000)))
        splits = rng.choice([" \n\t", " ", "\n", ""])
        low = rng.randint(1, len(text))
        high = rng.randint(low - 1, len(text) - 1)
        cuts = [p for p in range(low, high + 1) if text[p] in splits and not text[p - 1].isspace()]
        assert last_cut(text, high, splits, low) == (cuts[-1] if cuts else None)
        assert _first_cut(text, low, high + 1, splits) == (cuts[0] if cuts else None)


def test_clipped_texts_tokenise_as_the_whole_texts_truncated(tokenizer):
    texts = adversarial_texts()
    clipped = clip_texts(tokenizer, texts, MAX_LENGTH)
    assert whole(tokenizer, clipped, MAX_LENGTH) == whole(tokenizer, texts, MAX_LENGTH)
    assert clipped[-1] is texts[-1]  # a short text is handed on as it is
    assert all(len(text) <= CEILING_PER_TOKEN * MAX_LENGTH for text in clipped)
    assert sum(len(text) for text in clipped) < sum(len(text) for text in texts) / 20


def test_random_texts_tokenise_as_the_whole_texts_truncated(tokenizer):
    rng = random.Random(5)
    pool = [*WORDS, *CJK[:10], "e\u0301", ".", ",", "!", "'s", "12", "\u00a0"]
    texts = ["".join(rng.choice(pool) + rng.choice(["", " ", " ", "\n", "\t", "  ", " \n "]) for _ in range(n))
             for n in rng.choices(range(50, 3000), k=40)]
    clipped = clip_texts(tokenizer, texts, MAX_LENGTH)
    assert whole(tokenizer, clipped, MAX_LENGTH) == whole(tokenizer, texts, MAX_LENGTH)


def test_a_prefix_and_pairs_truncated_as_the_reranker_does_are_exact(tokenizer):
    from retromae.reranking.run import PAIR_TRUNCATION

    texts = [text for text in adversarial_texts() if len(text) < 100_000]
    prefixed = ["query: " + text for text in texts]
    assert whole(tokenizer, clip_texts(tokenizer, texts, 64, "query: "), 64) == whole(tokenizer, prefixed, 64)
    # The whole pairs are the reference: tokenizers' longest-first truncation builds the overflow of the whole text,
    # which took 7 GB for the three texts of 40,000-50,000 characters under the long query (byte-level BPE).
    texts = [text for text in texts if len(text) < 20_000]
    for query in ("what is a dense encoder", " ".join(["encoder"] * 40)):  # short, and longer than the pair
        queries = [query] * len(texts)
        pairs = tokenizer(queries, texts, truncation=PAIR_TRUNCATION, max_length=24)["input_ids"]
        assert tokenizer(queries, clip_texts(tokenizer, texts, 24), truncation=PAIR_TRUNCATION,
                         max_length=24)["input_ids"] == pairs


def test_a_word_longer_than_the_ceiling_is_cut_inside_it(tokenizer):
    """The one case that may differ from whole-text tokenisation: fewer than max_length tokens in the ceiling's
    characters. The text is cut at the ceiling, and its tokens before the cut word are the whole text's."""
    rng = random.Random(2)
    text = words(rng, 2) + "".join(rng.choice(WORDS) for _ in range(3_000)) + " " + words(rng, 50)
    clipped = clip_texts(tokenizer, [text], MAX_LENGTH)[0]
    assert len(clipped) == CEILING_PER_TOKEN * MAX_LENGTH and text.startswith(clipped)
    ours, theirs = whole(tokenizer, [clipped], MAX_LENGTH)[0], whole(tokenizer, [text], MAX_LENGTH)[0]
    assert ours[:3] == theirs[:3]  # [CLS] and the two words before the long one


def test_texts_under_the_bound_are_unchanged(tiny_tokenizer):
    texts = make_sentences(50) + ["x" * (CHARACTERS_PER_TOKEN * MAX_LENGTH)]
    clipped = clip_texts(tiny_tokenizer, texts, MAX_LENGTH)
    assert clipped == texts and all(a is b for a, b in zip(clipped, texts, strict=True))


def test_an_added_token_holding_a_space_rules_out_cuts_before_spaces(tiny_tokenizer):
    import copy

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.add_tokens(["dense encoder"])
    assert " " not in split_characters(tokenizer) and "\n" in split_characters(tokenizer)
    text = "the dense encoder " * 2000
    assert whole(tokenizer, clip_texts(tokenizer, [text], MAX_LENGTH), MAX_LENGTH) == \
        whole(tokenizer, [text], MAX_LENGTH)


class CountingTokenizer:
    """Records the longest text each call of the tokenizer class receives (pairs: either side)."""

    def __init__(self, monkeypatch, tokenizer) -> None:
        self.longest = 0
        cls = type(tokenizer)
        original = cls.__call__

        def call(inner, text=None, text_pair=None, *args, **kwargs):
            for side in (text, text_pair):
                if side is not None:
                    self.longest = max([self.longest, *(len(t) for t in ([side] if isinstance(side, str) else side))])
            return original(inner, text, text_pair, *args, **kwargs)

        monkeypatch.setattr(cls, "__call__", call)


def test_no_caller_hands_a_long_text_whole_to_the_tokenizer(monkeypatch, tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from retromae.finetuning.batches import GroupCollator
    from retromae.finetuning.plan import covering_length
    from retromae.models.encoder import Encoder
    from retromae.reranking.run import CrossEncoder, PairCollator

    encoder = Encoder.load(tiny_model_dir, device="cpu")
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(tmp_path)
    encoder.tokenizer.save_pretrained(tmp_path)
    scorer = CrossEncoder(str(tmp_path), "cpu", 32)
    long = words(random.Random(1), 100_000)  # about 700,000 characters
    texts = [*make_sentences(5), long]
    expected = whole(encoder.tokenizer, texts, 32)
    counter = CountingTokenizer(monkeypatch, encoder.tokenizer)
    assert encoder.tokenize(texts, 32) == expected
    assert encoder.encode(texts, max_length=32, show_progress=False).shape == (6, encoder.dimension)
    batch = GroupCollator(encoder.tokenizer, 32, 32)([("a query", texts, None)])
    assert batch["passage_input_ids"][-1].tolist() == expected[-1]
    PairCollator(encoder.tokenizer, 32)([("a query", texts, None)])
    assert covering_length(encoder.tokenizer, texts, 32, 0) == 32
    assert scorer.score(["a query"] * len(texts), texts, show_progress=False).shape == (6,)
    assert 0 < counter.longest <= CEILING_PER_TOKEN * 32 < len(long)
