"""Round nine: a folder holding our retromae_encoder.json and sentence-transformers' files is read by both.

Every export since encoder/ became a sentence-transformers folder too holds both descriptions; ours alone was read,
so that a hand edit of the sentence-transformers files (another pooling, a Normalize module, lowercasing, prompts)
changed what sentence-transformers gives and not what retromae gives. The two must describe the same vectors
(`models.encoder._both_descriptions`), and every export this code and earlier code wrote still loads: one without
modules.json (before encoder/ held them), one whose config_sentence_transformers.json says cosine beside unnormalised
vectors (sentence-transformers' default, which exports wrote before they declared the similarity), one whose
retromae_encoder.json declares no max length.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from retromae.cli import main
from retromae.models.encoder import Encoder, describe_folder
from retromae.models.export import SENTENCE_TRANSFORMERS_FILES, export_encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.runtime.errors import ModelLoadError

OURS, ST_FILE = "retromae_encoder.json", "config_sentence_transformers.json"


def edit_json(path: Path, **values) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


@pytest.fixture(scope="module")
def exports(tiny_model_dir, tmp_path_factory) -> dict[tuple[str, bool], Path]:
    """Our exports of the tiny model under each pooling and normalisation."""
    model, tokenizer = load_masked_lm(str(tiny_model_dir))
    root = tmp_path_factory.mktemp("exports")
    found = {}
    for pooling, normalize in (("cls", False), ("mean", True)):
        found[pooling, normalize] = root / f"{pooling}-{normalize}"
        export_encoder(model, tokenizer, found[pooling, normalize], pooling=pooling, normalize=normalize)
    return found


@pytest.fixture()
def folder(exports, tmp_path) -> Path:
    return Path(shutil.copytree(exports["cls", False], tmp_path / "model"))


@pytest.mark.parametrize("key", [("cls", False), ("mean", True)], ids=["cls", "mean normalised"])
def test_an_export_of_this_code_loads_as_it_says(key, exports):
    spec = describe_folder(str(exports[key]))
    assert (spec.pooling.pooling, spec.pooling.normalize, spec.prompts) == (*key, {})


def older(folder: Path, kind: str) -> None:
    """`folder` as earlier code wrote it."""
    if kind == "no modules.json":  # before encoder/ was a sentence-transformers folder too
        for name in SENTENCE_TRANSFORMERS_FILES:
            (folder / name).unlink()
        shutil.rmtree(folder / "1_Pooling")
    elif kind == "cosine, unnormalised":  # sentence-transformers' default similarity, before exports declared one
        edit_json(folder / ST_FILE, similarity_fn_name="cosine")
    else:  # retromae_encoder.json without max_length: the source model declared none
        values = json.loads((folder / OURS).read_text())
        del values["max_length"]
        (folder / OURS).write_text(json.dumps(values))


@pytest.mark.parametrize("kind", ["no modules.json", "cosine, unnormalised", "no max length"])
def test_an_export_of_earlier_code_loads_with_its_vectors_unnormalised(kind, folder, exports):
    older(folder, kind)
    texts = ["a query about cells", "the protein study"]
    vectors = Encoder.load(folder, device="cpu").encode(texts, show_progress=False)
    assert describe_folder(str(folder)).pooling.normalize is False
    np.testing.assert_allclose(vectors, Encoder.load(exports["cls", False], device="cpu").encode(
        texts, show_progress=False), atol=1e-6)


def normalize_module(folder: Path) -> None:
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "2_Normalize").mkdir()


EDITS = {
    "pooling": (lambda folder: edit_json(folder / "1_Pooling" / "config.json", pooling_mode="mean"),
                "pooling 'cls'", "'mean'"),
    "Normalize module": (normalize_module, "normalize False", "True"),
    "ours normalises": (lambda folder: edit_json(folder / OURS, normalize=True), "normalize True", "False"),
    "lowercasing": (lambda folder: edit_json(folder / "sentence_bert_config.json", do_lower_case=True),
                    "lowercasing False", "True"),
    "max length": (lambda folder: edit_json(folder / "sentence_bert_config.json", max_seq_length=64),
                   "max_length 128", "64"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_two_descriptions_that_encode_otherwise_are_refused_naming_both_files(edit, folder):
    change, ours, theirs = EDITS[edit]
    change(folder)
    with pytest.raises(ModelLoadError) as raised:
        Encoder.load(folder, device="cpu")
    assert str(raised.value) == (f"{folder / OURS} says {ours} and {folder / 'modules.json'} (with its modules' "
                                 f"files) {theirs}: sentence-transformers encodes the folder by the second and "
                                 "retromae by the first, which would give other vectors; make the two agree, or "
                                 "remove one")


def test_the_refusal_is_one_line_of_the_command_that_loads_the_model(folder, tmp_path, capsys):
    EDITS["pooling"][0](folder)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d", "text": "a text"}) + "\n")
    assert main(["encode", "--model", str(folder), "--corpus", str(corpus), "--output", str(tmp_path / "emb"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"retromae: error: {folder / OURS} says")
    assert not (tmp_path / "emb").exists()


def test_the_sentence_transformers_settings_beside_ours_are_read_as_a_folder_of_theirs(folder):
    """Its refusals apply (a default prompt, put before every text there), and its named prompts are put."""
    edit_json(folder / ST_FILE, prompts={"query": "query: ", "document": "passage: "})
    assert describe_folder(str(folder)).prompts == {"query": "query: ", "passage": "passage: "}
    edit_json(folder / ST_FILE, default_prompt_name="query")
    with pytest.raises(ModelLoadError, match=f"^{folder / ST_FILE}: default_prompt_name 'query' puts"):
        describe_folder(str(folder))
