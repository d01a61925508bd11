"""The one training loop, on Accelerate, shared by pre-training, fine-tuning, adaptation and the reranker.

Owns `Trainer`: optimiser steps with gradient accumulation and clipping, per-step mask generators, the data
position (the order itself: `retromae.data.batch_sampler`; workers: `retromae.data.workers`), when a step is logged
and checkpointed, the hooks a command adds (probes, refreshed negatives), stopping a run whose loss or weights turn
NaN or infinite (read where the loop reads the device anyway: the losses at each logged step, the weights before
each checkpoint and at the end, so nothing diverged is checkpointed or exported), and the progress bar and
end-of-run summary (`retromae.runtime.console`). What it stands on, one module each: `setup` (the Accelerator,
precision, distribution, the start of a run), `optimizer` (AdamW and the schedule), `checkpoints` (saving,
listing, resuming), `metrics_log` (`metrics.jsonl` and the record of a window of steps), `divergence` (the words
and the error of a stop). Distribution (DDP through `accelerate launch` or `torchrun`; FSDP/DeepSpeed through an
Accelerate config) comes from Accelerate. Does not own models, losses or data formats: the model's
forward(batch, generator) returns a dict of named losses, "loss" the one to optimise.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from retromae.data.batch_sampler import ResumableBatchSampler
from retromae.data.workers import started_workers, worker_context
from retromae.runtime.console import TrainingSummary, progress, say
from retromae.runtime.errors import NonFiniteError
from retromae.runtime.io import writing
from retromae.runtime.options import save_config
from retromae.runtime.run_folder import mark_started, run_identity
from retromae.training.checkpoints import check_room, checkpoint_path, latest_checkpoint, resume_from, save_checkpoint
from retromae.training.config import TrainingConfig
from retromae.training.divergence import diverged, nonfinite_losses, nonfinite_weights
from retromae.training.metrics_log import METRICS_FILE, LossWindow, MetricsLog, RunLog, reduce_window
from retromae.training.optimizer import drop_body_gradients, resume_schedule
from retromae.training.setup import make_accelerator, prepare
from retromae.training.trackers import start_reporter


class TrainState:
    """Counters saved with every checkpoint: optimiser steps done, micro-batches consumed per process, and tokens
    consumed by all processes up to the last logged step (every checkpointed step is a logged one)."""

    def __init__(self) -> None:
        self.step = 0
        self.micro_batches = 0
        self.tokens = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "micro_batches": self.micro_batches, "tokens": self.tokens}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.micro_batches, self.tokens = state["step"], state["micro_batches"], state["tokens"]


def mask_generator(seed: int, rank: int, micro_batch: int, device: torch.device) -> torch.Generator:
    """The generator for one micro-batch's masks: a pure function of (seed, rank, micro-batch).

    Resuming therefore needs no generator state, on any number of processes.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed((seed * 1_000_003 + rank * 7_919 + micro_batch) % (2**63))
    return generator


