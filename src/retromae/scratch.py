"""Starting points for pre-training from scratch: a WordPiece tokenizer trained on text, a random small BERT.

Owns: training a BERT-style uncased WordPiece tokenizer from an iterable of texts, and saving a randomly
initialised `BertForMaskedLM` of a chosen size beside a tokenizer (ours or any existing one, such as BERT's
uncased vocabulary), as a folder that `retromae pretrain --model` and `retromae finetune --model` load like a
hub checkpoint. Does not own training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from retromae.config import require
from retromae.console import verbose
from retromae.io import write_text_atomic
from retromae.train import seed_everything

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Written beside a random initialisation (never copied into a pre-trained export), so that a run can tell it starts
# from scratch: retromae+contrastive asks for an explicit --contrastive-weight there.
RANDOM_INIT_MARKER = "random-init.json"


def train_wordpiece(texts: Iterable[str], vocab_size: int, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """A BERT-style uncased WordPiece tokenizer ([CLS] text [SEP]) trained on `texts`."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    # tokenizers' own bar prints blank lines when stderr is not a terminal; it shows under --verbose only.
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=verbose())
    tokenizer.train_from_iterator(texts, trainer)
    # The trainer numbers tokens of equal frequency in hash-map order, which differs from run to run; numbering
    # them in sorted order makes the same texts give the same ids, so a seeded model from scratch is reproducible.
    learned = sorted(token for token in tokenizer.get_vocab() if token not in SPECIAL_TOKENS)
    tokenizer.model = models.WordPiece({token: i for i, token in enumerate(SPECIAL_TOKENS + learned)},
                                       unk_token="[UNK]")
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=model_max_length)


def save_random_bert(tokenizer: PreTrainedTokenizerBase, folder: Path, *, hidden_size: int, layers: int,
                     max_positions: int = 512, seed: int = 42) -> Path:
    """A randomly initialised BertForMaskedLM sized for `tokenizer` (heads of 64, FFN 4x), saved with it."""
    require(hidden_size > 0 and hidden_size % 64 == 0, "hidden_size", "must be a positive multiple of 64 (heads of 64)")
    require(layers > 0, "layers", "must be positive")
    seed_everything(seed)
    model = BertForMaskedLM(BertConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64, intermediate_size=4 * hidden_size,
        max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id))
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_text_atomic(folder / RANDOM_INIT_MARKER, json.dumps({"seed": seed}) + "\n")
    return folder


def is_random_init(model: str | Path) -> bool:
    """Whether `model` is a folder written by `save_random_bert` (a random initialisation, not pre-trained)."""
    return (Path(model) / RANDOM_INIT_MARKER).is_file()
