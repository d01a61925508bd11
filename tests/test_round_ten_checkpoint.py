"""A checkpoint's fields that restate the run, and its tensor files, are the run's (audit 12, M).

`checkpoint_state.restated` lists every field of state.json the run's options determine (the data position, the
schedule's base rates and counts, each optimiser group's settings, the gradient scaler's); each, edited, is refused by
`load_training_state` in one line naming state.json and the field, nothing loaded. The model and optimiser files are
bound to their step by the sha256 state.json records: another step's are refused, by a resume and by `adapt`'s guard
(`read_model_tensors`); a checkpoint without the record (and a model file alone) loads as before. `pretrain --resume`
refuses in one line, exit 2, nothing written. `resume_from` is the one resume of every training command (pretrain,
finetune, train-reranker, adapt's stages: `Trainer._resume`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import types
from pathlib import Path

import pytest
import torch
from conftest import error_line
from torch import nn

from retromae.cli import main
from retromae.runtime.options import ConfigError
from retromae.training.checkpoint_state import (
    load_training_state,
    read_model_tensors,
    restated,
    save_training_state,
)
from retromae.training.config import HeadTrainingConfig
from retromae.training.optimizer import build_optimizer, build_scheduler

ACCUMULATION = 2
CONFIG = HeadTrainingConfig(output="unused", max_steps=4, learning_rate=0.01, head_learning_rate=0.1, weight_decay=0.05)


class Tower(nn.Module):
    """A body (a transformers model's, as `body_parameter_ids` finds it) and a head: four optimiser groups."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        self.body = BertModel(BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                         intermediate_size=4, max_position_embeddings=4))
        self.head = nn.Linear(4, 2)


def fresh() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, types.SimpleNamespace]:
    torch.manual_seed(0)
    model = Tower()
    optimizer = build_optimizer(model, CONFIG)
    accelerator = types.SimpleNamespace(distributed_type="NO", is_main_process=True, num_processes=1,
                                        process_index=0, scaler=torch.amp.GradScaler("cpu"),
                                        unwrap_model=lambda module: module)
    return model, optimizer, build_scheduler(optimizer, CONFIG), accelerator


def trained(folder: Path, steps: int) -> None:
    """Checkpoints of steps 1 to `steps` under `folder` (`step-N`)."""
    model, optimizer, scheduler, accelerator = fresh()
    for step in range(1, steps + 1):
        model.head(model.body(torch.tensor([[1, 2, 3]])).last_hidden_state).sum().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        counters = {"step": step, "micro_batches": step * ACCUMULATION, "tokens": 3 * step}
        save_training_state(folder / f"step-{step}", model, optimizer, scheduler, counters, accelerator)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoints")
    trained(folder, 2)
    return folder


@pytest.fixture()
def step_one(saved, tmp_path) -> Path:
    shutil.copytree(saved / "step-1", tmp_path / "step-1")
    return tmp_path / "step-1"


def load(folder: Path, step: int = 1) -> dict[str, int]:
    model, optimizer, scheduler, accelerator = fresh()
    return load_training_state(folder, model, optimizer, scheduler, accelerator, step=step, max_steps=4,
                               accumulation=ACCUMULATION)


def edit_state(folder: Path, change) -> None:
    state = json.loads((folder / "state.json").read_text())
    change(state)
    (folder / "state.json").write_text(json.dumps(state))


def place(state: dict, field: str) -> tuple[dict | list, str | int]:
    *keys, last = [int(key) if key.isdigit() else key for key in field.split(".")]
    for key in keys:
        state = state[key]
    return state, last


