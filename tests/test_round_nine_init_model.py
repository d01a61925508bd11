"""Round nine of the hostile-input audit, section A: `init-model --output` wrote over any folder.

A trained model's weights, a pre-training run's `config.json` (the record `--resume` reads), an index folder, a
user's `config.json` and the folder its own --tokenizer came from were replaced with a random model, exit 0: the
command only took the folder's lock. It now claims its output as every folder-writing command does
(`runtime.run_folder.claim_folder` from `pretraining.scratch.init_model`, reached by the CLI and `retromae.init_model`):
a `retromae-run.json` of `init-model` marks its folders, another command's outputs and files no run recorded are
refused even with --overwrite, an input is never the output, and an earlier init-model run is replaced only with
--overwrite. The one other writer of a model folder, `retromae.Encoder.save` (it replaced the whole folder: a run's
checkpoints, an index, anything), claims its folder by the same rule. Generated over what the folder holds; each
refusal one line (exit 2 from the CLI, a ConfigError from Python), every file as it was.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import retromae
from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.models.model_source import ENCODER_FILE, saved_files
from retromae.pretraining import scratch
from retromae.pretraining.scratch import INIT_FILES, existing_tokenizer
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import MARKER, read_marker, write_marker

SIZE = ["--hidden-size", "64", "--layers", "1", "--max-positions", "64"]
WRITERS = {"init-model": "init-model", "retromae.init_model": "init-model", "Encoder.save": "Encoder.save"}
NOT_RECORDED = "which no retromae run recorded writing (not outputs of {command}), so even {overwrite}"
ANOTHER_COMMAND = "{command} never writes over another command's outputs (not even with {overwrite})"
OVERLAP = "which this command reads; write its outputs elsewhere (another {output})"
# How each command is named in a refusal, and its output and overwrite: the CLI's options, Encoder.save's arguments.
WORDS = {"init-model": dict(command="`retromae init-model`", overwrite="--overwrite", output="--output"),
         "Encoder.save": dict(command="`retromae.Encoder.save`", overwrite="overwrite=True", output="path")}


def model_folder(folder: Path, tiny: Path) -> None:
    """A model no init-model made (a trained one, say)."""
    shutil.copytree(tiny, folder)


def pretrain_run(folder: Path, tiny: Path) -> None:
    """A pre-training run's folder: its marker, its options in config.json, a checkpoint."""
    (folder / "checkpoints" / "step-1").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model": str(tiny), "max_steps": 1}) + "\n")
    write_marker(folder, "pretrain", {"model": str(tiny)})


def index_folder(folder: Path, tiny: Path) -> None:
    folder.mkdir()
    for name in ("index.faiss", "ids.txt", "index.json"):
        (folder / name).write_text(f"{name}\n")
    write_marker(folder, "index", {"embeddings": str(tiny)})


def users_config(folder: Path, tiny: Path) -> None:
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": 1}\n')


def earlier_init_model(folder: Path, tiny: Path) -> None:
    """An init-model folder of other options (hidden size 128)."""
    assert main(["init-model", "--tokenizer", str(tiny), "--output", str(folder), "--hidden-size", "128",
                 "--layers", "1", "--max-positions", "64"]) == 0


def earlier_save(folder: Path, tiny: Path) -> None:
    Encoder.load(tiny).save(folder)


# What the output holds → how to make it, and the words of its refusal (for a writer that did not make it).
HOLDS = {"a model folder": (model_folder, NOT_RECORDED), "a pretrain run": (pretrain_run, ANOTHER_COMMAND),
         "an index folder": (index_folder, ANOTHER_COMMAND), "a user's config.json": (users_config, NOT_RECORDED),
         "an earlier init-model": (earlier_init_model, ANOTHER_COMMAND),
         "an earlier Encoder.save": (earlier_save, ANOTHER_COMMAND)}
EARLIER = {"init-model": "an earlier init-model", "Encoder.save": "an earlier Encoder.save"}


