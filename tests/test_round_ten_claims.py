"""Round ten: what round nine's claim of `init-model` and `Encoder.save` left (`runtime.run_folder.claim_folder`).

1. A folder an init-model made before its runs were recorded holds no marker, and was refused even with --overwrite:
   it is recognised by what those init-models wrote (`pretraining.scratch.unrecorded_init_model`) and replaced with
   --overwrite; a trained model, a user's folder, one edited or inside another run stay refused.
2. The checks of sizes that a tokenizer makes ran after the claim (with --overwrite the earlier model was gone): every
   refusal now comes before it (`run_folder.check_claim`, `scratch.random_model_config`).
3. A model saved in shards names files the claim did not list: its outputs are names and patterns of names
   (`run_folder.outputs_in`, `model_source.SAVED_FILES`).
4. `Encoder.save`'s refusals spoke of --output and --overwrite: a claim names its caller's words (`run_folder.Naming`).
5. `search` whose backend comes from index.json (not --backend) exported into a cache that takes no file after loading
   its index: the preflight reads the record (`preflight.inference_of`, `SearchConfig.recorded_encoder`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import command_inputs, error_line
from safetensors.torch import load_file, save_file
from test_os_failures import read_only  # noqa: F401  (a fixture: a read-only mount as root, else mode 0555)
from test_round_nine_small import command_line, config_of, installed  # noqa: F401  (installed: a fixture)

import retromae
from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.models.model_source import RANDOM_INIT_MARKER, saved_files
from retromae.preflight import writes_cache
from retromae.pretraining import config as pretraining_config
from retromae.pretraining.config import model_parameters
from retromae.pretraining.scratch import unrecorded_init_model
from retromae.retrieval import searcher
from retromae.runtime.errors import FileSystemError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import (
    MARKER,
    check_apart,
    claim_file,
    claim_folder,
    mark_started,
    outputs_in,
    read_marker,
    write_marker,
)

SIZE = ["--hidden-size", "64", "--layers", "1", "--max-positions", "64"]
RECORDED = "made before its runs were recorded; --overwrite replaces them, or choose another --output"
NOT_RECORDED = "which no retromae run recorded writing (not outputs of `retromae init-model`), so even --overwrite"
ENCODING_FILES = ("retromae_encoder.json", "modules.json", "config_sentence_transformers.json",
                  "sentence_bert_config.json", "1_Pooling")


def contents(folder: Path) -> dict[str, str]:
    """Every entry under `folder` with a sha256 of each file's bytes."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
            for path in sorted(folder.rglob("*"))}


def unmarked(made: Path, folder: Path) -> Path:
    """`made` as an init-model between commits 07c1548 and 7ef76e7 left it: all but the marker (times kept)."""
    shutil.copytree(made, folder)
    (folder / MARKER).unlink()
    return folder


def without_encoding_files(folder: Path) -> None:
    """As between b6b061b and 07c1548: no retromae_encoder.json nor sentence-transformers' files."""
    for name in ENCODING_FILES:
        shutil.rmtree(folder / name) if (folder / name).is_dir() else (folder / name).unlink()


def seed_only(folder: Path) -> None:
    """As between faeab30 and b6b061b: random-init.json holds the seed alone (written after the model's files)."""
    without_encoding_files(folder)
    (folder / RANDOM_INIT_MARKER).write_text('{"seed": 42}\n')


# What an init-model of each era before 7ef76e7 (since faeab30) left.
ERAS = {"07c1548 to 7ef76e7": lambda folder: None, "b6b061b to 07c1548": without_encoding_files,
        "faeab30 to b6b061b": seed_only}


def trained(folder: Path) -> None:
    """Weights changed in place, as a trainer saving into the folder changes them, the file's time kept."""
    path = folder / "model.safetensors"
    written = os.stat(path).st_mtime_ns
    save_file({name: tensor + 0.5 for name, tensor in load_file(str(path)).items()}, str(path),
              metadata={"format": "pt"})
    os.utime(path, ns=(written, written))


