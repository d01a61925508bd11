"""DeepSpeed through Accelerate, on the CPU in one process (Accelerate starts DeepSpeed for one CPU process, not for
several). ZeRO-3 here partitions every weight (`stage3_param_persistence_threshold` 0), as on a GPU at BERT's size:
pre-training, fine-tuning and the reranker follow the trajectory of the same run without DeepSpeed and export the
whole weights (before: pre-training failed after training, fine-tuning before it, and the reranker wrote a model
with no weights). The work that runs the model on process 0 alone is refused before training; checkpoints are our
own files (the state gathered by name, as under FSDP), and a killed run resumes on its trajectory; under bf16 the
exports hold the optimiser's float32 master weights. Those runs are slow tests (`make test-slow`; DeepSpeed compiles
a CPU communication op the first time, about a minute) and are skipped where DeepSpeed is not installed (`make
install` installs it); the options' translation into the DeepSpeed config is checked in the default run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType
from conftest import make_sentences, run_metrics, tiny_beir
from safetensors.torch import load_file

from retromae.cli import main
from retromae.runtime.options import ConfigError
from retromae.training.config import TrainingConfig
from retromae.training.setup import _configure_deepspeed, check_unsharded, shards_parameters

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--mixed-precision", "no", "--log-every", "1", "--save-every", "0"]


def accelerate_config(folder: Path, stage: int, bf16: bool = False) -> Path:
    """A one-process Accelerate config of a DeepSpeed JSON config at ZeRO `stage`, every weight partitioned, the
    engine's model in bf16 when asked."""
    name = f"zero{stage}{'-bf16' if bf16 else ''}"
    deepspeed = folder / f"{name}.json"
    deepspeed.write_text(json.dumps({
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}, "bf16": {"enabled": bf16},
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}))
    config = folder / f"accelerate-{name}.yaml"
    config.write_text("\n".join([
        "compute_environment: LOCAL_MACHINE", "num_machines: 1", "machine_rank: 0", "num_processes: 1",
        "use_cpu: true", "distributed_type: DEEPSPEED", "deepspeed_config:",
        f"  deepspeed_config_file: {deepspeed}", "  zero3_init_flag: false", ""]))
    return config


def under_deepspeed(tmp_path: Path, stage: int, *args, bf16: bool = False) -> subprocess.CompletedProcess:
    """`accelerate launch -m retromae ARGS` under ZeRO `stage`."""
    pytest.importorskip("deepspeed")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(accelerate_config(tmp_path, stage, bf16)), "-m", "retromae", *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def assert_same_as_plain(tmp_path: Path, stage: int, args: list, name: str, weights: str) -> None:
    """`retromae ARGS` under ZeRO `stage` and without DeepSpeed log the same losses at every step and export the
    same weights (`weights`, a file of both output folders, `name` and `name`-plain)."""
    ran = under_deepspeed(tmp_path, stage, *args, "--output", tmp_path / name)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert main([*map(str, args), "--output", str(tmp_path / f"{name}-plain")]) == 0
    for step, other in zip(run_metrics(tmp_path / name), run_metrics(tmp_path / f"{name}-plain"), strict=True):
        assert step["loss"] == pytest.approx(other["loss"], rel=1e-4), step["step"]
    exported, expected = load_file(tmp_path / name / weights), load_file(tmp_path / f"{name}-plain" / weights)
    assert exported.keys() == expected.keys()
    for key, tensor in expected.items():
        assert exported[key].shape == tensor.shape, key  # before: ZeRO-3 wrote empty tensors
        torch.testing.assert_close(exported[key], tensor, atol=1e-4, rtol=1e-3, msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_pretraining_follows_the_plain_run_and_exports_whole_weights(stage, tiny_model_dir, tiny_corpus, tmp_path):
    args = ["pretrain", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--max-steps", 3, "--batch-size", 4,
            "--max-length", 32, "--cache-dir", tmp_path / "cache", *COMMON]
    assert_same_as_plain(tmp_path, stage, args, "pretrained", "encoder/model.safetensors")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tmp_path / "pretrained" / "sentence-transformer"), device="cpu")
    vectors = model.encode(["a b"])
    assert vectors.shape == (1, 32) and bool(torch.isfinite(torch.from_numpy(vectors)).all())


