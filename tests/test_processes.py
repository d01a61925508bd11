"""Several processes on one CPU machine: real 2-process runs of pretrain, finetune and encode (torchrun and
`accelerate launch --multi_gpu`) in which both processes must have worked, and the launches that are refused because
they would start one process or leave each process alone with the whole work (issue 21, item 3)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sentences, run_metrics, tiny_beir

from retromae.cli import main
from retromae.runtime.processes import (
    LAUNCHER_NUMBERS,
    LaunchError,
    check_environment,
    check_launch,
    check_process_count,
    launched_processes,
    local_processes,
)

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]


def launch(launcher: list[str], *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [*launcher, "-m", "retromae", *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_the_launchers_environment_gives_the_process_count():
    assert launched_processes({}) == 1
    assert launched_processes({"WORLD_SIZE": "2"}) == 2  # torchrun, accelerate launch --multi_gpu
    assert launched_processes({"OMPI_COMM_WORLD_SIZE": "4"}) == 4  # mpirun
    check_launch("pretrain", True, {"ACCELERATE_USE_CPU": "True"})  # accelerate launch of one process
    check_launch("pretrain", True, {"ACCELERATE_USE_CPU": "True", "MASTER_PORT": "29500", "PMI_SIZE": "2"})  # mpirun
    with pytest.raises(LaunchError, match="started only this one .*`accelerate launch --multi_gpu"):
        check_launch("pretrain", True, {"ACCELERATE_USE_CPU": "True", "MASTER_PORT": "29500"})
    check_launch("evaluate", False, {})
    with pytest.raises(LaunchError, match="`retromae evaluate` runs in one process, and 2 would each do its whole"):
        check_launch("evaluate", False, {"WORLD_SIZE": "2"})
    check_process_count(1)
    with pytest.raises(LaunchError, match="sees 2: each would do the whole work alone"):
        check_process_count(2)


WHOLE_LAUNCH = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500"}


def not_whole(name: str) -> list[str]:
    """Values no launcher variable takes (`name`'s own lowest bound less one among them)."""
    low, high, _ = LAUNCHER_NUMBERS[name]
    return ["abc", "", " ", "-1", "1.0", "1e3", "\u00b2", "\u0662", "9" * 30, str(low - 1),
            *([str(high + 1)] if high is not None else [])]


@pytest.mark.parametrize("name", sorted(LAUNCHER_NUMBERS))
def test_every_launcher_number_is_a_whole_number_in_its_domain(name):
    """`LOCAL_WORLD_SIZE=0 retromae finetune` ended in ZeroDivisionError, `=abc` and `=` in int()'s ValueError, `=-1`
    in a "-20.2 GB" refusal: each variable of a launch that is a number is read by one reader and refused, in one
    line naming it and its value, before Accelerate (whose bare int() would raise) or our memory budget reads it."""
    for value in not_whole(name):
        env = {**WHOLE_LAUNCH, name: value}
        with pytest.raises(LaunchError) as refused:
            check_environment(env)
        message = str(refused.value)
        assert message.startswith(f"{name}=") and "whole number" in message and "\n" not in message, message
        assert len(message) < 400
    check_environment({**WHOLE_LAUNCH, name: f" {WHOLE_LAUNCH.get(name, '1')} "})  # spaces around digits: taken


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "RANK"])
def test_a_launch_of_several_processes_is_whole_before_accelerate_reads_it(missing):
    """`WORLD_SIZE=2 retromae pretrain` without MASTER_ADDR ended in Accelerate's traceback: a launch of several
    processes names what it lacks, and a rank beyond the launch's size, in one line."""
    check_environment(WHOLE_LAUNCH)
    env = {key: value for key, value in WHOLE_LAUNCH.items() if key != missing}
    with pytest.raises(LaunchError, match=f"^WORLD_SIZE=4 without {missing}: "):
        check_launch("pretrain", True, env)
    check_launch("evaluate", False, {})  # a command in one process, without a launcher: nothing asked
    for name, value in (("RANK", "4"), ("LOCAL_RANK", "2"), ("LOCAL_WORLD_SIZE", "5")):
        with pytest.raises(LaunchError, match=f"^{name}={value}: "):
            check_environment({**WHOLE_LAUNCH, name: value})


