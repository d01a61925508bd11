"""The one training loop, on Accelerate, shared by pre-training and fine-tuning.

Owns: optimiser and schedule (AdamW, linear warmup then linear decay; heads outside the pre-trained body may have
their own learning rate and a warm-up phase alone, `HeadTrainingConfig`), gradient accumulation and clipping,
mixed precision, gradient checkpointing, data order and its position, per-step mask generators, the
progress bar, `metrics.jsonl`, and atomic checkpoints that resume exactly (model, optimiser, scheduler,
RNG states, data position). Distribution (DDP through `accelerate launch` or `torchrun`; FSDP/DeepSpeed
through an Accelerate config) comes from Accelerate. Does not own models, losses or data formats: the
model's forward(batch, generator) returns a dict of named losses, "loss" the one to optimise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from retromae.config import ConfigError, option, require
from retromae.errors import DataError
from retromae.io import write_text_atomic

CHECKPOINT_PATTERN = re.compile(r"^step-(\d+)$")


@dataclass(kw_only=True)
class TrainingConfig:
    """Options of the training loop, shared by every command that trains."""

    output: str = option(help="output directory (checkpoints, metrics.jsonl, exported models)")
    max_steps: int = option(1000, "number of optimiser steps")
    batch_size: int = option(16, "examples per device per micro-batch")
    gradient_accumulation_steps: int = option(1, "micro-batches per optimiser step")
    learning_rate: float = option(1e-4, "peak learning rate of AdamW")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm)")
    warmup_ratio: float = option(0.1, "share of max_steps spent warming the learning rate up linearly")
    max_grad_norm: float = option(1.0, "gradient clipping norm (0 disables clipping)")
    mixed_precision: str = option("no", "mixed precision", choices=("no", "fp16", "bf16"))
    gradient_checkpointing: bool = option(False, "recompute encoder activations in the backward pass to save memory")
    seed: int = option(42, "random seed (data order, masks, dropout, decoder initialisation)")
    log_every: int = option(10, "log metrics every N steps")
    save_every: int = option(500, "write a checkpoint every N steps (0: only at the end)")
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep")
    resume: bool = option(False, "continue from the latest checkpoint in --output")
    num_workers: int = option(0, "data loader worker processes")
    # Options only where new heads sit on a pre-trained body (`HeadTrainingConfig`); elsewhere all trains as one.
    head_learning_rate: ClassVar[float | None] = None
    freeze_encoder_steps: ClassVar[int] = 0

    def __post_init__(self) -> None:
        require(self.max_steps > 0, "max_steps", "must be positive")
        require(self.batch_size > 0, "batch_size", "must be positive")
        require(self.gradient_accumulation_steps > 0, "gradient_accumulation_steps", "must be positive")
        require(self.learning_rate > 0, "learning_rate", "must be positive")
        require(0 <= self.warmup_ratio < 1, "warmup_ratio", "must lie in [0, 1)")
        require(self.log_every > 0, "log_every", "must be positive")
        require(self.save_every >= 0, "save_every", "must be 0 or positive")
        require(self.keep_checkpoints > 0, "keep_checkpoints", "must be positive")

    @property
    def separate_heads(self) -> bool:
        """Whether the heads follow their own learning rate or schedule rather than the encoder's."""
        return self.head_learning_rate is not None or self.freeze_encoder_steps > 0


@dataclass(kw_only=True)
class HeadTrainingConfig(TrainingConfig):
    """Options of commands whose model puts new heads (MLM head, decoder, classifier) on a pre-trained body."""

    head_learning_rate: float | None = option(None, "peak learning rate of the parameters outside the encoder body "
                                                    "(MLM head, decoder, classifier); default: --learning-rate")
    freeze_encoder_steps: int = option(0, "train only those heads for the first N steps (the encoder's learning "
                                          "rate is 0 and its gradients dropped), then everything, the encoder with "
                                          "its own warm-up over the remaining steps")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.head_learning_rate is None or self.head_learning_rate > 0, "head_learning_rate",
                "must be positive")
        require(0 <= self.freeze_encoder_steps < self.max_steps, "freeze_encoder_steps",
                f"must lie in [0, --max-steps) (max_steps is {self.max_steps})")


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
        self.step, self.micro_batches = state["step"], state["micro_batches"]
        self.tokens = state.get("tokens", 0)  # checkpoints written before tokens were counted


