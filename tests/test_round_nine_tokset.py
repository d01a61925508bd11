"""Round nine, sections C, D and E: what a loaded tokenizer must hold and how it cuts and pads, for every loader.

- C: the Python API's `max_length` (`Encoder.load`, `.encode`, `.tokenize`, `.token_table`) skipped the one length
  check of every command: 2 made every text [CLS][SEP] (every vector the same), 1 was ignored by the tokenizer. Each
  is checked by `models.masked_lm.check_max_length`, as the commands' options are; a tokenizer_config.json
  `model_max_length` that leaves no text (the default length) is refused where the tokenizer loads.
- D: tokenizer_config.json's `truncation_side` / `padding_side` "left" was obeyed by some readers and not others.
  One rule where every tokenizer loads (`models.pretrained.read_from_the_start`): truncating on the left is refused
  (sentence-transformers then reads a text's last tokens; retromae reads every text's first), padding on the left is
  replaced by padding on the right with one note (a text's vector and a pair's score no longer depend on the texts
  batched with it; sentence-transformers' vector of each text encoded alone).
- E: a tokenizer without a pad token loaded, then fine-tuning, reranker training and scoring ended in transformers'
  traceback (train-reranker left its folder claimed) and encode padded with id 0. Refused where it loads, naming
  tokenizer_config.json (`models.model_source.check_needed_tokens`), as is a masked LM's tokenizer without a mask
  token and a cross-encoder's that frames no (query, passage) pair, before any command writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sentences, tiny_beir, tiny_bert_config

from retromae import Encoder
from retromae.cli import main
from retromae.models import pretrained
from retromae.models.export import export_encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.pretraining.scratch import existing_tokenizer
from retromae.reranking.run import CrossEncoder, _load_classifier
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError

TEXTS = ["apple pie recipe", "quantum chromodynamics on a lattice", "the cat sat on the mat by the door"]
LOADERS = {
    "encoder": lambda folder: Encoder.load(folder, device="cpu").tokenizer,
    "masked LM": lambda folder: load_masked_lm(str(folder))[1],
    "cross-encoder": lambda folder: _load_classifier(str(folder), trained=False)[1],
    "init-model --tokenizer": lambda folder: existing_tokenizer(str(folder)),
}


def edit_json(path: Path, **values) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def refused(load, folder: Path) -> str:
    with pytest.raises(ModelLoadError) as caught:
        load(folder)
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.fixture()
def copy(tiny_model_dir, tmp_path):
    def make(**settings) -> Path:
        folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
        edit_json(folder / "tokenizer_config.json", **settings)
        return folder
    return make


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> Encoder:
    return Encoder.load(tiny_model_dir, device="cpu", dtype="float32")


# C: the API's max length ------------------------------------------------------------------------------------------

API_PATHS = {
    "Encoder.load": lambda encoder, length: Encoder.load(encoder.source, device="cpu", max_length=length),
    "encode": lambda encoder, length: encoder.encode(TEXTS, max_length=length, show_progress=False),
    "tokenize": lambda encoder, length: encoder.tokenize(TEXTS, max_length=length),
    "token_table": lambda encoder, length: encoder.token_table(TEXTS, max_length=length),
}


@pytest.mark.parametrize("length", [1, 2])
@pytest.mark.parametrize("path", API_PATHS)
def test_every_api_max_length_is_checked_as_the_commands_are(path, length, encoder):
    with pytest.raises(ConfigError) as caught:
        API_PATHS[path](encoder, length)
    assert str(caught.value) == (f"max_length {length}: the tokenizer adds 2 special tokens to each text, so at least "
                                 "3 tokens are needed to keep any text; give 3 or more")


def test_the_least_length_that_keeps_text_encodes_each_text_apart(encoder):
    assert [len(ids) for ids in encoder.tokenize(TEXTS, max_length=3)] == [3, 3, 3]
    assert len(np.unique(encoder.encode(TEXTS, max_length=3, show_progress=False).round(6), axis=0)) == 3


@pytest.mark.parametrize("loader", LOADERS)
def test_a_tokenizer_whose_own_max_length_keeps_no_text_is_refused(loader, copy):
    folder = copy(model_max_length=2)
    assert refused(LOADERS[loader], folder) == (
        f"{folder / 'tokenizer_config.json'}: model_max_length 2 is no number of tokens that keeps text beside the "
        "tokenizer's 2 special tokens; give a whole number from 3 (or remove it)")


# D: the side a tokenizer cuts and pads ----------------------------------------------------------------------------

@pytest.mark.parametrize("loader", LOADERS)
def test_truncating_on_the_left_is_refused_by_every_loader(loader, copy):
    folder = copy(truncation_side="left")
    assert refused(LOADERS[loader], folder).startswith(
        f"{folder / 'tokenizer_config.json'}: truncation_side is 'left': the tokenizer would keep the last tokens of a "
        "long text, and retromae reads the first tokens of every text")


def test_truncating_on_the_left_in_tokenizer_json_is_refused_naming_it(copy):
    folder = copy()
    path = folder / "tokenizer.json"
    edit_json(path, truncation={"direction": "Left", "max_length": 64, "strategy": "LongestFirst", "stride": 0})
    assert refused(LOADERS["encoder"], folder).startswith(f"{path}: truncation_side is 'left'")


@pytest.mark.parametrize("loader", LOADERS)
def test_padding_on_the_left_becomes_padding_on_the_right_with_one_note(loader, copy, monkeypatch, capsys):
    monkeypatch.setattr(pretrained, "_NOTED_PADDING", set())
    folder = copy(padding_side="left")
    tokenizer = LOADERS[loader](folder)
    LOADERS[loader](folder)
    assert tokenizer.padding_side == "right"
    assert all(mask[0] == 1 for mask in tokenizer(TEXTS, padding=True)["attention_mask"])  # each text first
    notes = [line for line in capsys.readouterr().err.splitlines() if "padding_side" in line]
    assert notes == [f"retromae: note: {folder / 'tokenizer_config.json'}: padding_side 'left' is not followed: "
                     "retromae pads on the right, so that a text's vector or a pair's score does not depend on the "
                     "texts batched with it (each reads as it does alone)"]


def test_a_sentence_transformers_folder_padded_on_the_left_gives_its_vectors_of_each_text_alone(tiny_model_dir,
                                                                                                  tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "st"
    export_encoder(*load_masked_lm(str(tiny_model_dir)), folder, pooling="cls")
    (folder / "retromae_encoder.json").unlink()
    edit_json(folder / "tokenizer_config.json", padding_side="left")
    ours = Encoder.load(folder, device="cpu", dtype="float32").encode(TEXTS, show_progress=False)
    theirs = SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(ours, np.stack([theirs.encode([text])[0] for text in TEXTS]), atol=1e-5)
    assert not np.allclose(ours, theirs.encode(TEXTS), atol=1e-3)  # batched on the left, its vectors differ


@pytest.fixture(scope="module")
def left_padded_reranker(tiny_model_dir, tmp_path_factory) -> Path:
    """A cross-encoder (a classifier head on the tiny model) whose tokenizer_config.json asks for left padding."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("reranker")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = tiny_bert_config(len(tokenizer))
    config.num_labels = 1
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    edit_json(folder / "tokenizer_config.json", padding_side="left")
    return folder


