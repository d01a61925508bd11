"""Round eight of the hostile-input audit, sections 6, 8 and 10 (standard output), each at one rule.

- A tokenizer.json of a few KB whose normalizer made every "e" 4,000 characters cost 27 s and 2.9 GB for 50 short
  documents: the tokenizers library reads a whole text before it cuts it to its tokens. What a tokenizer's normalizer
  and pre-tokenizer may make of a text is bounded where every loader reads a tokenizer
  (`models.model_source.check_tokenizer_growth`, from `check_tokenizer_reads`): the strings its steps put in place of
  characters, multiplied, and its steps run one at a time on a sample text. Real tokenizers pass.
- $HF_ENDPOINT, $HTTPS_PROXY or $https_proxy with a port beyond 65535, no number for a port or a '[' without its ']'
  ended the hub probe in a ValueError traceback (and an unclosed '[' in $HF_ENDPOINT ended every command, in
  huggingface_hub's import). One reader (`preflight.url_variable`), asked by every command before any work
  (`preflight.check_network_settings`).
- Standard output closed (`>&-`): `evaluate --run` and `search --query` exited 0 with their results lost; a failed
  write said "No space left on device" naming no stream. Every command now refuses a closed standard output first,
  and names it when a write fails; a reader that goes away (`| head -1`) still ends nothing (`runtime.console.
  standard_output`, entered by `cli.main`).
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from conftest import make_sentences

from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.models.model_source import MAX_DECLARED_GROWTH, _declared_growth, check_tokenizer_growth
from retromae.models.tokenizer_training import KINDS, train_tokenizer
from retromae.pretraining.scratch import existing_tokenizer
from retromae.reranking.run import _load_classifier
from retromae.runtime.errors import ModelLoadError


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


# Section 6: what a tokenizer's normalizer and pre-tokenizer may make of a text

LOADERS = {  # every way a command reads a tokenizer: all through `pretrained.load_tokenizer`
    "encoder (encode, search, evaluate, mine, finetune, adapt)": lambda folder: Encoder.load(folder, device="cpu"),
    "masked LM (pretrain and its token store)": lambda folder: load_masked_lm(str(folder)),
    "cross-encoder (score, train-reranker)": lambda folder: _load_classifier(str(folder), trained=False),
    "init-model --tokenizer": lambda folder: existing_tokenizer(str(folder)),
}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
AMPLIFIERS = {  # steps added to a real tokenizer's, and the words of their refusal
    "the audit's: a Replace of 'e' by 4,000 characters": (
        [{"type": "Replace", "pattern": {"String": "e"}, "content": "e " * 2000}], [],
        "its normalizer may make 4,000 characters of one (a Replace of 'e' by 4,000 characters), more than the 64 "
        "of any real tokenizer's: every text would cost that many times its length to read"),
    "a letter no sample holds, doubled twelve times": (
        [{"type": "Replace", "pattern": {"String": "ꙮ"}, "content": "ꙮꙮ"}] * 12, [],
        "its normalizer may make 4,096 characters of one (12 × a Replace of 'ꙮ' by 2 characters)"),
    "a regular expression matching between characters": (
        [{"type": "Replace", "pattern": {"Regex": ""}, "content": "ab"}] * 4, [],
        "its normalizer may make 81 characters of one (4 × a Replace of '' by 2 characters)"),
    "a Prepend before every piece": ([{"type": "Prepend", "prepend": "▁" * 100}], [],
                                     "its normalizer may make 101 characters of one (a Prepend of 100 characters)"),
    "byte-level pre-tokenizers stacked": (
        [], [BYTE_LEVEL] * 6,
        r"its normalizer and pre-tokenizer make 2,304 characters of a sample text of 337 by their ByteLevel step, "
        "more than the 4 times as many of any real tokenizer"),
}


def amplified(folder: Path, normalizers: list, pre_tokenizers: list) -> Path:
    """`folder`'s tokenizer.json with `normalizers` after its normalizer and `pre_tokenizers` after its own."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    if normalizers:
        data["normalizer"] = {"type": "Sequence", "normalizers": [data["normalizer"], *normalizers]}
    if pre_tokenizers:
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [data["pre_tokenizer"], *pre_tokenizers]}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("case", AMPLIFIERS)
def test_every_loader_refuses_a_tokenizer_that_multiplies_characters(case, loader, tiny_model_dir, tmp_path):
    normalizers, pre_tokenizers, words = AMPLIFIERS[case]
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    path = amplified(folder, normalizers, pre_tokenizers)
    with pytest.raises(ModelLoadError) as refused:
        LOADERS[loader](folder)
    assert str(refused.value).startswith(f"{path}: {words}") and "\n" not in str(refused.value), str(refused.value)


def test_a_command_refuses_such_a_tokenizer_in_one_line_and_claims_nothing(tiny_model_dir, tmp_path, capsys):
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    amplified(folder, *AMPLIFIERS["the audit's: a Replace of 'e' by 4,000 characters"][:2])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": text}) + "\n"
                              for i, text in enumerate(make_sentences(8))))
    assert main(["encode", "--model", str(folder), "--corpus", str(corpus), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys).startswith(f"retromae: error: {folder / 'tokenizer.json'}: its normalizer may make "
                                         "4,000 characters of one")
    assert not (tmp_path / "out").exists()


FAMILIES = (*KINDS, "roberta", "xlm-roberta", "deberta-v2")


def real_tokenizer(family: str):
    """The pipeline of a family a model may come with: init-model's three kinds, and transformers' own RoBERTa
    (GPT-2's and ModernBERT's byte-level steps), XLM-R and DeBERTa-v2 (Metaspace, a Replace, NFC)."""
    from transformers import DebertaV2Tokenizer, RobertaTokenizer, XLMRobertaTokenizer

    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("<mask>", 0.0), ("▁a", -1.0)]
    if family in KINDS:
        return train_tokenizer(make_sentences(50), family, 120)
    if family == "roberta":
        return RobertaTokenizer(vocab={"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4}, merges=[])
    return (XLMRobertaTokenizer if family == "xlm-roberta" else DebertaV2Tokenizer)(vocab=pieces)


@pytest.mark.parametrize("family", FAMILIES)
def test_real_tokenizers_pass(family):
    check_tokenizer_growth(real_tokenizer(family), family)


def test_a_sentencepiece_map_is_weighed_by_its_longest_replacement():
    """A Precompiled map: 4 bytes of trie size, the trie, then its replacements, each ended by a NUL. The real one of
    XLM-R and DeBERTa-v3 (sentencepiece's nmt_nfkc) holds 18 characters at most, NFKC's of U+FDFA."""
    charsmap = (8).to_bytes(4, "little") + bytes(8) + b"ab\0" + "ﷺ".encode() * 100 + b"\0"
    spec = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}
    assert _declared_growth(spec) == (100, "a Precompiled map with replacements of up to 100 characters")
    assert 18 * 2 < MAX_DECLARED_GROWTH  # XLM-R's map, and a Replace by a space of a regular expression's match