@pytest.mark.slow
def test_zero3_finetuning_and_reranker_training_export_whole_weights(tiny_model_dir, tmp_path):
    tiny_beir(tmp_path / "beir")
    finetune = ["finetune", "--model", tiny_model_dir, "--data", tmp_path / "beir", "--max-steps", 3,
                "--batch-size", 4, *COMMON]
    assert_same_as_plain(tmp_path, 3, finetune, "finetuned", "encoder/model.safetensors")
    texts = make_sentences(24, seed=3)
    data = tmp_path / "groups.jsonl"
    data.write_text("".join(json.dumps({"query": " ".join(text.split()[:3]), "pos": [text],
                                        "neg": [texts[(i + 1) % 24]]}) + "\n" for i, text in enumerate(texts)))
    reranker = ["train-reranker", "--model", tiny_model_dir, "--data", data, "--max-steps", 3, "--batch-size", 2,
                "--group-size", 2, *COMMON]
    assert_same_as_plain(tmp_path, 3, reranker, "reranker", "reranker/model.safetensors")


@pytest.mark.slow
def test_bf16_exports_hold_the_float32_master_weights(tiny_model_dir, tiny_corpus, tmp_path):
    """Under bf16 the engine holds the model in bf16 and the optimiser the float32 masters: the exports are the
    masters (before: the encoder was written in bf16). The fine-tuned pooler is frozen: it has no master copy."""
    tiny_beir(tmp_path / "beir")
    runs = {"zero2": (2, ["pretrain", "--corpus", tiny_corpus, "--max-length", 32, "--cache-dir", tmp_path / "c"]),
            "zero3": (3, ["finetune", "--data", tmp_path / "beir"])}
    for name, (stage, args) in runs.items():
        ran = under_deepspeed(tmp_path, stage, *args, "--model", tiny_model_dir, "--output", tmp_path / name,
                              "--max-steps", 3, "--batch-size", 4, "--log-every", 1, "--save-every", 0,
                              "--mixed-precision", "bf16", bf16=True)
        assert ran.returncode == 0, ran.stderr[-3000:]
        weights = load_file(tmp_path / name / "encoder" / "model.safetensors")
        finer = [key for key, tensor in weights.items() if (tensor != tensor.bfloat16().float()).any()]
        assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
        assert set(weights) - set(finer) <= {"pooler.dense.weight", "pooler.dense.bias"}, name


