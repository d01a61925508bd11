"""The training loop's accounting: loss sums kept on the device, read once per log line, and logging the same
values as the per-step Python-float accounting it replaced (same seed, same metrics.jsonl)."""

from __future__ import annotations

import json
import sys
import types
from datetime import timedelta

import pytest
import torch
from torch import nn

import retromae.runtime.precision
import retromae.training.divergence
import retromae.training.loop
import retromae.training.metrics_log
import retromae.training.setup
from retromae.runtime.options import ConfigError
from retromae.training import (
    ResumableBatchSampler,
    Trainer,
    TrainingConfig,
    make_accelerator,
    mask_generator,
    resolve_mixed_precision,
    seed_everything,
    use_tensor_cores,
)
from retromae.training.loop import data_loader, loader_workers
from retromae.training.metrics_log import LossWindow, reduce_window
from retromae.training.optimizer import build_optimizer, build_scheduler


class NoisyRegression(nn.Module):
    """A tiny model whose loss depends on the micro-batch's generator, like the masking objectives'."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
        noisy = batch["x"] + torch.rand(batch["x"].shape, generator=generator, device=batch["x"].device)  # (B, 4)
        error = (self.head(torch.tanh(self.body(noisy))).squeeze(-1) - batch["y"]).pow(2).mean()
        penalty = self.body.weight.pow(2).sum() * 1e-3
        return {"loss": error + penalty, "error": error.detach(), "penalty": penalty.detach()}


def dataset() -> list[tuple[torch.Tensor, torch.Tensor]]:
    inputs = torch.randn(40, 4, generator=torch.Generator().manual_seed(3))
    return [(row, row.sum()) for row in inputs]


def collate(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    x = torch.stack([x for x, _ in rows])  # (B, 4)
    return {"x": x, "y": torch.stack([y for _, y in rows]), "attention_mask": torch.ones(len(rows), 3)}


def settings(tmp_path, **overrides) -> TrainingConfig:
    (tmp_path / "run").mkdir(exist_ok=True)
    values = dict(output=str(tmp_path / "run"), max_steps=7, batch_size=4, gradient_accumulation_steps=3,
                  learning_rate=0.05, warmup_ratio=0.2, log_every=3, save_every=0, seed=11)
    values.update(overrides)
    return TrainingConfig(**values)


def reference_records(config: TrainingConfig) -> list[dict[str, float]]:
    """The loss columns of metrics.jsonl by the accounting the loop used before: a Python float per component and
    micro-batch, summed in Python, averaged per window and rounded to float32 (its old reduce tensor)."""
    seed_everything(config.seed)
    model, data = NoisyRegression(), dataset()
    optimizer = build_optimizer(model, config, fused=True)  # as the loop builds it on the CPU
    scheduler = build_scheduler(optimizer, config)
    batches = iter(ResumableBatchSampler(len(data), config.batch_size, config.seed))
    records, window, steps, micro = [], {}, 0, 0
    for step in range(1, config.max_steps + 1):
        for _ in range(config.gradient_accumulation_steps):
            losses = model(collate([data[i] for i in next(batches)]), mask_generator(config.seed, 0, micro, "cpu"))
            micro += 1
            (losses["loss"] / config.gradient_accumulation_steps).backward()
            for name, value in losses.items():
                window[name] = window.get(name, 0.0) + float(value.detach()) / config.gradient_accumulation_steps
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        if step % config.log_every == 0 or step == config.max_steps:
            as_float32 = {name: torch.tensor(total / steps).item() for name, total in window.items()}
            records.append({"step": step, **as_float32})
            window, steps = {}, 0
    return records


def logged(tmp_path, config: TrainingConfig) -> list[dict[str, float]]:
    seed_everything(config.seed)
    Trainer(NoisyRegression(), dataset(), collate, config).run()
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_logged_losses_equal_the_per_step_python_accounting(tmp_path):
    config = settings(tmp_path)
    records = logged(tmp_path, config)
    expected = reference_records(settings(tmp_path))
    assert [{key: record[key] for key in ("step", "loss", "error", "penalty")} for record in records] == expected


def test_tokens_per_second_counts_every_micro_batch(tmp_path):
    records = logged(tmp_path, settings(tmp_path))
    assert [record["step"] for record in records] == [3, 6, 7]
    assert all(record["tokens_per_s"] > 0 for record in records)


def test_window_sums_stay_device_tensors_in_float64():
    window = LossWindow()
    window.add({"loss": torch.tensor(1.5, dtype=torch.float64)}, 10)
    window.add({"loss": torch.tensor(0.25, dtype=torch.float64)}, 6)
    assert isinstance(window.totals["loss"], torch.Tensor) and window.totals["loss"].dtype == torch.float64
    assert window.totals["loss"].item() == 1.75 and window.steps == 2 and window.tokens == 16


HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")
LOOP_FILES = {retromae.training.loop.__file__, retromae.training.metrics_log.__file__,
              retromae.training.divergence.__file__}


@pytest.fixture()
def host_reads_by_the_loop(monkeypatch) -> list[str]:
    """Every read of a tensor's value into Python made by the loop itself (its modules: `Trainer`, `LossWindow`, the
    record and the divergence checks; not the sampler's host-side index lists), as 'method@function'."""
    reads: list[str] = []
    for method in HOST_READS:
        original = getattr(torch.Tensor, method)

        def spy(tensor, *args, _original=original, _method=method):
            caller = sys._getframe(1).f_code
            if caller.co_filename in LOOP_FILES:
                reads.append(f"{_method}@{caller.co_name}")
            return _original(tensor, *args)

        monkeypatch.setattr(torch.Tensor, method, spy)
    return reads


