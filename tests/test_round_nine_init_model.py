"""Round nine of the hostile-input audit, section A: `init-model --output` wrote over any folder.

A trained model's weights, a pre-training run's `config.json` (the record `--resume` reads), an index folder, a
user's `config.json` and the folder its own --tokenizer came from were replaced with a random model, exit 0: the
command only took the folder's lock. It now claims its output as every folder-writing command does
(`runtime.run_folder.claim_folder` from `pretraining.scratch.init_model`, reached by the CLI and `retromae.init_model`):
a `retromae-run.json` of `init-model` marks its folders, another command's outputs and files no run recorded are
refused even with --overwrite, an input is never the output, and an earlier init-model run is replaced only with
--overwrite. Generated over what the folder holds; each refusal one line, exit 2, every file as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

import retromae
from retromae.cli import main
from retromae.models.model_source import saved_files
from retromae.pretraining import scratch
from retromae.pretraining.scratch import INIT_FILES, existing_tokenizer
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import MARKER, read_marker, write_marker

SIZE = ["--hidden-size", "64", "--layers", "1", "--max-positions", "64"]
NOT_RECORDED = "which no retromae run recorded writing (not outputs of `retromae init-model`), so even --overwrite"
ANOTHER_COMMAND = "`retromae init-model` never writes over another command's outputs (not even with --overwrite)"
OVERLAP = "which this command reads; write its outputs elsewhere (another --output)"


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


def earlier_run(folder: Path, tiny: Path) -> None:
    """An init-model folder of other options (hidden size 128)."""
    assert main(["init-model", "--tokenizer", str(tiny), "--output", str(folder), "--hidden-size", "128",
                 "--layers", "1", "--max-positions", "64"]) == 0


# What the output holds → (how to make it, the words of its refusal)
HOLDS = {"a model folder": (model_folder, NOT_RECORDED), "a pretrain run": (pretrain_run, ANOTHER_COMMAND),
         "an index folder": (index_folder, ANOTHER_COMMAND), "a user's config.json": (users_config, NOT_RECORDED),
         "an earlier init-model run": (earlier_run, "holds the outputs of another run of `retromae init-model` "
                                                    "(hidden_size differ); --overwrite replaces it, or choose")}


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


def refused(args: list[str], capsys) -> str:
    """`retromae ARGS` exits 2 with one line, no traceback; the line."""
    code, err = main(args), capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("retromae: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "--overwrite"])
@pytest.mark.parametrize("holds", [name for name in HOLDS if name != "an earlier init-model run"])
def test_init_model_refuses_a_folder_it_did_not_make(holds, overwrite, places, tiny_model_dir, capsys):
    before = contents(places[holds])
    err = refused(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(places[holds]), *SIZE,
                   *overwrite], capsys)
    assert err.startswith(f"retromae: error: {places[holds]}: holds ") and HOLDS[holds][1] in err, err
    assert contents(places[holds]) == before


def test_init_model_replaces_an_earlier_run_only_with_overwrite(places, tiny_model_dir, tmp_path, capsys):
    earlier = tmp_path / "earlier"
    shutil.copytree(places["an earlier init-model run"], earlier)
    (earlier / "notes.txt").write_text("mine\n")
    args = ["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(earlier), *SIZE]
    before = contents(earlier)
    assert HOLDS["an earlier init-model run"][1] in refused(args, capsys)
    assert contents(earlier) == before
    assert main([*args, "--overwrite"]) == 0
    assert json.loads((earlier / "config.json").read_text())["hidden_size"] == 64
    assert (earlier / "notes.txt").read_text() == "mine\n" and read_marker(earlier)["command"] == "init-model"
    same = refused(args, capsys)  # the same options again: refused too (a run is kept whole)
    assert "another run of `retromae init-model`; --overwrite replaces it" in same, same


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
    assert err == f"retromae: error: --output {output}: overlaps {read}, {OVERLAP}\n"
    assert contents(tmp_path) == before


def test_the_python_api_shares_the_rule(places, tiny_model_dir):
    before = contents(places["a model folder"])
    with pytest.raises(ConfigError, match=re.escape(NOT_RECORDED)):
        retromae.init_model(tokenizer=str(tiny_model_dir), output=places["a model folder"], hidden_size=64, layers=1,
                            max_positions=64)
    assert contents(places["a model folder"]) == before


def test_an_init_model_folder_holds_only_its_outputs_and_its_marker(places, tiny_model_dir):
    written = {path.name for path in places["an earlier init-model run"].iterdir()}
    assert written - {MARKER} <= {*saved_files(existing_tokenizer(str(tiny_model_dir))), *INIT_FILES}
    assert {"config.json", "model.safetensors", "tokenizer.json", MARKER} <= written
    assert "started" not in read_marker(places["an earlier init-model run"])


def test_a_run_that_fails_after_its_claim_leaves_no_folder(tiny_model_dir, tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise DataError("the disk said no")

    monkeypatch.setattr(scratch, "save_random_model", fails)
    assert refused(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(tmp_path / "m"), *SIZE],
                   capsys) == "retromae: error: the disk said no\n"
    assert not (tmp_path / "m").exists()
