"""Opening a run folder runs no code (issue 34, item 1): checkpoints are safetensors and JSON, a crafted pickle
planted under any name a loader reads (ours, and Accelerate's of older checkpoints) runs nothing and is refused in one
line naming it, damaged or foreign files too, and a resume still continues the same trajectory exactly."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import kill_after_checkpoint, run_two_processes, tiny_pretrain_config
from safetensors.torch import load_file, save_file
from test_train import collate, dataset
from torch import nn

import retromae
from retromae.runtime.io import current_umask
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import MARKER
from retromae.training import Trainer, TrainingConfig, latest_checkpoint, make_accelerator, seed_everything
from retromae.training.checkpoint_state import check_complete, check_shared_folder

OURS = ("model.safetensors", "optimizer.safetensors", "state.json", "rng-0.json")
# What Accelerate's save_state wrote into a checkpoint before (and load_state read back, some with weights_only=False).
ACCELERATE_NAMES = ("custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl", "optimizer.bin",
                    "scheduler.bin", "pytorch_model.bin", "scaler.pt", "sampler.bin", "dl_state_dict.bin",
                    "pytorch_model_fsdp_0/.metadata", "optimizer_0/.metadata",  # FSDP's sharded state (pickled index)
                    "pytorch_model/mp_rank_00_model_states.pt")  # DeepSpeed's engine


class DropoutRegression(nn.Module):
    """A tiny model whose loss depends on the global torch generator (dropout), as the transformers' do: a resume
    that did not restore the RNG state would train on other masks."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8, 1)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        noisy = batch["x"] + torch.rand(batch["x"].shape, generator=generator)  # (B, 4)
        prediction = self.head(self.drop(torch.tanh(self.body(noisy)))).squeeze(-1)  # (B,)
        return {"loss": (prediction - batch["y"]).pow(2).mean()}


