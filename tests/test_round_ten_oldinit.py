"""Round ten (audit 12, N): an init-model folder of before its runs were recorded is told by what it holds, never by
its files' times (`pretraining.scratch.unrecorded_init_model`, `untouched_weights`).

Its weights are rebuilt from the seed of random-init.json and the folder's config.json by the code init-model runs
and must be, bit for bit, model.safetensors' tensors: `--overwrite` replaces such a folder however a copy, a clock or
`touch` dated its files, and keeps one whose weights changed, however they are dated.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import error_line
from safetensors.torch import load_file, save_file
from test_round_ten_claims import NOT_RECORDED, SIZE, contents, trained, unmarked

from retromae.backbones.families import architecture_names
from retromae.cli import main
from retromae.models.model_source import RANDOM_INIT_MARKER
from retromae.pretraining import scratch
from retromae.pretraining.scratch import family_tokenizer, save_random_model, unrecorded_init_model

HOUR = 3600 * 10**9


def dated(relative: str, hours: int):
    """The file at `relative` in a folder dated `hours` from random-init.json's time."""
    def change(folder: Path) -> None:
        when = os.stat(folder / RANDOM_INIT_MARKER).st_mtime_ns + hours * HOUR
        os.utime(folder / relative, ns=(when, when))
    return change


def copied(folder: Path) -> None:
    """The folder as `cp -r` (or a checkout, a sync without times) leaves it: each file dated by the copy."""
    shutil.copytree(folder, folder.with_name("copy"), copy_function=shutil.copyfile)
    shutil.rmtree(folder)
    folder.with_name("copy").rename(folder)


TIMES = {"copied (every file dated now)": copied, "random-init.json an hour ahead": dated(RANDOM_INIT_MARKER, 1),
         "the weights an hour after random-init.json": dated("model.safetensors", 1),
         "a tokenizer file and a pooling file a day after": lambda folder: (
             dated("tokenizer.json", 24)(folder), dated("1_Pooling/config.json", 24)(folder))}


def weights(change):
    """model.safetensors rewritten with its tensors as `change` leaves them, its time kept."""
    def rewrite(folder: Path) -> None:
        path = folder / "model.safetensors"
        written, tensors = os.stat(path).st_mtime_ns, load_file(str(path))
        change(tensors, sorted(tensors)[0])
        save_file(tensors, str(path), metadata={"format": "pt"})
        os.utime(path, ns=(written, written))
    return rewrite


def one_bit(tensors: dict, name: str) -> None:
    tensors[name].view(-1).view(torch.int32)[0] ^= 1


# What the weights hold where they are no untouched init: each refused, with --overwrite too.
CHANGED = {"one bit of one tensor": weights(one_bit),
           "a tensor left out": weights(lambda tensors, name: tensors.pop(name)),
           "a tensor added": weights(lambda tensors, name: tensors.update(extra=torch.zeros(2))),
           "a tensor as float16": weights(lambda tensors, name: tensors.update({name: tensors[name].half()})),
           "another seed recorded": lambda folder: (folder / RANDOM_INIT_MARKER).write_text('{"seed": 7}\n'),
           "not safetensors": lambda folder: (folder / "model.safetensors").write_bytes(b"\x08" * 64),
           "a link to its weights": lambda folder: (
               (folder / "model.safetensors").rename(folder / "weights"),
               (folder / "model.safetensors").symlink_to("weights")),
           "shards beside": lambda folder: shutil.copyfile(folder / "model.safetensors",
                                                          folder / "model-00001-of-00002.safetensors"),
           "a pickle beside": lambda folder: (folder / "pytorch_model.bin").write_bytes(b"x")}


@pytest.mark.parametrize("times", TIMES)
@pytest.mark.parametrize("held", ["untouched", "trained"])
def test_an_old_init_model_is_told_by_its_weights_never_by_its_times(held, times, init_model_folder, tmp_path):
    folder = unmarked(init_model_folder, tmp_path / "old")
    if held == "trained":
        trained(folder)
    TIMES[times](folder)
    assert unrecorded_init_model(folder) == (held == "untouched")


@pytest.mark.parametrize("case", CHANGED)
def test_weights_other_than_the_rebuilt_init_are_not_taken_for_one(case, init_model_folder, tmp_path):
    folder = unmarked(init_model_folder, tmp_path / "old")
    CHANGED[case](folder)
    assert not unrecorded_init_model(folder)


def test_weights_larger_than_rebuilt_are_not_taken_for_an_init(init_model_folder, tmp_path, monkeypatch):
    folder = unmarked(init_model_folder, tmp_path / "old")
    monkeypatch.setattr(scratch, "MAX_REBUILT_BYTES", (folder / "model.safetensors").stat().st_size - 1)
    monkeypatch.setattr(scratch, "random_masked_lm", lambda config, seed: pytest.fail("rebuilt"))
    assert not unrecorded_init_model(folder)


@pytest.mark.parametrize("held", ["untouched", "trained"])
def test_overwrite_of_a_copied_old_init_model_replaces_only_an_untouched_one(held, init_model_folder, tiny_model_dir,
                                                                            tmp_path,
                                                                            capsys):
    """The audit's case: a copy (`cp -r`) of a folder whose weights were trained in place."""
    folder = unmarked(init_model_folder, tmp_path / "old")
    if held == "trained":
        trained(folder)
    copied(folder)
    before = contents(folder)
    command = ["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(folder), *SIZE, "--overwrite"]
    if held == "trained":
        assert main(command) == 2
        line = error_line(capsys)
        assert line.startswith(f"retromae: error: {folder}: holds ") and NOT_RECORDED in line, line
        assert contents(folder) == before
    else:
        assert main(command) == 0
        assert json.loads((folder / "config.json").read_text())["hidden_size"] == 64


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, Path]:
    """An init-model folder of each architecture (tiny), as made before runs were recorded (no marker)."""
    root, texts = tmp_path_factory.mktemp("families"), ["the cat sat on the mat", "a dog ran far away 12"] * 20
    return {name: save_random_model(family_tokenizer(texts, name, 200, 64), root / name, hidden_size=64, layers=1,
                                    max_positions=64, seed=3, architecture=name) for name in architecture_names()}


@pytest.mark.parametrize("architecture", architecture_names())
def test_each_family_is_rebuilt_to_its_saved_weights(architecture, families, tmp_path):
    """The tensors `save_pretrained` leaves out (a decoder tied to the embeddings) are not asked for."""
    assert unrecorded_init_model(families[architecture])
    folder = tmp_path / architecture
    shutil.copytree(families[architecture], folder)
    weights(one_bit)(folder)
    assert not unrecorded_init_model(folder)