def rewritten(name: str, text: str, folder: Path) -> None:
    """`name` in `folder` holding `text`, its time kept (what it holds is the difference)."""
    written = os.stat(folder / name).st_mtime_ns
    (folder / name).write_text(text)
    os.utime(folder / name, ns=(written, written))


def flag(text: str):
    return functools.partial(rewritten, RANDOM_INIT_MARKER, text)


def config_with(**fields):
    def change(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        rewritten("config.json", json.dumps({**config, **fields}), folder)
    return change


def in_a_run(folder: Path) -> None:
    write_marker(folder.parent, "quickstart", {})


def linked_flag(folder: Path) -> None:
    (folder / "flag.json").write_text('{"seed": 42}\n')
    (folder / RANDOM_INIT_MARKER).unlink()
    (folder / RANDOM_INIT_MARKER).symlink_to("flag.json")


# Folders like an old init-model's that none left as it is: each refused as now, even with --overwrite.
NOT_OURS = {
    "before faeab30 (no random-init.json: a trained model looks the same)":
        lambda folder: (seed_only(folder), (folder / RANDOM_INIT_MARKER).unlink()),
    "weights trained in place": trained,
    "config.json of another initialisation": config_with(initializer_range=0.5),
    "random-init.json with a key of someone else": flag('{"seed": 42, "by": "me"}'),
    "random-init.json with a seed as text": flag('{"seed": "42"}'),
    "random-init.json with a seed true": flag('{"seed": true}'),
    "random-init.json of an architecture never built": flag('{"seed": 42, "architecture": "gpt2"}'),
    "random-init.json no JSON object": flag('[42]'),
    "random-init.json a link": linked_flag,
    "config.json of an encoder, not a masked LM": config_with(architectures=["BertModel"]),
    "config.json of two architectures": config_with(architectures=["BertForMaskedLM", "BertModel"]),
    "inside another run's folder (a quickstart's initial model)": in_a_run,
    "beside a marker that is none of ours": lambda folder: (folder / MARKER).write_text("{}\n"),
}


@pytest.mark.parametrize("era", ERAS)
def test_an_init_model_of_before_its_runs_were_recorded_is_recognised(era, init_model_folder, tmp_path):
    folder = unmarked(init_model_folder, tmp_path / "old")
    ERAS[era](folder)
    assert unrecorded_init_model(folder)


@pytest.mark.parametrize("case", [case for case in NOT_OURS if "marker" not in case])  # that one: `claim_folder`'s
def test_a_folder_no_old_init_model_left_as_it_is_is_not_taken_for_one(case, init_model_folder, tmp_path):
    folder = unmarked(init_model_folder, tmp_path / "run" / "old")
    NOT_OURS[case](folder)
    assert not unrecorded_init_model(folder)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("writer", ["init-model", "retromae.init_model"])
def test_overwrite_replaces_an_old_init_model_and_only_overwrite(writer, era, init_model_folder, tiny_model_dir,
                                                                  tmp_path, capsys):
    folder = unmarked(init_model_folder, tmp_path / "old")
    ERAS[era](folder)
    (folder / "notes.txt").write_text("mine\n")
    before = contents(folder)
    if writer == "init-model":
        assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(folder), *SIZE]) == 2
        assert error_line(capsys) == (f"retromae: error: {folder}: holds the outputs of an earlier run of `retromae "
                                      f"init-model`, {RECORDED}")
        assert contents(folder) == before
        assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(folder), *SIZE,
                     "--overwrite"]) == 0
    else:
        with pytest.raises(ConfigError, match="made before its runs were recorded; --overwrite replaces them"):
            retromae.init_model(tokenizer=str(tiny_model_dir), output=folder, hidden_size=64, layers=1,
                                max_positions=64)
        assert contents(folder) == before
        retromae.init_model(tokenizer=str(tiny_model_dir), output=folder, hidden_size=64, layers=1, max_positions=64,
                            overwrite=True)
    assert read_marker(folder)["command"] == "init-model" and (folder / "notes.txt").read_text() == "mine\n"
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 64