def other(value):
    """A value of the same kind as `value` and not equal to it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, list):
        return [other(item) for item in value]
    return value * 10 + 1 if value is not None else 0.5


def run_fields() -> list[str]:
    """The fields the run determines in the state.json of step 1 (`restated`)."""
    _, optimizer, scheduler, accelerator = fresh()
    return sorted(restated(scheduler, optimizer, accelerator.scaler, 1, ACCUMULATION))


FIELDS = run_fields()


def test_the_restated_fields_are_the_runs_determined_ones():
    groups = [f"optimizer.param_groups.{index}.{key}" for index in range(4)
              for key in ("initial_lr", "body", "weight_decay", "betas", "eps", "amsgrad", "maximize")]
    assert {"counters.micro_batches", "scheduler.base_lrs", "scheduler._step_count", "scheduler._is_initial",
            "scaler.growth_factor", "scaler.backoff_factor", "scaler.growth_interval", *groups} <= set(FIELDS)
    assert not [field for field in FIELDS
                if field.endswith(("lr_lambdas", "_last_lr", "last_epoch", ".lr", "fused", "foreach"))]


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_restating_the_run_is_refused_naming_it(step_one, field):
    state = json.loads((step_one / "state.json").read_text())
    container, key = place(state, field)
    expected, container[key] = container[key], other(container[key])
    (step_one / "state.json").write_text(json.dumps(state))
    with pytest.raises(ConfigError) as refused:
        load(step_one)
    assert str(refused.value) == (
        f"{step_one / 'state.json'}: {field}: the checkpoint of step 1 says {container[key]!r}, the run's options "
        f"make {expected!r}; {step_one} is damaged (delete it to resume from another)")


def test_the_audits_base_rates_and_adams_settings(step_one):
    edit_state(step_one, lambda state: state["scheduler"].update(base_lrs=[10.0] * 4))
    with pytest.raises(ConfigError, match=re.escape("scheduler.base_lrs: the checkpoint of step 1 says [10.0, 10.0, "
                                                    "10.0, 10.0], the run's options make [0.01, 0.01, 0.1, 0.1];")):
        load(step_one)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_a_tensor_file_of_another_step_is_refused_by_a_resume(saved, step_one, name):
    shutil.copy(saved / "step-2" / name, step_one / name)
    with pytest.raises(ConfigError) as refused:
        load(step_one)
    assert str(refused.value) == (f"{step_one / name}: not the file saved with this checkpoint (its sha256 is not the "
                                  f"one state.json records); {step_one} is damaged (delete it to resume from another)")


def test_adapts_guard_refuses_the_weights_of_another_step(saved, step_one):
    assert torch.equal(read_model_tensors(step_one / "model.safetensors")["head.bias"],
                       read_model_tensors(saved / "step-1" / "model.safetensors")["head.bias"])
    shutil.copy(saved / "step-2" / "model.safetensors", step_one / "model.safetensors")
    with pytest.raises(ConfigError, match="model.safetensors: not the file saved with this checkpoint"):
        read_model_tensors(step_one / "model.safetensors")
    (step_one / "state.json").unlink()  # a model file alone, as adapt's distilled student is saved
    assert "head.bias" in read_model_tensors(step_one / "model.safetensors")


def test_the_record_is_the_files_sha256_and_a_checkpoint_without_it_loads(step_one):
    digests = json.loads((step_one / "state.json").read_text())["sha256"]
    assert digests == {name: hashlib.sha256((step_one / name).read_bytes()).hexdigest() for name in digests}
    assert load(step_one)["micro_batches"] == ACCUMULATION
    edit_state(step_one, lambda state: state.pop("sha256"))
    assert load(step_one)["step"] == 1


@pytest.mark.parametrize("record", [["x"], {"model.safetensors": "0"}, {"model.safetensors": 1,
                                                                       "optimizer.safetensors": "0"}])
def test_a_malformed_record_is_refused(step_one, record):
    edit_state(step_one, lambda state: state.update(sha256=record))
    with pytest.raises(ConfigError, match=f"^{re.escape(str(step_one / 'state.json'))}: not a checkpoint file of this "
                                          r"run \(ValueError: sha256 must name the digests of model.safetensors and"):
        load(step_one)


def test_the_groups_take_the_runs_settings_and_the_rate_must_be_a_number(step_one):
    edit_state(step_one, lambda state: [group.update(fused=True, foreach=True)
                                        for group in state["optimizer"]["param_groups"]])
    model, optimizer, scheduler, accelerator = fresh()
    load_training_state(step_one, model, optimizer, scheduler, accelerator, step=1, max_steps=4, accumulation=2)
    assert [(group["fused"], group["foreach"]) for group in optimizer.param_groups] == [(None, None)] * 4
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)
    edit_state(step_one, lambda state: state["optimizer"]["param_groups"][1].update(lr="0.1"))
    with pytest.raises(ConfigError, match=r"not a checkpoint file of this run \(ValueError: each parameter group's lr"):
        load(step_one)


def test_pretrain_resume_refuses_in_one_line_and_writes_nothing(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    output = tmp_path / "run"
    line = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(output),
            "--batch-size", "4", "--max-length", "32", "--save-every", "1", "--cache-dir", str(tmp_path / "cache")]
    assert main([*line, "--max-steps", "1"]) == 0
    state = output / "checkpoints" / "step-0000001" / "state.json"
    edit_state(state.parent, lambda saved: saved["counters"].update(micro_batches=10**9))
    before = {path: path.read_bytes() for path in output.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert main([*line, "--max-steps", "2", "--resume"]) == 2
    assert error_line(capsys) == (
        f"retromae: error: {state}: counters.micro_batches: the checkpoint of step 1 says 1000000000, the run's "
        f"options make 1; {state.parent} is damaged (delete it to resume from another)")
    assert {path: path.read_bytes() for path in output.rglob("*") if path.is_file()} == before