class Planted:
    """A pickle that writes a file when unpickled."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return Path.write_text, (self.target, "code from the run folder ran")


def plant(path: Path, target: Path) -> None:
    """A crafted pickle at `path` in the format its reader expects: torch.save's (Accelerate's loaders), a plain
    pickle for the `.metadata` of torch.distributed.checkpoint (FSDP's sharded state)."""
    if path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(exist_ok=True)
    if path.name == ".metadata":
        path.write_bytes(pickle.dumps(Planted(target)))
    else:
        torch.save(Planted(target), path)


def test_the_planted_pickle_would_run_code_if_unpickled(tmp_path):
    """The payloads of these tests are real: torch.load with weights_only=False (or pickle) writes the file."""
    plant(tmp_path / "custom_checkpoint_1.pkl", tmp_path / "ran")
    torch.load(tmp_path / "custom_checkpoint_1.pkl", weights_only=False)
    assert (tmp_path / "ran").read_text() == "code from the run folder ran"
    plant(tmp_path / "sharded" / ".metadata", tmp_path / "ran-too")
    pickle.loads((tmp_path / "sharded" / ".metadata").read_bytes())
    assert (tmp_path / "ran-too").is_file()


def settings(output: Path, **overrides) -> TrainingConfig:
    values = dict(output=str(output), max_steps=6, batch_size=4, gradient_accumulation_steps=2, learning_rate=0.05,
                  warmup_ratio=0.2, log_every=1, save_every=3, keep_checkpoints=3, seed=5)
    return TrainingConfig(**{**values, **overrides})


def train(output: Path, **overrides) -> Trainer:
    output.mkdir(parents=True, exist_ok=True)
    seed_everything(5)
    trainer = Trainer(DropoutRegression(), dataset(), collate, settings(output, **overrides))
    trainer.run()
    return trainer


def parameters(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.unwrapped_model.named_parameters()}


@pytest.fixture()
def checkpointed(tmp_path, monkeypatch) -> Path:
    """A run folder whose latest checkpoint is step 3 of 6, the run killed right after writing it."""
    output = tmp_path / "run"
    kill_after_checkpoint(monkeypatch, 3, lambda: train(output))
    return output


def resume(output: Path) -> Trainer:
    return train(output, resume=True)


def test_a_checkpoint_holds_only_safetensors_and_json(checkpointed):
    folder = latest_checkpoint(checkpointed)
    assert sorted(p.name for p in folder.iterdir()) == sorted((*OURS, MARKER))
    for name in ("state.json", "rng-0.json", MARKER):
        json.loads((folder / name).read_text())
    for name in ("model.safetensors", "optimizer.safetensors"):
        assert load_file(folder / name)
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o666 & ~current_umask()  # a colleague may read it
    assert set(load_file(folder / "optimizer.safetensors")) == {
        f"{name}/{key}" for name in ("body.weight", "body.bias", "head.weight", "head.bias")
        for key in ("step", "exp_avg", "exp_avg_sq")}


def test_resume_continues_the_same_trajectory_bit_for_bit(checkpointed, tmp_path):
    whole = parameters(train(tmp_path / "whole"))
    resumed = parameters(resume(checkpointed))
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)  # dropout masks, moments, schedule: exact
    logged = [json.loads(line) for line in (checkpointed / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"], r["lr"]) for r in logged] == [(r["step"], r["loss"], r["lr"]) for r in reference]


def refusal(output: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        resume(output)
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", OURS)
def test_a_pickle_planted_under_each_of_our_names_runs_nothing(checkpointed, tmp_path, name):
    folder = latest_checkpoint(checkpointed)
    plant(folder / name, tmp_path / "ran")
    assert refusal(checkpointed).startswith(f"{folder / name}: ")
    assert not (tmp_path / "ran").exists()


def test_a_pickle_planted_as_the_checkpoint_marker_runs_nothing(checkpointed, tmp_path):
    folder = latest_checkpoint(checkpointed)
    plant(folder / MARKER, tmp_path / "ran")
    assert refusal(checkpointed).startswith(f"{folder}: holds outputs with no record of the run")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("name", ACCELERATE_NAMES)
def test_a_checkpoint_in_accelerates_pickle_layout_is_refused_unopened(checkpointed, tmp_path, name):
    """A checkpoint of the earlier layout (its run marker valid, so only the pickles stand in the way)."""
    folder = latest_checkpoint(checkpointed)
    for ours in OURS:
        (folder / ours).unlink()
    plant(folder / name, tmp_path / "ran")
    message = refusal(checkpointed)
    assert message.startswith(f"{folder / name.split('/')[0]}: a checkpoint in Accelerate's pickle layout")
    assert "--overwrite" in message
    assert not (tmp_path / "ran").exists()


def test_accelerates_file_names_beside_our_files_are_never_opened(checkpointed, tmp_path):
    folder = latest_checkpoint(checkpointed)
    for name in ACCELERATE_NAMES:
        plant(folder / name, tmp_path / "ran")
    assert resume(checkpointed).state.step == 6
    assert not (tmp_path / "ran").exists()


def rewrite_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


DAMAGES = {
    "truncated model": ("model.safetensors", lambda p: p.write_bytes(p.read_bytes()[:100])),
    "another model's tensors": ("model.safetensors", lambda p: save_file({"body.weight": torch.zeros(3, 3)}, p)),
    "non-finite weights": ("model.safetensors", lambda p: save_file(
        {**load_file(p), "head.bias": torch.tensor([float("nan")])}, p)),
    "optimizer of another model": ("optimizer.safetensors", lambda p: save_file(
        {"decoder.weight/exp_avg": torch.zeros(2)}, p)),
    "NaN learning rate": ("state.json", lambda p: p.write_text(p.read_text().replace('"lr": ', '"lr": NaN, "x": '))),
    "an infinite learning rate": ("state.json", lambda p: p.write_text(
        p.read_text().replace('"lr": ', '"lr": 1e999, "x": '))),
    "negative step": ("state.json", lambda p: rewrite_json(p, lambda s: s["counters"].update(step=-1))),
    "a schedule with code-like fields": ("state.json", lambda p: rewrite_json(
        p, lambda s: s["scheduler"].update(lr_lambdas=[{"__code__": "x"}]))),
    "another format": ("state.json", lambda p: rewrite_json(p, lambda s: s.update(format=2))),
    "a process count that is text": ("state.json", lambda p: rewrite_json(p, lambda s: s.update(processes="two"))),
    "optimiser groups that are not a list": ("state.json", lambda p: rewrite_json(
        p, lambda s: s["optimizer"].update(param_groups={"params": 1}))),
    "random state of wrong size": ("rng-0.json", lambda p: rewrite_json(p, lambda s: s.update(torch=[1, 2, 3]))),
    "not JSON": ("rng-0.json", lambda p: p.write_bytes(b"\xff\x00")),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_or_foreign_checkpoint_files_are_refused_naming_the_file(checkpointed, damage):
    """Without the files' sha256 (a checkpoint written before they were recorded), as each file is read."""
    name, change = DAMAGES[damage]
    folder = latest_checkpoint(checkpointed)
    rewrite_json(folder / "state.json", lambda state: state.pop("sha256"))
    change(folder / name)
    assert refusal(checkpointed).startswith(f"{folder / name}: not a checkpoint file of this run (")


def test_a_checkpoint_missing_its_state_is_refused(checkpointed):
    folder = latest_checkpoint(checkpointed)
    (folder / "state.json").unlink()
    assert refusal(checkpointed) == (f"{folder / 'state.json'}: missing; {folder} is not a complete checkpoint "
                                     "(delete it to resume from another)")


def test_a_checkpoint_is_renamed_only_once_every_process_file_is_seen(tmp_path):
    """On several nodes without a shared --output, process 0 would not see the others' files."""
    accelerator = make_accelerator(settings(tmp_path))
    staging = tmp_path / "step-0000003.tmp"
    staging.mkdir()
    with pytest.raises(ConfigError, match=r"rng-0\.json: process 0 wrote it, but process 0 cannot see it: on several "
                                          "nodes --output must be on a file system every node shares"):
        check_complete(staging, accelerator)


def test_processes_that_cannot_see_the_run_folder_are_refused_before_training(tmp_path):
    """Two nodes whose --output is not one shared folder: one of the two processes sees the run marker."""
    (tmp_path / MARKER).write_text("{}")
    two = types.SimpleNamespace(num_processes=2, device="cpu", wait_for_everyone=lambda: None,
                                reduce=lambda seen, reduction: seen)  # the other process's count: 0
    with pytest.raises(ConfigError, match=f"1 of 2 processes cannot see the {MARKER} written there: on several "
                                          "nodes --output must be a folder on a file system every node shares"):
        check_shared_folder(tmp_path, MARKER, two)
    check_shared_folder(tmp_path, MARKER, types.SimpleNamespace(**{**vars(two), "reduce": lambda seen, reduction:
                                                                   seen * 2}))  # both see it


def test_pretrain_resume_refuses_a_planted_pickle_in_one_line(tiny_model_dir, tiny_corpus, tmp_path):
    """The CLI end to end: an old-layout checkpoint holding a crafted custom_checkpoint_1.pkl (what the audit did)."""
    output = tmp_path / "run"
    assert retromae.pretrain(tiny_pretrain_config(tiny_model_dir, tiny_corpus, output, max_steps=3)) is not None
    folder = latest_checkpoint(output)
    for name in OURS:
        (folder / name).unlink()
    plant(folder / "custom_checkpoint_1.pkl", tmp_path / "ran")
    result = subprocess.run([sys.executable, "-m", "retromae", "pretrain", "--output", str(output), "--resume",
                             "--max-steps", "6"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
                                 "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"retromae: error: {folder / 'custom_checkpoint_1.pkl'}: a checkpoint in "
                                          "Accelerate's pickle layout (written by an older retromae); it is not "
                                          "opened, since reading a pickle can run code planted in it. Start the run "
                                          "again with --overwrite (or without --resume into another --output)"]
    assert not (tmp_path / "ran").exists()


@pytest.mark.slow
def test_fsdp_checkpoints_gather_full_state_and_resume_exactly(tmp_path, monkeypatch):
    """The FSDP path on two CPU processes (torch's fully_shard; Accelerate's FSDP needs a GPU):
    tests/dist_fsdp_checkpoint.py."""
    monkeypatch.setenv("RETROMAE_TEST_FOLDER", str(tmp_path))
    output = run_two_processes("dist_fsdp_checkpoint.py")
    assert output.count("equal the uninterrupted run's") == 2