class Trainer:
    """Runs `config.max_steps` optimiser steps of `model` over `dataset`, checkpointing and logging as it goes.

    `batch_sampler(rank, world_size, start)` replaces `ResumableBatchSampler`: this process's micro-batches of keys
    from micro-batch `start` on, a pure function of its arguments and the seed (resuming stays exact). `on_step(self)`
    runs after every step, logged and not yet checkpointed (refreshed negatives). `log_extra(self)` runs on every
    process before the first step of a fresh run (a non-empty result is a record of step 0) and at every logged step;
    what it returns joins the record (probes; their time outside tokens_per_s). `description` names the run on its
    progress bar and summary ("pre-training RetroMAE (200 steps)")."""

    def __init__(self, model: nn.Module, dataset: Dataset, collate: Callable, config: TrainingConfig,
                 count_tokens: Callable[[dict], int] | None = None, accelerator: Accelerator | None = None,
                 batch_sampler: Callable[[int, int, int], Iterable[list]] | None = None,
                 on_step: Callable[[Trainer], None] | None = None,
                 log_extra: Callable[[Trainer], dict[str, float]] | None = None, description: str = "training"):
        self.config = config
        self.batch_sampler, self.on_step, self.log_extra = batch_sampler, on_step, log_extra
        self.output = Path(config.output)
        self.accelerator = accelerator or make_accelerator(config)
        self.dataset, self.collate = dataset, collate
        self.count_tokens = count_tokens or (lambda batch: int(batch["attention_mask"].sum()))
        self.state = TrainState()
        self.identity = run_identity(config)
        self.summary = TrainingSummary(description)
        self.model, self.optimizer, self.scheduler = prepare(model, config, self.accelerator)

    @property
    def unwrapped_model(self) -> nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def run(self) -> None:
        """Train to `max_steps` (resuming first when asked), the last step checkpointed with `save_every`."""
        started = time.perf_counter()
        check_room(self.config, self.model)
        metrics = self._resume()
        if self.accelerator.is_main_process:  # after the resume is checked: a refused one leaves the run's record
            save_config(self.config, self.output / "config.json")
        batches = started_workers(data_loader(self))
        log = RunLog(progress(self.summary.description, self.config.max_steps, "step", initial=self.state.step,
                              enabled=self.accelerator.is_local_main_process), self.summary, metrics)
        if self.state.step == 0 and self.log_extra is not None and (extra := self.log_extra(self)) and metrics:
            metrics.append({"step": 0, "tokens": 0, **extra})
        window = LossWindow()
        mark_started(self.output, self.accelerator)  # from here a failure keeps the folder for --resume
        while self.state.step < self.config.max_steps:
            window.add(*self._optimizer_step(batches))
            self.state.step += 1
            log.bar.update(1)
            if logs_at(self.state.step, self.config):
                log.add(self._record(window, log.bar))
                window = LossWindow()
            if self.on_step is not None:
                self._hook(self.on_step, log.bar)
            if self.config.save_every and self.state.step % self.config.save_every == 0:
                self._stop(nonfinite_weights(self.unwrapped_model, self.accelerator, self.state.step), log.bar)
                with writing(checkpoint_path(self.output, self.state.step)):  # a full disk: one line naming it
                    self.save_checkpoint()
        self._finish(log, started)

    def _resume(self) -> MetricsLog | None:
        """Resume when asked (the rates then follow this run's schedule); the main process's metrics log."""
        resumed = resume_from(self.config, self.identity, self.model, self.optimizer, self.scheduler,
                              self.accelerator)
        if resumed is not None:
            self.state.load_state_dict(resumed)
            resume_schedule(self.scheduler, self.state.step, self.config.max_steps, self.accelerator)
        if not self.accelerator.is_main_process:
            return None
        return MetricsLog(self.output / METRICS_FILE, None if resumed is None else self.state.step,
                          start_reporter(self.config))

    def _record(self, window: LossWindow, bar: tqdm) -> dict[str, float]:
        """The record of a logged step: the window's losses (a non-finite one stops the run before it is logged,
        probed or checkpointed), then what `log_extra` adds."""
        record, tokens = reduce_window(window, self.accelerator, self.optimizer, self.state.step,
                                       self.config.separate_heads)
        self.state.tokens += tokens
        record["tokens"] = self.state.tokens
        self._stop(nonfinite_losses(record, window, self.state.step), bar)
        if self.log_extra is not None:
            record.update(self._hook(self.log_extra, bar))
        return record

    def _finish(self, log: RunLog, started: float) -> None:
        """The weights the command exports next checked, the last step checkpointed, the wall time measured."""
        self._stop(nonfinite_weights(self.unwrapped_model, self.accelerator, self.state.step), log.bar)
        log.close()
        last = checkpoint_path(self.output, self.state.step)
        if self.config.save_every and latest_checkpoint(self.output) != last:
            with writing(last):
                self.save_checkpoint()
        self.summary.seconds = time.perf_counter() - started

    def say_summary(self) -> None:
        """The summary line (losses, wall time, tokens/s) on the main process, said once the run's model is saved."""
        say(self.summary.line(), self.accelerator.is_main_process)

    def _hook(self, hook: Callable[[Trainer], Any], bar: tqdm) -> Any:
        """`hook(self)` (`log_extra`, `on_step`); a hook that met NaN vectors (a probe or a re-mining encoding with
        weights that turned non-finite at this very step, its loss still finite) stops the run as a non-finite loss
        does."""
        try:
            return hook(self)
        except NonFiniteError as error:
            self._stop(f"training stopped after step {self.state.step}: {error}", bar)

    def _stop(self, stopped: str | None, bar: tqdm) -> None:
        """A run that diverged (`stopped` says how; None: it did not) stops here, its bar closed."""
        if stopped is not None:
            bar.close()
            raise diverged(stopped, self.output, self.identity)

    def _optimizer_step(self, batches: Iterator[dict]) -> tuple[dict[str, torch.Tensor], int]:
        """Accumulate gradients over micro-batches, clip, step; returns summed loss components and tokens.

        Nothing here waits for the device: the loss components stay device tensors (float64, as the Python floats
        they replace) and tokens are counted on the host copy of the batch, so the host queues the next step while
        the device runs this one. They are read at log steps only (`reduce_window`)."""
        accumulation = self.config.gradient_accumulation_steps
        totals: dict[str, torch.Tensor] = {}
        tokens = 0
        self.model.train()
        for micro in range(accumulation):
            host_batch = next(batches)
            tokens += self.count_tokens(host_batch)
            batch = {k: v.to(self.accelerator.device, non_blocking=True) for k, v in host_batch.items()}
            generator = mask_generator(self.config.seed, self.accelerator.process_index,
                                       self.state.micro_batches, self.accelerator.device)
            self.state.micro_batches += 1
            with self.accelerator.no_sync(self.model) if micro < accumulation - 1 else contextlib.nullcontext():
                with self.accelerator.autocast():
                    losses = self.model(batch, generator)
                self.accelerator.backward(losses["loss"] / accumulation)
            add_shares(totals, losses, accumulation)
        if self.state.step < self.config.freeze_encoder_steps:
            drop_body_gradients(self.optimizer)
        if self.config.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return totals, tokens

    def save_checkpoint(self) -> None:
        """This step's checkpoint (`retromae.training.checkpoints.save_checkpoint`), the oldest of this run's beyond
        --keep-checkpoints pruned."""
        save_checkpoint(checkpoint_path(self.output, self.state.step), self.model, self.optimizer, self.scheduler,
                        self.state.state_dict(), self.accelerator, self.identity, self.config.keep_checkpoints)