def test_ordinary_steps_read_nothing_back_from_the_device(tmp_path, host_reads_by_the_loop):
    config = settings(tmp_path, max_steps=6, log_every=3)
    seed_everything(config.seed)
    Trainer(NoisyRegression(), dataset(), collate, config, count_tokens=lambda batch: len(batch["x"]) * 3).run()
    per_log_line = ["tolist@reduce_window", "item@reduced_tokens"]  # the loss means, then the exact token count
    finite_weights = ["item@nonfinite_weights"]  # once before each checkpoint (none here) and at the end
    assert host_reads_by_the_loop == per_log_line * 2 + finite_weights  # none per step


def test_loader_workers_default_to_none_on_cpu_and_honour_the_option(tmp_path):
    trainer = Trainer(NoisyRegression(), dataset(), collate, settings(tmp_path))
    assert loader_workers(trainer.config, trainer.accelerator.device, has_step_hook=False) == 0
    assert not data_loader(trainer).pin_memory
    trainer.config.num_workers = 2
    assert loader_workers(trainer.config, trainer.accelerator.device, has_step_hook=False) == 2


def test_token_counts_stay_exact_past_two_to_the_24(tmp_path):
    """A window of 2^24 + 1 tokens (about 33k blocks of 512): float32 would log 2^24."""
    trainer = Trainer(NoisyRegression(), dataset(), collate, settings(tmp_path))
    window = LossWindow()
    window.add({"loss": torch.tensor(1.0, dtype=torch.float64)}, 2**24 + 1)
    record, tokens = reduce_window(window, trainer.accelerator, trainer.optimizer, 1, separate_heads=False)
    assert tokens == 2**24 + 1 and record["tokens_per_s"] > 2**24


def test_workers_start_by_forkserver_once_jax_is_loaded(tmp_path, monkeypatch):
    trainer = Trainer(NoisyRegression(), dataset(), collate, settings(tmp_path, num_workers=1))
    assert data_loader(trainer).multiprocessing_context is None  # the platform's default (fork on Linux)
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    assert data_loader(trainer).multiprocessing_context.get_start_method() == "forkserver"


def test_processes_wait_for_rank_zero_work_past_nccl_default(tmp_path):
    accelerator = make_accelerator(settings(tmp_path, distributed_timeout=180))
    assert accelerator.init_handler.timeout == timedelta(minutes=180)
    assert make_accelerator(settings(tmp_path)).init_handler.timeout == timedelta(hours=2)


def test_mixed_precision_defaults_to_bf16_on_gpus_that_have_it(monkeypatch):
    assert TrainingConfig(output="x").mixed_precision == "auto"
    assert resolve_mixed_precision("auto") == "no"  # this CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_mixed_precision("auto") == "bf16"
    assert resolve_mixed_precision("no") == "no" and resolve_mixed_precision("fp16") == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert resolve_mixed_precision("auto") == "no"  # a V100 or T4: fp32 unless told fp16


def test_on_a_cpu_fp16_is_refused_and_bf16_follows_the_cpu(monkeypatch):
    """Accelerate has no fp16 autocast on a CPU (it would train in fp32 without a word): refused in one line.
    bf16 runs where asked; auto picks it where `cpu_features.auto_bf16` says (AMX, or $RETROMAE_CPU_BF16)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="^--mixed-precision fp16: not on a CPU.*use bf16 .* or no$"):
        resolve_mixed_precision("fp16")
    assert resolve_mixed_precision("bf16") == "bf16" and resolve_mixed_precision("no") == "no"
    for pays, expected in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(retromae.runtime.precision, "auto_bf16", lambda pays=pays: pays)
        assert resolve_mixed_precision("auto") == expected


def test_tf32_matmuls_on_cuda_only():
    before = torch.get_float32_matmul_precision()
    try:
        use_tensor_cores(torch.device("cpu"))
        assert torch.get_float32_matmul_precision() == before == "highest"
        use_tensor_cores(torch.device("cuda"))
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


class Lengths(list):
    """The regression rows, with a length per example as a token store's blocks have."""

    def lengths(self):
        import numpy as np

        return np.arange(1, len(self) + 1)


def test_batches_are_grouped_by_length_where_the_data_has_lengths(tmp_path):
    grouped = data_loader(Trainer(NoisyRegression(), Lengths(dataset()), collate, settings(tmp_path)))
    assert grouped.batch_sampler.lengths is not None
    plain = Trainer(NoisyRegression(), Lengths(dataset()), collate, settings(tmp_path, group_by_length=False))
    assert data_loader(plain).batch_sampler.lengths is None
    without = Trainer(NoisyRegression(), dataset(), collate, settings(tmp_path))  # a plain list: no lengths
    assert data_loader(without).batch_sampler.lengths is None