class ResumableBatchSampler:
    """Seeded, epoch-wise shuffled micro-batches of one process's shard, starting at any position.

    Epoch e is a permutation drawn from `seed + e`; each global batch of `batch_size * world_size` indices is
    split by rank, so every process sees distinct examples and the order does not depend on restarts.
    """

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1, start: int = 0):
        self.global_batch = batch_size * world_size
        if size < self.global_batch:
            raise DataError(f"the data has {size} examples, fewer than one global batch of {self.global_batch}")
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.rank, self.start = rank, start
        self.batches_per_epoch = size // self.global_batch

    def __iter__(self) -> Iterator[list[int]]:
        position = self.start
        while True:
            epoch, offset = divmod(position, self.batches_per_epoch)
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch))
            first = offset * self.global_batch + self.rank * self.batch_size
            yield order[first:first + self.batch_size].tolist()
            position += 1


def mask_generator(seed: int, rank: int, micro_batch: int, device: torch.device) -> torch.Generator:
    """The generator for one micro-batch's masks: a pure function of (seed, rank, micro-batch).

    Resuming therefore needs no generator state, on any number of processes.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed((seed * 1_000_003 + rank * 7_919 + micro_batch) % (2**63))
    return generator


def body_parameter_ids(model: nn.Module) -> set[int]:
    """The parameters of every pre-trained transformer body (`PreTrainedModel.base_model`) inside `model`."""
    return {id(p) for module in model.modules() if isinstance(module, PreTrainedModel)
            for p in module.base_model.parameters()}


def _optimizer(model: nn.Module, config: TrainingConfig) -> torch.optim.AdamW:
    """AdamW over four groups: body or head × weight decay or not (none for biases and norms); empty ones left out.

    Each group carries `body` (True for the encoder body) so that the schedule and the frozen phase can tell them
    apart."""
    body = body_parameter_ids(model)
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            decays = parameter.ndim >= 2 and "norm" not in name.lower()
            groups.setdefault((id(parameter) in body, decays), []).append(parameter)
    return torch.optim.AdamW([
        {"params": params, "body": in_body, "weight_decay": config.weight_decay if decays else 0.0,
         "lr": config.learning_rate if in_body or config.head_learning_rate is None else config.head_learning_rate}
        for (in_body, decays), params in sorted(groups.items(), reverse=True)])


def linear_schedule(start: int, warmup_ratio: float, total: int) -> Callable[[int], float]:
    """Learning-rate factor of a step: 0 before `start`, then a linear warm-up over `warmup_ratio` of the remaining
    steps and a linear decay to 0 at `total` (with start 0, transformers' linear schedule with warm-up)."""
    span = total - start
    warmup = int(warmup_ratio * span)

    def factor(step: int) -> float:
        if step < start:
            return 0.0
        step -= start
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (span - step) / max(1, span - warmup))

    return factor


def _scheduler(optimizer: torch.optim.Optimizer, config: TrainingConfig) -> torch.optim.lr_scheduler.LambdaLR:
    body = linear_schedule(config.freeze_encoder_steps, config.warmup_ratio, config.max_steps)
    head = linear_schedule(0, config.warmup_ratio, config.max_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, [body if g["body"] else head for g in optimizer.param_groups])


def make_accelerator(config: TrainingConfig) -> Accelerator:
    """The run's Accelerator; create it before any distributed work (e.g. building a data cache on rank 0 first).

    Accelerate keeps one process-wide state; it is reset (the distributed set-up kept) so that one process can run
    several trainings with different precision, as the quickstart and the tests do.
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(mixed_precision=config.mixed_precision, cpu=_launched_without_gpus())


def _launched_without_gpus() -> bool:
    """True for a multi-process launch (torchrun, accelerate launch) on a machine without CUDA: DDP over gloo."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def _enable_gradient_checkpointing(model: nn.Module) -> None:
    for module in model.modules():
        if not (isinstance(module, PreTrainedModel) and module.supports_gradient_checkpointing):
            continue
        if hasattr(module, "activation_checkpointing_enable"):  # transformers >= 5.x
            module.activation_checkpointing_enable({"use_reentrant": False})
        else:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def latest_checkpoint(output: Path) -> Path | None:
    """The newest complete checkpoint under `output/checkpoints`, or None."""
    folder = Path(output) / "checkpoints"
    found = [(int(m.group(1)), p) for p in folder.glob("step-*") if (m := CHECKPOINT_PATTERN.match(p.name))]
    return max(found)[1] if found else None


