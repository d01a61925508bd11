"""End-to-end CLI runs on CUDA: every objective in bf16, --compile, exact resume, fine-tuning, encoding and
evaluation, the benchmarks, and two processes sharing one GPU. Marked `gpu`: deselected by default, skipped without
CUDA. On a machine with a GPU: `pytest -m gpu`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import kill_after_checkpoint, make_sentences

import retromae.training.loop
from retromae.cli import main

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = {
    "retromae enhanced": ["--objective", "retromae", "--decoding", "enhanced"],
    "retromae basic": ["--objective", "retromae", "--decoding", "basic", "--decoder-layers", "2"],
    "mlm": ["--objective", "mlm"],
    "seed": ["--objective", "seed"],
    "contrastive": ["--objective", "contrastive"],
    "retromae+contrastive": ["--objective", "retromae+contrastive"],
    "dupmae": ["--objective", "dupmae"],
    "condenser": ["--objective", "condenser"],
    "cocondenser": ["--objective", "cocondenser"],
    "contriever": ["--objective", "contriever", "--queue-size", "16"],
    "simcse": ["--objective", "simcse"],
}


def pretrain_args(model: Path, corpus: Path, output: Path, *extra: str) -> list[str]:
    return ["pretrain", "--model", str(model), "--corpus", str(corpus), "--output", str(output), "--max-steps", "6",
            "--batch-size", "4", "--max-length", "32", "--log-every", "1", "--save-every", "3",
            "--learning-rate", "1e-3", "--mixed-precision", "bf16", "--cache-dir", str(output.parent / "cache"),
            *extra]


def metrics(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture()
def devices_used(monkeypatch) -> list[str]:
    """The device type of every Trainer the test builds."""
    used: list[str] = []
    original = retromae.training.loop.Trainer.run

    def run(self):
        used.append(self.accelerator.device.type)
        original(self)

    monkeypatch.setattr(retromae.training.loop.Trainer, "run", run)
    return used


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_every_objective_pretrains_in_bf16_on_cuda(objective, tiny_model_dir, tiny_corpus, tmp_path, devices_used):
    output = tmp_path / "run"
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, output, *OBJECTIVES[objective])) == 0
    records = metrics(output)
    assert devices_used == ["cuda"]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all(math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in records)
    assert (output / "encoder" / "config.json").exists() and (output / "sentence-transformer").is_dir()


def test_compiled_pretraining_exports_the_plain_model(tiny_model_dir, tiny_corpus, tmp_path, devices_used):
    plain, compiled = tmp_path / "plain", tmp_path / "compiled"
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, plain)) == 0
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, compiled, "--compile")) == 0
    assert devices_used == ["cuda", "cuda"]
    assert all(math.isfinite(r["loss"]) for r in metrics(compiled))
    assert metrics(compiled)[0]["loss"] == pytest.approx(metrics(plain)[0]["loss"], rel=0.05)
    names = sorted(p.name for p in (plain / "encoder").iterdir())
    assert sorted(p.name for p in (compiled / "encoder").iterdir()) == names


def test_interrupted_bf16_run_resumes_on_the_same_trajectory(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, full)) == 0
    kill_after_checkpoint(monkeypatch, 3, lambda: main(pretrain_args(tiny_model_dir, tiny_corpus, interrupted)))
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, interrupted, "--resume")) == 0
    resumed, reference = metrics(interrupted), metrics(full)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    for ours, theirs in zip(resumed, reference, strict=True):
        for key in ("loss", "encoder_mlm", "decoder", "lr"):  # bf16 attention kernels may differ in the last bits
            assert ours[key] == pytest.approx(theirs[key], rel=1e-2), (ours["step"], key)


@pytest.fixture()
def beir(tmp_path) -> Path:
    """A BEIR folder of 48 documents; query i is the start of document i (24 train, 6 test)."""
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [" ".join(make_sentences(2, seed=i)) for i in range(48)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                                 for i, text in enumerate(docs)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": docs[i][:40]}) + "\n"
                                                  for i in range(30)))
    for split, ids in (("train", range(24)), ("test", range(24, 30))):
        rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in ids]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


def test_pretrain_finetune_encode_and_evaluate_on_cuda(tiny_model_dir, tiny_corpus, beir, tmp_path, devices_used):
    pretrained, tuned = tmp_path / "pretrained", tmp_path / "tuned"
    assert main(pretrain_args(tiny_model_dir, tiny_corpus, pretrained)) == 0
    assert main(["finetune", "--model", str(pretrained), "--data", str(beir), "--output", str(tuned),
                 "--batch-size", "4", "--max-steps", "4", "--query-max-length", "16", "--passage-max-length", "32",
                 "--mixed-precision", "bf16", "--negatives", "bm25", "--group-size", "2", "--log-every", "1"]) == 0
    assert devices_used == ["cuda", "cuda"]
    assert all(math.isfinite(r["loss"]) for r in metrics(tuned))
    assert main(["encode", "--model", str(tuned / "encoder"), "--corpus", str(beir / "corpus.jsonl"),
                 "--output", str(tmp_path / "vectors")]) == 0
    assert sorted((tmp_path / "vectors" / "ids.txt").read_text().split()) == sorted(f"d{i}" for i in range(48))
    assert main(["evaluate", "--model", str(tuned / "sentence-transformer"), "--data", str(beir), "--split", "test",
                 "--output", str(tmp_path / "eval.json")]) == 0
    assert 0 <= json.loads((tmp_path / "eval.json").read_text())["ndcg@10"] <= 1


def run_script(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    paths = [str(ROOT / "src"), str(ROOT / "benchmarks"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)


# A BM25 run in a child process: it says "searched" once its run is built, then holds on until its stdin closes,
# so that the parent measures the GPU memory of a process that did the whole search (bm25s imports jax when
# installed). The query and documents must share a word that is no stopword, or bm25s has nothing to index.
BM25_CHILD = ("import sys\n"
              "from retromae.retrieval.bm25 import bm25_search\n"
              "run = bm25_search({'d1': 'alpha beta', 'd2': 'gamma delta'}, {'q': 'alpha'}, show_progress=False)\n"
              "assert list(run['q'])[0] == 'd1', run\n"
              "print('searched', flush=True)\n"
              "sys.stdin.read()\n")


def test_a_retromae_process_leaves_the_gpu_to_others(tmp_path):
    """A BM25 run must not reserve GPU memory: measured from outside, while the child that searched still lives."""
    script = ("import torch, subprocess, sys\n"
              "free = torch.cuda.mem_get_info()[0]\n"
              f"child = subprocess.Popen([sys.executable, '-c', {BM25_CHILD!r}], stdin=subprocess.PIPE, "
              "stdout=subprocess.PIPE, text=True)\n"
              "said = child.stdout.readline().strip()\n"
              "used = free - torch.cuda.mem_get_info()[0]\n"
              "child.stdin.close()\n"
              "print(said or 'nothing', child.wait(), used)\n")
    done = run_script("-c", script)
    assert done.returncode == 0, done.stderr[-2000:]
    said, child_status, used = done.stdout.split()[-3:]
    assert (said, child_status) == ("searched", "0"), done.stderr[-2000:]  # the child searched and exited cleanly
    assert int(used) < 1 << 30  # jax's pre-allocation would take 75% of the GPU


@pytest.mark.skipif(not (ROOT / "benchmarks").is_dir(), reason="benchmarks/ not in this checkout")
def test_benchmarks_run_on_cuda():
    throughput = run_script(str(ROOT / "benchmarks" / "pretrain_throughput.py"), "--device", "cuda",
                            "--batch-size", "4", "--max-length", "64", "--rounds", "2", "--warmup", "1")
    assert throughput.returncode == 0, throughput.stderr[-3000:]
    assert "retromae enhanced" in throughput.stdout
    gpu = run_script(str(ROOT / "benchmarks" / "gpu_pretrain.py"), "--device", "cuda", "--layers", "2",
                     "--hidden", "128", "--batch-size", "8", "--max-length", "64", "--steps", "12", "--log-every",
                     "3", "--rounds", "3", "--warmup", "1", "--peak-tflops", "989")
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    assert "HF BertForMaskedLM loop" in gpu.stdout and "retromae enhanced" in gpu.stdout


# One process on the one GPU (NCCL refuses two ranks on one device): FULL_SHARD then shards over one rank, but the
# run goes through Accelerate's FSDP / DeepSpeed wrapping, sharded checkpoints, resume and export all the same.
SHARDED_CONFIGS = {
    "fsdp1": {"distributed_type": "FSDP", "fsdp_config": {
        "fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_use_orig_params": True, "fsdp_sync_module_states": True, "fsdp_offload_params": False}},
    "fsdp2": {"distributed_type": "FSDP", "fsdp_config": {
        "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_offload_params": False}},
}
DEEPSPEED_ZERO2 = {"distributed_type": "DEEPSPEED", "deepspeed_config": {
    "zero_stage": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0, "offload_optimizer_device": "none",
    "offload_param_device": "none", "zero3_init_flag": False}}


def accelerate_launch(tmp_path: Path, settings: dict) -> list[str]:
    """`accelerate launch` (less the interpreter) with a one-process config of `settings`."""
    import yaml

    config = tmp_path / "accelerate.yaml"
    config.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "num_machines": 1, "machine_rank": 0,
                                      "num_processes": 1, "mixed_precision": "bf16", "use_cpu": False, **settings}))
    return ["-m", "accelerate.commands.launch", "--config_file", str(config)]


@pytest.mark.parametrize("name", [*SHARDED_CONFIGS, "deepspeed-zero2"])
def test_sharded_training_resumes_on_the_same_trajectory_and_exports(name, tiny_model_dir, tiny_corpus, tmp_path):
    """`accelerate launch` with an FSDP or a DeepSpeed config: a run killed after its step-3 checkpoint (safetensors
    and JSON, the full state dicts gathered; before, DeepSpeed's checkpoints were refused) and resumed logs what an
    uninterrupted run logs, and its exported encoder and sentence-transformers model load."""
    if name.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    launch = accelerate_launch(tmp_path, {**SHARDED_CONFIGS, "deepspeed-zero2": DEEPSPEED_ZERO2}[name])
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    ran = run_script(*launch, "-m", "retromae", *pretrain_args(tiny_model_dir, tiny_corpus, full))
    assert ran.returncode == 0, ran.stderr[-3000:]
    killed = run_script(*launch, str(ROOT / "tests" / "launch_killed.py"), "3",
                        *pretrain_args(tiny_model_dir, tiny_corpus, interrupted))
    assert killed.returncode != 0 and (interrupted / "checkpoints" / "step-0000003").is_dir(), killed.stderr[-3000:]
    assert sorted(p.name for p in (interrupted / "checkpoints" / "step-0000003").iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "retromae-run.json", "rng-0.json", "state.json"]
    resumed = run_script(*launch, "-m", "retromae",
                         *pretrain_args(tiny_model_dir, tiny_corpus, interrupted, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for ours, theirs in zip(metrics(interrupted), metrics(full), strict=True):
        assert ours["step"] == theirs["step"]
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-2), ours["step"]
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    for run in (full, interrupted):
        encoder = AutoModel.from_pretrained(run / "encoder")
        reference = AutoModel.from_pretrained(tiny_model_dir)
        moved = [not torch.equal(a, b) for a, b in zip(encoder.parameters(), reference.parameters(), strict=False)]
        assert any(moved), "the export holds the initial weights"
        vectors = SentenceTransformer(str(run / "sentence-transformer"), device="cpu").encode(["alpha beta"])
        assert vectors.shape[-1] == encoder.config.hidden_size and bool(np.isfinite(vectors).all())


def test_the_default_vocabulary_loss_runs_unfused_on_cuda(tiny_model_dir):
    """`--vocabulary-loss auto` is chunked on the CPU and unfused on CUDA, where an H100 ran it fastest."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from retromae.objectives import create_objective

    model = AutoModelForMaskedLM.from_pretrained(tiny_model_dir)
    objective = create_objective("retromae", model, AutoTokenizer.from_pretrained(tiny_model_dir))
    assert objective.vocabulary.fused
    objective.cuda()
    assert not objective.vocabulary.fused and objective.compiled_modules()[1] is objective.lm_head