def launch_killed(tmp_path: Path, stage: int, step: int, *args) -> subprocess.CompletedProcess:
    """`accelerate launch tests/launch_killed.py STEP ARGS` under ZeRO `stage`: killed after its step-STEP
    checkpoint."""
    pytest.importorskip("deepspeed")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(accelerate_config(tmp_path, stage)), str(ROOT / "tests" / "launch_killed.py"), str(step),
               *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_a_killed_deepspeed_run_resumes_on_the_same_trajectory(stage, tiny_model_dir, tiny_corpus, tmp_path):
    """Under ZeRO-2 and ZeRO-3 a run checkpoints into our own files (safetensors and JSON: the weights and the
    optimiser's moments gathered whole, by name; no file of DeepSpeed's, which are pickles) and, killed after its
    step-2 checkpoint, `--resume` logs the uninterrupted run's losses and exports its weights (before: both refused)."""
    args = ["pretrain", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--max-steps", 4, "--batch-size", 4,
            "--max-length", 32, "--cache-dir", tmp_path / "cache", "--mixed-precision", "no", "--log-every", 1,
            "--save-every", 2]
    whole = under_deepspeed(tmp_path, stage, *args, "--output", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = launch_killed(tmp_path, stage, 2, *args, "--output", tmp_path / "killed")
    assert killed.returncode != 0 and not (tmp_path / "killed" / "encoder").exists(), killed.stderr[-3000:]
    checkpoint = tmp_path / "killed" / "checkpoints" / "step-0000002"
    assert sorted(path.name for path in checkpoint.iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "retromae-run.json", "rng-0.json", "state.json"]
    moments = load_file(checkpoint / "optimizer.safetensors")
    weights = load_file(checkpoint / "model.safetensors")
    for name in ("encoder.bert.embeddings.word_embeddings.weight", "encoder.bert.encoder.layer.1.output.dense.weight"):
        assert moments[f"{name}/exp_avg"].shape == weights[name].shape and moments[f"{name}/exp_avg"].abs().sum() > 0
    resumed = under_deepspeed(tmp_path, stage, *args, "--output", tmp_path / "killed", "--resume")
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout + resumed.stderr, resumed.stderr[-3000:]
    for step, other in zip(run_metrics(tmp_path / "killed"), run_metrics(tmp_path / "whole"), strict=True):
        assert step["step"] == other["step"] and step["loss"] == pytest.approx(other["loss"], rel=1e-5), step
    exported = load_file(tmp_path / "killed" / "encoder" / "model.safetensors")
    for key, tensor in load_file(tmp_path / "whole" / "encoder" / "model.safetensors").items():
        torch.testing.assert_close(exported[key], tensor, atol=1e-6, rtol=1e-5, msg=key)


@pytest.mark.slow
def test_probes_under_zero3_are_refused_before_training(tiny_model_dir, tiny_corpus, tmp_path):
    tiny_beir(tmp_path / "beir")
    args = ["pretrain", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--max-steps", 2, "--batch-size", 2,
            "--max-length", 32, "--cache-dir", tmp_path / "cache", "--mixed-precision", "no"]
    probing = under_deepspeed(tmp_path, 3, *args, "--output", tmp_path / "probing", "--save-every", 0,
                              "--probe", tmp_path / "beir", "--log-every", 1, "--probe-every", 1)
    assert probing.returncode != 0 and "--probe/--probe-sts: runs the model on process 0 alone" in probing.stderr
    assert not (tmp_path / "probing" / "metrics.jsonl").exists()


def fake_accelerator(kind: DistributedType, stage: int | None = None, **settings) -> SimpleNamespace:
    plugin = None if stage is None else SimpleNamespace(zero_stage=stage, deepspeed_config=dict(settings))
    return SimpleNamespace(state=SimpleNamespace(distributed_type=kind, deepspeed_plugin=plugin))


def test_sharding_is_fsdp_or_zero3_and_refuses_work_on_process_zero_alone():
    for accelerator, sharded in ((fake_accelerator(DistributedType.FSDP), True),
                                 (fake_accelerator(DistributedType.DEEPSPEED, 3), True),
                                 (fake_accelerator(DistributedType.DEEPSPEED, 2), False),
                                 (fake_accelerator(DistributedType.MULTI_GPU), False)):
        assert shards_parameters(accelerator) is sharded
        if sharded:
            with pytest.raises(ConfigError, match="--refresh-negatives-every: runs the model on process 0 alone"):
                check_unsharded(accelerator, "--refresh-negatives-every", "mine once")
        else:
            check_unsharded(accelerator, "--refresh-negatives-every", "mine once")


def test_the_deepspeed_config_takes_the_options_and_refuses_other_numbers():
    """Its micro-batch, accumulation and clipping (the engine clips: a config without it trained unclipped), and
    under ZeRO-3 the gathering of whole weights that the export needs."""
    options = TrainingConfig(output="unused", batch_size=8, gradient_accumulation_steps=2, max_grad_norm=0.5)
    accelerator = fake_accelerator(DistributedType.DEEPSPEED, 3, gradient_accumulation_steps="auto")
    _configure_deepspeed(accelerator, options)
    assert accelerator.state.deepspeed_plugin.deepspeed_config == {
        "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
        "zero_optimization": {"stage3_gather_16bit_weights_on_model_save": True}}
    for key, value, option in (("gradient_accumulation_steps", 4, "--gradient-accumulation-steps 2"),
                               ("gradient_clipping", 1.0, "--max-grad-norm 0.5")):
        with pytest.raises(ConfigError, match=f"{option}: the DeepSpeed config gives {key} {value}"):
            _configure_deepspeed(fake_accelerator(DistributedType.DEEPSPEED, 2, **{key: value}), options)