class MetricsLog:
    """`metrics.jsonl`: one JSON object per logged step, appended; entries past a resumed step are dropped."""

    def __init__(self, path: Path, resume_step: int | None):
        self.path = path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line)["step"] <= resume_step]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        elif resume_step is None:
            path.unlink(missing_ok=True)

    def append(self, record: dict[str, float]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


class Trainer:
    """Runs `config.max_steps` optimiser steps of `model` over `dataset`, checkpointing and logging as it goes."""

    def __init__(self, model: nn.Module, dataset: Dataset, collate: Callable, config: TrainingConfig,
                 count_tokens: Callable[[dict], int] | None = None, accelerator: Accelerator | None = None,
                 batch_sampler: Callable[[int, int, int], Iterable[list]] | None = None,
                 on_step: Callable[[Trainer], None] | None = None,
                 log_extra: Callable[[Trainer], dict[str, float]] | None = None):
        """`batch_sampler(rank, world_size, start)` replaces the default `ResumableBatchSampler`: it must yield this
        process's micro-batches of dataset keys from micro-batch `start` on, as a pure function of its arguments
        and the seed, so that resuming stays exact. `on_step(trainer)` runs after every optimiser step, after its
        metrics are logged and before it is checkpointed (e.g. to refresh hard negatives). `log_extra(trainer)`
        runs on every process before the first step of a fresh run and at every logged step, before its record is
        written; the metrics it returns join the record (e.g. retrieval probes; their time is outside
        tokens_per_s), a non-empty result before the first step becomes a record of step 0."""
        self.config = config
        self.batch_sampler, self.on_step, self.log_extra = batch_sampler, on_step, log_extra
        self.output = Path(config.output)
        self.accelerator = accelerator or make_accelerator(config)
        self.dataset, self.collate = dataset, collate
        self.count_tokens = count_tokens or (lambda batch: int(batch["attention_mask"].sum()))
        self.state = TrainState()
        if config.gradient_checkpointing:
            _enable_gradient_checkpointing(model)
        optimizer = _optimizer(model, config)
        self._check_heads(optimizer)
        self.scheduler = _scheduler(optimizer, config)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.accelerator.register_for_checkpointing(self.scheduler, self.state)

    def _check_heads(self, optimizer: torch.optim.Optimizer) -> None:
        if self.config.freeze_encoder_steps and all(group["body"] for group in optimizer.param_groups):
            raise ConfigError("--freeze-encoder-steps: the model has no parameters outside its encoder to train alone")

    @property
    def unwrapped_model(self) -> nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def run(self) -> None:
        """Train to `max_steps` (resuming first when asked); the final checkpoint is always written."""
        resumed = self._maybe_resume()
        metrics = MetricsLog(self.output / "metrics.jsonl", resumed) if self.accelerator.is_main_process else None
        batches = iter(self._data_loader())
        progress = tqdm(total=self.config.max_steps, initial=self.state.step, desc="training",
                        disable=not self.accelerator.is_local_main_process, dynamic_ncols=True)
        shown: dict[str, float] = {}  # the postfix keeps the latest value of every metric (probes between probes)
        if self.state.step == 0 and self.log_extra is not None and (extra := self.log_extra(self)) and metrics:
            metrics.append({"step": 0, "tokens": 0, **extra})
        window = _Window()
        while self.state.step < self.config.max_steps:
            window.add(*self._optimizer_step(batches))
            self.state.step += 1
            progress.update(1)
            if self._logs(self.state.step):
                record = self._reduce(window)
                if self.log_extra is not None:
                    record.update(self.log_extra(self))
                shown.update(record)
                progress.set_postfix({k: f"{v:.4g}" for k, v in shown.items() if k != "step"})
                if metrics:
                    metrics.append(record)
                window = _Window()
            if self.on_step is not None:
                self.on_step(self)
            if self.config.save_every and self.state.step % self.config.save_every == 0:
                self.save_checkpoint()
        progress.close()
        if latest_checkpoint(self.output) != self._checkpoint_path(self.state.step):
            self.save_checkpoint()

    def _logs(self, step: int) -> bool:
        """Whether `step` writes a record: every log_every steps, the last step, and every checkpointed step (so a
        resumed run never loses the losses or tokens of a window cut by the checkpoint it resumes from)."""
        saves = self.config.save_every and step % self.config.save_every == 0
        return step % self.config.log_every == 0 or step == self.config.max_steps or bool(saves)

    def _optimizer_step(self, batches: Iterator[dict]) -> tuple[dict[str, float], int]:
        """Accumulate gradients over micro-batches, clip, step; returns summed loss components and tokens."""
        accumulation = self.config.gradient_accumulation_steps
        totals: dict[str, float] = {}
        tokens = 0
        self.model.train()
        for micro in range(accumulation):
            batch = {k: v.to(self.accelerator.device) for k, v in next(batches).items()}
            generator = mask_generator(self.config.seed, self.accelerator.process_index,
                                       self.state.micro_batches, self.accelerator.device)
            self.state.micro_batches += 1
            with self.accelerator.no_sync(self.model) if micro < accumulation - 1 else contextlib.nullcontext():
                with self.accelerator.autocast():
                    losses = self.model(batch, generator)
                self.accelerator.backward(losses["loss"] / accumulation)
            for name, value in losses.items():
                totals[name] = totals.get(name, 0.0) + float(value.detach()) / accumulation
            tokens += self.count_tokens(batch)
        if self.state.step < self.config.freeze_encoder_steps:
            self._drop_body_gradients()
        if self.config.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return totals, tokens

    def _drop_body_gradients(self) -> None:
        """While the encoder is frozen: no update, no optimiser moments, and no share in the clipped norm."""
        for group in self.optimizer.param_groups:
            if group["body"]:
                for parameter in group["params"]:
                    parameter.grad = None

    def _reduce(self, window: _Window) -> dict[str, float]:
        """Mean loss components over the window and all processes; tokens/s over all processes."""
        names = sorted(window.totals)
        local = torch.tensor([window.totals[n] / window.steps for n in names] + [float(window.tokens)],
                             device=self.accelerator.device)
        summed = self.accelerator.reduce(local, reduction="sum")
        world = self.accelerator.num_processes
        record: dict[str, float] = {"step": self.state.step}
        record.update({name: summed[i].item() / world for i, name in enumerate(names)})
        rates = {group["body"]: group["lr"] for group in self.optimizer.param_groups}
        record["lr"] = rates.get(True, rates.get(False))
        if self.config.separate_heads and False in rates:
            record["head_lr"] = rates[False]
        record["tokens_per_s"] = summed[-1].item() / max(time.perf_counter() - window.started, 1e-9)
        self.state.tokens += round(summed[-1].item())
        record["tokens"] = self.state.tokens
        return record

    def _data_loader(self) -> DataLoader:
        rank, world, start = self.accelerator.process_index, self.accelerator.num_processes, self.state.micro_batches
        if self.batch_sampler is not None:
            sampler = self.batch_sampler(rank, world, start)
        else:
            sampler = ResumableBatchSampler(len(self.dataset), self.config.batch_size, self.config.seed, rank, world,
                                            start=start)
        # A private generator: creating the loader's iterator must not draw from the global RNG restored on resume.
        return DataLoader(self.dataset, batch_sampler=sampler, collate_fn=self.collate,
                          num_workers=self.config.num_workers, persistent_workers=self.config.num_workers > 0,
                          generator=torch.Generator().manual_seed(self.config.seed))

    def _checkpoint_path(self, step: int) -> Path:
        return self.output / "checkpoints" / f"step-{step:07d}"

    def save_checkpoint(self) -> None:
        """Write model, optimiser, scheduler, RNG states and data position; named only once complete."""
        final = self._checkpoint_path(self.state.step)
        staging = final.with_name(final.name + ".tmp")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(staging))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
            self._prune_checkpoints()
        self.accelerator.wait_for_everyone()

    def _prune_checkpoints(self) -> None:
        folder = self.output / "checkpoints"
        steps = sorted(p for p in folder.glob("step-*") if CHECKPOINT_PATTERN.match(p.name))
        for old in steps[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    def _maybe_resume(self) -> int | None:
        if not self.config.resume:
            return None
        checkpoint = latest_checkpoint(self.output)
        if checkpoint is None:
            self.accelerator.print(f"no checkpoint under {self.output / 'checkpoints'}; starting from step 0")
            return None
        self.accelerator.load_state(str(checkpoint))
        self.accelerator.print(f"resumed from {checkpoint} at step {self.state.step}")
        return self.state.step


class _Window:
    """Loss sums, step count and tokens since the last log line."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.steps = 0
        self.tokens = 0
        self.started = time.perf_counter()

    def add(self, totals: dict[str, float], tokens: int) -> None:
        for name, value in totals.items():
            self.totals[name] = self.totals.get(name, 0.0) + value
        self.steps += 1
        self.tokens += tokens


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch before building models, so decoder initialisation is reproducible."""
    set_seed(seed)
