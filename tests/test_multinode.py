"""Two nodes on one machine: `torchrun --nnodes 2 --nproc-per-node 1` started twice, meeting by a c10d rendezvous on
127.0.0.1 (gloo, CPU). Each node's process is its node's first (local rank 0) while only node 0's is the main
process; the checkpoints and the run folder must be written by the main process alone (users of peer toolkits
report checkpoint saving breaking on several nodes: FlagEmbedding #584, a staging folder removed by another node's
first process). A run killed after its step-2 checkpoint and resumed on two nodes must log the losses of an
uninterrupted two-node run, and export the same encoder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_metrics
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_nodes(*program: str) -> list[subprocess.CompletedProcess]:
    """Run `program` (a script and its arguments, or `-m module ...`) on two single-process nodes; each node's
    result, once both ended."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"two-nodes-{port}",
                "--max-restarts", "0"]
    nodes = [subprocess.Popen([*launcher, *program], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = []
    for node in nodes:
        stdout, stderr = node.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(node.args, node.returncode, stdout, stderr))
    return results


def pretrain_args(model: Path, corpus: Path, output: Path, *extra) -> list[str]:
    return [str(arg) for arg in ("pretrain", "--model", model, "--corpus", corpus, "--output", output,
                                 "--max-steps", 4, "--batch-size", 2, "--max-length", 32, "--log-every", 1,
                                 "--save-every", 2, "--keep-checkpoints", 2, "--learning-rate", "1e-3",
                                 "--cache-dir", output.parent / "cache", *extra)]


def losses(output: Path) -> list[tuple[int, float, int]]:
    return [(record["step"], record["loss"], record["tokens"]) for record in run_metrics(output)]


@pytest.mark.slow
def test_two_nodes_pretrain_checkpoint_resume_and_export(tiny_model_dir, tiny_corpus, tmp_path):
    whole = tmp_path / "whole"
    for node in two_nodes("-m", "retromae", *pretrain_args(tiny_model_dir, tiny_corpus, whole)):
        assert node.returncode == 0, node.stderr[-3000:]
    assert [step for step, _, _ in losses(whole)] == [1, 2, 3, 4]
    assert sorted(p.name for p in (whole / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]
    assert {p.name for p in (whole / "checkpoints" / "step-0000004").iterdir()} == {
        "model.safetensors", "optimizer.safetensors", "state.json", "rng-0.json", "rng-1.json", "retromae-run.json"}

    killed = tmp_path / "killed"
    nodes = two_nodes(str(ROOT / "tests" / "launch_killed.py"), "2",
                      *pretrain_args(tiny_model_dir, tiny_corpus, killed))
    assert all(node.returncode != 0 for node in nodes)  # every process stopped after the step-2 checkpoint
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step-0000002"]  # no staging left over

    nodes = two_nodes("-m", "retromae", *pretrain_args(tiny_model_dir, tiny_corpus, killed, "--resume"))
    for node in nodes:
        assert node.returncode == 0, node.stderr[-3000:]
    assert "resumed from" in "".join(node.stdout for node in nodes)
    resumed, expected = losses(killed), losses(whole)
    assert [(step, tokens) for step, _, tokens in resumed] == [(step, tokens) for step, _, tokens in expected]
    for (_, loss, _), (_, reference, _) in zip(resumed, expected, strict=True):
        assert loss == pytest.approx(reference, rel=1e-6)
    exported, reference = (load_file(str(run / "encoder" / "model.safetensors")) for run in (killed, whole))
    assert exported.keys() == reference.keys()
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, reference[name], rtol=1e-5, atol=1e-6)