def test_local_world_size_is_read_by_the_one_reader(monkeypatch, tmp_path, capsys):
    """The memory budget's share of the machine: LOCAL_WORLD_SIZE through `local_processes`, and the command
    refuses its audit values in one line (exit 2), before torch is imported."""
    assert local_processes({}) == 1 and local_processes(WHOLE_LAUNCH) == 2
    import torch

    from retromae.finetuning.memory import memory_budget

    for value in ("0", "abc", "", "-1", "99"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        with pytest.raises(LaunchError, match="^LOCAL_WORLD_SIZE="):
            memory_budget(torch.device("cpu"))
        assert main(["finetune", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--output",
                     str(tmp_path / "ft")]) == 2
        assert capsys.readouterr().err.startswith("retromae: error: LOCAL_WORLD_SIZE=")
    assert not (tmp_path / "ft").exists()


def test_accelerate_cpu_launch_of_two_processes_is_refused(tiny_model_dir, tiny_corpus, tmp_path):
    """`accelerate launch --cpu --num_processes 2` starts ONE process: before, it trained alone, as a single run."""
    result = launch([*ACCELERATE, "--cpu"], "pretrain", "--model", tiny_model_dir, "--corpus", tiny_corpus,
                    "--output", tmp_path / "out", "--max-steps", 1, "--batch-size", 2, "--max-length", 32,
                    "--cache-dir", tmp_path / "cache")
    assert result.returncode != 0  # retromae exits 2; accelerate's launcher reports that as its own failure
    # ours once (accelerate 1.16 quotes the child's stderr again in its traceback: `RuntimeError: retromae: error:`)
    ours = [line for line in result.stderr.splitlines() if line.startswith("retromae: error:")]
    assert len(ours) == 1 and "--nproc_per_node N" in ours[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_pretrain_on_two_processes_trains_both(tiny_model_dir, tiny_corpus, tmp_path):
    steps, batch, length = 3, 2, 32
    result = launch(TORCHRUN, "pretrain", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--output",
                    tmp_path / "ddp", "--max-steps", steps, "--batch-size", batch, "--max-length", length,
                    "--log-every", 1, "--cache-dir", tmp_path / "cache", "--freeze-encoder-steps", 1)
    assert result.returncode == 0, result.stderr[-3000:]
    records = run_metrics(tmp_path / "ddp")
    assert [record["step"] for record in records] == [1, 2, 3]
    assert records[-1]["tokens"] > steps * batch * length  # more than one process can read in 3 steps
    assert result.stdout.count("done in") == 1  # the closing list of outputs, once (before: once per process)
    assert (tmp_path / "ddp" / "encoder" / "config.json").exists()


@pytest.mark.slow
def test_finetune_on_two_processes_trains_both(tiny_model_dir, tmp_path):
    tiny_beir(tmp_path / "beir")
    steps, batch, query, passage = 2, 2, 4, 6  # every query and passage is longer: each is cut to its maximum
    result = launch([*ACCELERATE, "--multi_gpu"], "finetune", "--model", tiny_model_dir, "--data",
                    tmp_path / "beir", "--output", tmp_path / "ft", "--max-steps", steps, "--batch-size", batch,
                    "--query-max-length", query, "--passage-max-length", passage, "--log-every", 1,
                    "--save-every", 0)
    assert result.returncode == 0, result.stderr[-3000:]
    assert run_metrics(tmp_path / "ft")[-1]["tokens"] == steps * 2 * batch * (query + passage)  # 2 processes
    assert result.stdout.count("done in") == 1


@pytest.mark.slow
def test_encode_on_two_processes_shares_the_shards(tiny_model_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                              for i, text in enumerate(make_sentences(30, seed=11))))
    command = ["encode", "--model", tiny_model_dir, "--corpus", corpus, "--shard-size", 4]
    result = launch(TORCHRUN, *command, "--output", tmp_path / "two")
    assert result.returncode == 0, result.stderr[-3000:]  # before: FileNotFoundError shard-00002.npy, 3 times in 3
    assert "(process 0)" in result.stderr and "(process 1)" in result.stderr  # each encoded its own shards
    assert main([str(arg) for arg in (*command, "--no-progress", "--output", tmp_path / "one")]) == 0
    two, one = (np.load(tmp_path / name / "embeddings.npy") for name in ("two", "one"))
    np.testing.assert_allclose(two, one, atol=1e-6)
    assert (tmp_path / "two" / "ids.txt").read_text() == (tmp_path / "one" / "ids.txt").read_text()