@pytest.mark.parametrize("case", NOT_OURS)
def test_init_model_keeps_refusing_what_it_does_not_recognise_even_with_overwrite(case, init_model_folder,
                                                                                  tiny_model_dir,
                                                                                 tmp_path, capsys):
    folder = unmarked(init_model_folder, tmp_path / "run" / "old")
    NOT_OURS[case](folder)
    before = contents(tmp_path)
    assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(folder), *SIZE,
                 "--overwrite"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {folder}: holds ") and NOT_RECORDED in line, line
    assert contents(tmp_path) == before


# Item 2: every refusal before the claim.

def tight_memory(monkeypatch, architecture: str, vocab: int) -> None:
    """A machine whose free memory holds a model of `vocab` tokens (what the preflight weighs) and no larger one."""
    bytes_free = 4 * model_parameters(architecture, vocab, 64, 1, 64)
    monkeypatch.setattr(pretraining_config, "available_memory", lambda: bytes_free)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Texts of more characters than a 100-token vocabulary: a byte-level BPE of 100 holds 261 tokens."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    with path.open("w") as out:
        for number in range(6):
            text = "the cat sat on the mat " + " ".join(chr(0x4E00 + 50 * number + i) for i in range(50))
            out.write(json.dumps({"id": str(number), "text": text}) + "\n")
    return path


@pytest.mark.parametrize("output", ["a new folder", "an earlier init-model, with --overwrite"])
@pytest.mark.parametrize("source", ["--tokenizer", "--corpus"])
@pytest.mark.parametrize("writer", ["init-model", "retromae.init_model"])
def test_a_size_the_tokenizer_makes_too_large_is_refused_before_the_claim(writer, source, output, init_model_folder,
                                                                          corpus,
                                                                          tiny_model_dir, tmp_path, monkeypatch,
                                                                          capsys):
    architecture, vocab = ("bert", 0) if source == "--tokenizer" else ("roberta", 100)
    tight_memory(monkeypatch, architecture, vocab)
    folder = tmp_path / "model"
    if output != "a new folder":
        shutil.copytree(init_model_folder, folder)
    before = contents(tmp_path)
    given = {"--tokenizer": dict(tokenizer=str(tiny_model_dir)), "--corpus": dict(corpus=str(corpus),
                                                                                   vocab_size="100")}[source]
    options = dict(**given, output=str(folder), architecture=architecture, hidden_size="64", layers="1",
                   max_positions="64")
    overwrite = output != "a new folder"
    if writer == "init-model":
        words = [word for key, value in options.items() for word in (f"--{key.replace('_', '-')}", value)]
        assert main(["init-model", *words, *(["--overwrite"] if overwrite else [])]) == 2
        said = error_line(capsys).removeprefix("retromae: error: ")
    else:
        with pytest.raises(ConfigError) as error:
            retromae.init_model(**{key: int(value) if value.isdigit() else value for key, value in options.items()},
                                overwrite=overwrite)
        said = str(error.value)
    tokens = re.search(r" and (\d+) tokens holds about ", said)
    assert said.startswith("--hidden-size, --layers, --max-positions: a ") and int(tokens[1]) > vocab, said
    assert contents(tmp_path) == before


def test_a_folder_init_model_may_not_take_is_refused_before_a_tokenizer_is_trained(init_model_folder, corpus, tmp_path,
                                                                                 monkeypatch, capsys):
    from retromae.pretraining import scratch

    monkeypatch.setattr(scratch, "trained_tokenizer", lambda config: pytest.fail("trained before the claim's check"))
    assert main(["init-model", "--corpus", str(corpus), "--vocab-size", "100", "--output", str(init_model_folder),
                 *SIZE]) == 2
    assert "holds the outputs of another run of `retromae init-model`" in error_line(capsys)


# Item 3: a model saved in shards.