def contents(folder: Path) -> dict[str, str]:
    """Every entry under `folder` with a sha256 of each file's bytes."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "/"
            for path in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def places(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """Each folder of `HOLDS`, made once (each test leaves it as it was, or the test fails)."""
    root = tmp_path_factory.mktemp("holds")
    made = {}
    for name, (make, _) in HOLDS.items():
        made[name] = root / name.replace(" ", "-").replace("'", "")
        make(made[name], tiny_model_dir)
    return made


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> Encoder:
    return Encoder.load(tiny_model_dir)


def refused(args: list[str], capsys) -> str:
    """`retromae ARGS` exits 2 with one line, no traceback; the line."""
    code, err = main(args), capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("retromae: error: ") and "Traceback" not in err, err
    return err


def write(writer: str, output: Path, tokenizer: Path, encoder: Encoder, capsys, overwrite: bool = False) -> str:
    """What `writer` refused writing the model at `output` (from `tokenizer` or `encoder`), as the CLI says it; ""
    when it wrote it."""
    if writer == "init-model":
        args = ["init-model", "--tokenizer", str(tokenizer), "--output", str(output), *SIZE]
        code, err = main([*args, *(["--overwrite"] if overwrite else [])]), capsys.readouterr().err
        assert code in (0, 2) and err.count("\n") == code // 2 and "Traceback" not in err, err
        return err.removeprefix("retromae: error: ")
    try:
        if writer == "Encoder.save":
            encoder.save(output, overwrite=overwrite)
        else:
            retromae.init_model(tokenizer=str(tokenizer), output=output, hidden_size=64, layers=1, max_positions=64,
                                overwrite=overwrite)
    except ConfigError as error:
        return f"{error}\n"
    return ""


@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize(("writer", "holds"), [(writer, holds) for writer, command in WRITERS.items()
                                               for holds in HOLDS if holds != EARLIER[command]])
def test_a_model_writer_refuses_a_folder_it_did_not_make(writer, holds, overwrite, places, tiny_model_dir, encoder,
                                                         capsys):
    command = WRITERS[writer]
    before = contents(places[holds])
    err = write(writer, places[holds], tiny_model_dir, encoder, capsys, overwrite)
    assert err.startswith(f"{places[holds]}: holds ") and HOLDS[holds][1].format(**WORDS[command]) in err, err
    assert contents(places[holds]) == before


@pytest.mark.parametrize("writer", WRITERS)
def test_a_model_writer_replaces_its_earlier_run_only_with_overwrite(writer, places, tiny_model_dir, encoder,
                                                                     tmp_path, capsys):
    command = WRITERS[writer]
    earlier = tmp_path / "earlier"
    shutil.copytree(places[EARLIER[command]], earlier)
    (earlier / "notes.txt").write_text("mine\n")
    before = contents(earlier)
    err = write(writer, earlier, tiny_model_dir, encoder, capsys)
    words = WORDS[command]
    assert err.startswith((f"{earlier}: holds the outputs of another run of {words['command']}",
                           f"{earlier}: holds the outputs of an earlier run of {words['command']} with these options, "
                           "which does not resume")) and \
        f"{words['overwrite']} replaces it, or choose another {words['output']}" in err, err
    assert contents(earlier) == before
    assert write(writer, earlier, tiny_model_dir, encoder, capsys, overwrite=True) == ""
    assert (earlier / "notes.txt").read_text() == "mine\n" and read_marker(earlier)["command"] == command
    if command == "init-model":
        assert json.loads((earlier / "config.json").read_text())["hidden_size"] == 64


@pytest.mark.parametrize("where", ["the tokenizer's folder", "inside it", "the corpus file"])
def test_init_model_never_writes_where_it_reads(where, tiny_model_dir, tmp_path, capsys):
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(tiny_model_dir, tokenizer)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "text": "a cat sat on the mat"}\n')
    source = ["--corpus", str(corpus), "--vocab-size", "100"] if where == "the corpus file" else \
        ["--tokenizer", str(tokenizer)]
    output = {"the tokenizer's folder": tokenizer, "inside it": tokenizer / "sub", "the corpus file": corpus}[where]
    read = corpus if where == "the corpus file" else tokenizer
    before = contents(tmp_path)
    err = refused(["init-model", *source, "--output", str(output), *SIZE], capsys)
    assert err == f"retromae: error: --output {output}: overlaps {read}, {OVERLAP.format(output='--output')}\n"
    assert contents(tmp_path) == before


@pytest.mark.parametrize("where", ["its folder", "inside it"])
def test_an_encoder_is_never_saved_over_the_folder_it_was_loaded_from(where, tiny_model_dir, tmp_path):
    source = tmp_path / "model"
    shutil.copytree(tiny_model_dir, source)
    output = source if where == "its folder" else source / "sub"
    before = contents(tmp_path)
    with pytest.raises(ConfigError) as error:
        Encoder.load(source).save(output, overwrite=True)
    assert str(error.value) == f"path {output}: overlaps {source}, {OVERLAP.format(output='path')}"
    assert contents(tmp_path) == before


def test_a_model_folder_written_holds_only_its_outputs_and_its_marker(places, tiny_model_dir, encoder):
    for made, outputs in (("an earlier init-model", {*saved_files(existing_tokenizer(str(tiny_model_dir))),
                                                     *INIT_FILES}),
                          ("an earlier Encoder.save", {*saved_files(encoder.tokenizer), ENCODER_FILE})):
        written = {path.name for path in places[made].iterdir()}
        assert written - {MARKER} <= outputs and {"config.json", "model.safetensors", MARKER} <= written
        assert "started" not in read_marker(places[made])


def test_a_run_that_fails_after_its_claim_leaves_no_folder(tiny_model_dir, tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise DataError("the disk said no")

    monkeypatch.setattr(scratch, "write_random_model", fails)
    assert refused(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(tmp_path / "m"), *SIZE],
                   capsys) == "retromae: error: the disk said no\n"
    assert not (tmp_path / "m").exists()