def logs_at(step: int, config: TrainingConfig) -> bool:
    """Whether `step` writes a record: every log_every steps, the last step, and every checkpointed step (so a
    resumed run never loses the losses or tokens of a window cut by the checkpoint it resumes from)."""
    saves = config.save_every and step % config.save_every == 0
    return step % config.log_every == 0 or step == config.max_steps or bool(saves)


def add_shares(totals: dict[str, torch.Tensor], losses: dict[str, torch.Tensor], accumulation: int) -> None:
    """Each loss's share of the step (its micro-batch's value over `accumulation`) added to `totals`, on the device,
    in float64 (float32 on Apple's MPS, which has no float64)."""
    for name, value in losses.items():
        share = value.detach().to(torch.float32 if value.device.type == "mps" else torch.float64) / accumulation
        totals[name] = totals[name] + share if name in totals else share


def data_loader(trainer: Trainer) -> DataLoader:
    """The loader of `trainer`'s micro-batches from where it stands (`batch_sampler`, else `ResumableBatchSampler`)."""
    accelerator, config = trainer.accelerator, trainer.config
    rank, world, start = accelerator.process_index, accelerator.num_processes, trainer.state.micro_batches
    if trainer.batch_sampler is not None:
        sampler = trainer.batch_sampler(rank, world, start)
    else:
        sampler = ResumableBatchSampler(len(trainer.dataset), config.batch_size, config.seed, rank, world,
                                        start=start, lengths=example_lengths(trainer.dataset, config),
                                        accumulation=config.gradient_accumulation_steps)
    workers = loader_workers(config, accelerator.device, trainer.on_step is not None)
    return batch_loader(trainer.dataset, sampler, trainer.collate, workers, accelerator.device, config.seed)


def loader_workers(config: TrainingConfig, device: torch.device, has_step_hook: bool) -> int:
    """--num-workers, or by default 2 on CUDA and 0 on CPU; 0 too with an `on_step` hook, which may change the
    data between steps (workers would batch from their stale copy)."""
    if config.num_workers is not None:
        return config.num_workers
    return 2 if device.type == "cuda" and not has_step_hook else 0


def batch_loader(dataset: Dataset, sampler: Iterable[list], collate: Callable, workers: int, device: torch.device,
                 seed: int) -> DataLoader:
    """The loop's loader of `sampler`'s micro-batches."""
    # A private generator: creating the loader's iterator must not draw from the global RNG restored on resume.
    # Pinned host memory lets the copies to CUDA run asynchronously (`non_blocking` in `_optimizer_step`).
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=workers,
                      persistent_workers=workers > 0, pin_memory=device.type == "cuda",
                      generator=torch.Generator().manual_seed(seed),
                      multiprocessing_context=worker_context() if workers else None)


def example_lengths(dataset: Dataset, config: TrainingConfig) -> np.ndarray | None:
    """The dataset's example lengths when batches are grouped by length (--group-by-length) and it has them."""
    lengths = getattr(dataset, "lengths", None)
    return lengths() if config.group_by_length and lengths is not None else None