@pytest.fixture(scope="module")
def sharded(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model saved as transformers saves one above its max_shard_size: shards and their index."""
    from transformers import AutoModelForMaskedLM

    folder = tmp_path_factory.mktemp("sharded") / "model"
    AutoModelForMaskedLM.from_pretrained(tiny_model_dir).save_pretrained(folder, max_shard_size="100KB")
    return folder


def shards(folder: Path) -> set[str]:
    """The names of a sharded model's shards and their index in `folder`."""
    return {path.name for path in folder.iterdir()
            if path.name.startswith("model-") or path.name == "model.safetensors.index.json"}


def test_the_outputs_of_a_model_writer_cover_its_shards(sharded, tiny_model_dir):
    names = shards(sharded)
    assert len(names) >= 3 and "model.safetensors.index.json" in names
    found = {path.name for path in outputs_in(sharded, saved_files(None))}
    assert names <= found and found == {path.name for path in sharded.iterdir()}
    (sharded / "model-1-of-2.safetensors").write_text("not a shard's name\n")
    try:
        assert "model-1-of-2.safetensors" not in {path.name for path in outputs_in(sharded, saved_files(None))}
    finally:
        (sharded / "model-1-of-2.safetensors").unlink()


def test_overwrite_replaces_an_earlier_save_in_shards(sharded, tiny_model_dir, tmp_path):
    folder = tmp_path / "saved"
    encoder = Encoder.load(tiny_model_dir)
    encoder.save(folder)
    (folder / "model.safetensors").unlink()
    for name in shards(sharded):
        shutil.copy(sharded / name, folder / name)
    encoder.save(folder, overwrite=True)
    assert not shards(folder) and (folder / "model.safetensors").is_file()


def test_a_save_that_fails_after_writing_shards_leaves_none(tiny_model_dir, tmp_path):
    encoder = Encoder.load(tiny_model_dir)
    encoder.model.save_pretrained = functools.partial(encoder.model.save_pretrained, max_shard_size="100KB")

    def fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    encoder.tokenizer.save_pretrained = fails
    with pytest.raises(OSError):
        encoder.save(tmp_path / "saved")
    assert not (tmp_path / "saved").exists()


def test_a_shard_read_as_an_input_is_never_where_the_output_is_written(sharded):
    shard = next(path for path in sharded.iterdir() if path.name.startswith("model-0"))
    with pytest.raises(ConfigError, match=f"^--output {sharded}: overlaps {shard}, which this command reads"):
        check_apart(sharded, [shard], saved_files(None))
    check_apart(sharded, [sharded / "notes.txt"], saved_files(None))


# Item 4: the words of the caller.

def encoder_save_refusals(tiny_model_dir: Path, root: Path) -> dict[str, tuple[Path, bool]]:
    """Folders Encoder.save refuses, each with whether it is asked to overwrite."""
    places = {name: root / name.replace(" ", "-") for name in (
        "another command's", "no run recorded", "an earlier save", "its source", "inside its source")}
    places["another command's"].mkdir()
    (places["another command's"] / "config.json").write_text("{}\n")
    write_marker(places["another command's"], "pretrain", {})
    shutil.copytree(tiny_model_dir, places["no run recorded"])
    Encoder.load(tiny_model_dir).save(places["an earlier save"])
    shutil.copytree(tiny_model_dir, places["its source"])
    places["inside its source"] = places["its source"] / "sub"
    return {name: (path, name != "an earlier save") for name, path in places.items()}


def test_every_refusal_of_encoder_save_names_its_arguments_not_the_command_line_s(tiny_model_dir, tmp_path):
    cases = encoder_save_refusals(tiny_model_dir, tmp_path)
    for case, (folder, overwrite) in cases.items():
        encoder = Encoder.load(cases["its source"][0] if "source" in case else tiny_model_dir)
        before = contents(tmp_path)
        with pytest.raises(ConfigError) as error:
            encoder.save(folder, overwrite=overwrite)
        said = str(error.value)
        assert "--" not in said and said.endswith(("another path", "(another path)")), (case, said)
        assert ("overwrite=True" in said) == (case != "its source" and case != "inside its source"), (case, said)
        assert contents(tmp_path) == before


def test_a_file_option_s_overlap_names_that_option(tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("")
    with pytest.raises(ConfigError) as error:
        claim_file(run, True, "save_run", inputs=[run])
    assert str(error.value) == (f"--save-run {run}: overlaps {run}, which this command reads; write its outputs "
                                "elsewhere (another --save-run)")


# Item 5: search whose backend is index.json's.

@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


def recording(inputs: dict[str, Path], folder: Path, **encoder: str) -> Path:
    """A copy of the index whose index.json records `encoder`'s fields over its own."""
    shutil.copytree(inputs["I"], folder)
    info = json.loads((folder / "index.json").read_text())
    info["encoder"] = {**info["encoder"], **encoder}
    (folder / "index.json").write_text(json.dumps(info))
    return folder


SEARCHES = {"--query": "search --index IDX --query cat",
            "--queries FILE": "search --index IDX --queries Q --output OUT",
            "--queries FILE --backend torch": "search --index IDX --queries Q --output OUT --backend torch",
            "--queries FOLDER (vectors)": "search --index IDX --queries E --output OUT"}


@pytest.mark.parametrize("recorded", ["onnx, installed model", "onnx, our model", "torch, installed model"])
@pytest.mark.parametrize("search", SEARCHES)
def test_a_search_writes_the_cache_where_the_backend_index_json_records_exports_there(search, recorded, inputs,
                                                                                     installed, tmp_path):  # noqa: F811
    backend, model = recorded.split(", ")
    index = recording(inputs, tmp_path / "idx", backend=backend,
                      model=str(installed if model == "installed model" else inputs["M"]))
    config = config_of(command_line(SEARCHES[search], inputs, tmp_path / "run.trec", IDX=index))
    exports = recorded == "onnx, installed model" and "torch" not in search and "vectors" not in search
    assert writes_cache(config) == exports


@pytest.mark.parametrize("writer", ["search", "retromae.search"])
@pytest.mark.parametrize("search", ["--query", "--queries FILE"])
def test_search_refuses_a_cache_that_takes_no_file_before_it_loads_the_index(writer, search, read_only, inputs,  # noqa: F811
                                                                           installed, tmp_path, monkeypatch,  # noqa: F811
                                                                           capsys):
    monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
    monkeypatch.setattr(searcher.Searcher, "load", lambda *args, **kwargs: pytest.fail("loaded before the check"))
    index = recording(inputs, tmp_path / "idx", backend="onnx", model=str(installed))
    out = tmp_path / "run.trec"
    words = command_line(SEARCHES[search], inputs, out, IDX=index)
    said = f"$RETROMAE_CACHE: {read_only}: cannot be written: "
    if writer == "search":
        assert main(words) == 1
        assert error_line(capsys).startswith(f"retromae: error: {said}")
    else:
        options = {"query": ["cat"]} if search == "--query" else {"queries": str(inputs["Q"]), "output": str(out)}
        with pytest.raises(FileSystemError, match=f"^{said.replace('$', '[$]')}"):
            retromae.search(index=str(index), **options)
    assert not os.path.lexists(out) and os.listdir(read_only) == []


def test_a_run_of_the_same_options_that_does_not_resume_is_called_an_earlier_one(tmp_path, capsys):
    """A command that does not resume, started again with the options of the run whose outputs are there: the refusal
    says that run was this one's earlier run, not another's (audit 12: a killed `quickstart` started again)."""
    folder = tmp_path / "out"
    claim_folder(folder, "index", {"factory": "Flat"}, ("index.faiss",), resumable=False)
    (folder / "index.faiss").write_bytes(b"x")
    mark_started(folder)
    with pytest.raises(ConfigError) as caught:
        claim_folder(folder, "index", {"factory": "Flat"}, ("index.faiss",), resumable=False)
    assert str(caught.value) == (f"{folder}: holds the outputs of an earlier run of `retromae index` with these "
                                 "options, which does not resume; --overwrite replaces it, or choose another --output")