def test_a_pairs_score_does_not_depend_on_the_pairs_batched_with_it(left_padded_reranker):
    scorer = CrossEncoder(str(left_padded_reranker), device="cpu")
    queries, passages = ["cell biology"] * 3, ["cells divide", " ".join(make_sentences(3, seed=1)), "x"]
    alone = [scorer.score([query], [passage], batch_size=1, show_progress=False)[0]
             for query, passage in zip(queries, passages, strict=True)]
    np.testing.assert_allclose(scorer.score(queries, passages, batch_size=3, show_progress=False), alone, atol=1e-6)


# E: the tokens a command needs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("loader", LOADERS)
def test_every_loader_refuses_a_tokenizer_without_a_pad_token(loader, copy):
    folder = copy(pad_token=None)
    assert refused(LOADERS[loader], folder) == (
        f"{folder / 'tokenizer_config.json'}: the tokenizer has no pad token (pad_token), which every command pads a "
        "batch of texts of different lengths with; set pad_token to one of its tokens")


def test_pre_training_refuses_a_tokenizer_without_a_mask_token(copy):
    folder = copy(mask_token=None)
    assert refused(LOADERS["masked LM"], folder) == (
        f"{folder / 'tokenizer_config.json'}: the tokenizer has no mask token (mask_token), which pre-training masks "
        "tokens with; set mask_token to one of its tokens")


def frame_pairs(pair: str | None):
    def change(spec: dict) -> None:
        spec["post_processor"] = None if pair is None else {
            "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}},
                                                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {name: {"id": name, "ids": [spec["model"]["vocab"][name]], "tokens": [name]}
                               for name in ("[CLS]", "[SEP]")}}
    return change


@pytest.mark.parametrize(("pair", "place"), [(None, "before"), ("no separator", "between the texts of")])
def test_a_cross_encoder_refuses_a_tokenizer_that_frames_no_pair(pair, place, copy):
    folder = copy()
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text())
    frame_pairs(pair)(spec)
    path.write_text(json.dumps(spec))
    assert refused(LOADERS["cross-encoder"], folder).startswith(
        f"{folder / 'tokenizer_config.json'}: the tokenizer puts no special token {place} a (query, passage) pair")
    LOADERS["encoder"](folder)  # one text at a time reads as before


COMMANDS = {
    "encode": "encode --model NP --corpus C --output OUT",
    "evaluate": "evaluate --model NP --data B --output OUT.json",
    "finetune": "finetune --model NP --data B --output OUT --max-steps 1",
    "adapt": "adapt --model NP --pooling cls --corpus C --output OUT --max-steps 2",
    "pretrain": "pretrain --model NP --corpus C --output OUT --max-steps 1 --max-length 32",
    "train-reranker": "train-reranker --model NP --data T --output OUT --max-steps 1",
    "score": "score --model NP --data T --output OUT.jsonl",
}


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A BEIR folder (B), its corpus (C), a training file (T) and NP, the tiny model without a pad token."""
    root = tmp_path_factory.mktemp("commands")
    tiny_beir(root / "beir")
    (root / "train.jsonl").write_text(json.dumps({"query": "a cat", "pos": ["the cat sat"], "neg": ["a dog"]}) + "\n")
    unpadded = Path(shutil.copytree(tiny_model_dir, root / "np"))
    edit_json(unpadded / "tokenizer_config.json", pad_token=None)
    return {"B": root / "beir", "C": root / "beir" / "corpus.jsonl", "T": root / "train.jsonl", "NP": unpadded}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_pads_refuses_a_tokenizer_without_a_pad_token_before_it_writes(command, inputs, tmp_path,
                                                                                            capsys):
    words = COMMANDS[command].split()
    out = next(tmp_path / word.lower() for word in words if word.startswith("OUT"))
    args = [str(out) if word.startswith("OUT") else str(inputs.get(word, word)) for word in words]
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("retromae: error")]
    assert "Traceback" not in err and lines == [
        f"retromae: error: {inputs['NP'] / 'tokenizer_config.json'}: the tokenizer has no pad token (pad_token), "
        "which every command pads a batch of texts of different lengths with; set pad_token to one of its tokens"]
    assert not out.exists()
