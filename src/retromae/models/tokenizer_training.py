"""Tokenizers trained from text, of the three kinds the supported backbone families use.

Owns: `train_tokenizer(texts, kind, ...)` for "wordpiece" (BERT: uncased, `##` marks a word's continuation),
"unigram" (XLM-R, DeBERTa-v3: SentencePiece-style, `▁` marks a word start) and "byte-level-bpe" (RoBERTa,
ModernBERT: `Ġ` marks a word start), each with the special tokens its family names (`[CLS]`-style or `<s>`-style),
`[CLS] text [SEP]` framing, and a vocabulary and ids that do not depend on the trainers' hash order, so that the same
texts give the same tokenizer in every process. Whole-word masking reads word starts from the fast tokenizer's
`word_ids()` for every kind. Does not own models (`retromae.pretraining.scratch`) or which family trains which kind
(`retromae.backbones.families`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from retromae.runtime.console import verbose

KINDS = ("wordpiece", "unigram", "byte-level-bpe")
# The special tokens of each naming style, in id order: (pad, unk, cls, sep, mask).
BRACKET_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ANGLE_TOKENS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}  # RoBERTa's order


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int, model_max_length: int = 512,
                    angle_tokens: bool = False) -> PreTrainedTokenizerFast:
    """A fast tokenizer of `kind` trained on `texts`, with `[CLS]`-style special tokens (`<s>`-style with
    `angle_tokens`, as RoBERTa and XLM-R name them). `texts` is read twice (WordPiece) or once: a list, or an iterable
    that starts afresh on each `iter`, never a one-pass iterator."""
    if kind not in KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose from {', '.join(KINDS)}")
    if iter(texts) is texts:
        raise TypeError("train_tokenizer may read its texts twice: give a list or a re-iterable, not an iterator")
    special = ANGLE_TOKENS if angle_tokens else BRACKET_TOKENS
    train = {"wordpiece": _wordpiece, "unigram": _unigram, "byte-level-bpe": _byte_level_bpe}[kind]
    tokenizer = train(texts, vocab_size, list(special.values()), special["unk"])
    cls, sep = special["cls"], special["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=special["unk"], pad_token=special["pad"],
                                   cls_token=cls, sep_token=sep, mask_token=special["mask"],
                                   model_max_length=model_max_length)


def _wordpiece(texts: Iterable[str], vocab_size: int, special: list[str], unk: str) -> Tokenizer:
    tokenizer = _wordpiece_pipeline(models.WordPiece(unk_token=unk))
    # The trainer gives each `##` continuation token its id when it first meets it in a hash map of the words, and
    # breaks ties between merges of equal count by id, so which tokens it learns changes from run to run
    # (huggingface/tokenizers#1794). Given as special tokens, the continuations have ids in sorted order from the
    # start; the vocabulary then goes into a fresh pipeline where they are ordinary tokens.
    continuations = _continuation_tokens(tokenizer, texts)
    # tokenizers' own bar prints blank lines when stderr is not a terminal; it shows under --verbose only.
    tokenizer.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=special + continuations, show_progress=verbose()))
    learned = sorted(token for token in tokenizer.get_vocab() if token not in special)  # ids in sorted order too
    trained = _wordpiece_pipeline(models.WordPiece({token: i for i, token in enumerate(special + learned)},
                                                   unk_token=unk))
    trained.add_special_tokens(special)
    return trained


def _wordpiece_pipeline(model: models.WordPiece) -> Tokenizer:
    """A BERT-style uncased WordPiece pipeline around `model`."""
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer


def _continuation_tokens(tokenizer: Tokenizer, texts: Iterable[str]) -> list[str]:
    """`##c` for every character c that continues a word of `texts` as `tokenizer` normalises and splits them,
    sorted: the continuation tokens the WordPiece trainer would make."""
    characters: set[str] = set()
    for text in texts:
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text)):
            characters.update(word[1:])
    return [f"##{character}" for character in sorted(characters)]


def _unigram(texts: Iterable[str], vocab_size: int, special: list[str], unk: str) -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(texts, trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=special, unk_token=unk, show_progress=verbose()))
    # The trainer keeps every character at a score just below the learned pieces', offset in hash-map order, and sums
    # the learned scores in an order that moves their last digits: one shared score for the kept characters, scores
    # rounded to 8 decimals and pieces numbered by (score, text) give the same tokenizer for the same texts.
    pieces = [(piece, score) for piece, score in json.loads(tokenizer.to_str())["model"]["vocab"]
              if piece not in special]
    lowest = min(score for _, score in pieces)
    pieces = sorted(((piece, round(lowest if score < lowest + 0.01 else score, 8)) for piece, score in pieces),
                    key=lambda item: (-item[1], item[0]))
    vocab = [(token, 0.0) for token in special] + pieces
    tokenizer.model = models.Unigram(vocab, unk_id=special.index(unk))
    return tokenizer


def _byte_level_bpe(texts: Iterable[str], vocab_size: int, special: list[str], unk: str) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=verbose()))
    return tokenizer
