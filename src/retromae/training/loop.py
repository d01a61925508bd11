"""The one training loop, on Accelerate, shared by pre-training and fine-tuning.

Owns: optimiser and schedule (AdamW, linear warmup then linear decay; heads outside the pre-trained body may have
their own learning rate and a warm-up phase alone, `HeadTrainingConfig`), gradient accumulation and clipping,
mixed precision (`auto`: bf16 where the GPU has it; TF32 matmuls on CUDA), gradient checkpointing, the data
position (the order itself: `retromae.data.batch_sampler`; workers: `retromae.data.workers`), per-step mask
generators, stopping a run whose loss or weights turn NaN or infinite (read where the loop reads the device anyway:
the losses at each logged step, the weights before each checkpoint and at the end, so nothing diverged is
checkpointed or exported), the progress bar and end-of-run summary (`retromae.runtime.console`), `metrics.jsonl`, the
processes' waiting time (--distributed-timeout), and atomic checkpoints that resume exactly (model, optimiser,
scheduler, RNG states, data position; their files, without pickle: `retromae.training.checkpoint_state`), each holding
the identity of its run (`retromae.runtime.run_folder`) so that a resume or a pruning never touches another run's
checkpoints. Distribution (DDP through `accelerate launch`
or `torchrun`; FSDP/DeepSpeed through an Accelerate config) comes from Accelerate. Does not own models, losses or
data formats: the model's forward(batch, generator) returns a dict of named losses, "loss" the one to optimise.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, InitProcessGroupKwargs, set_seed
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from retromae.data.batch_sampler import ResumableBatchSampler as ResumableBatchSampler  # re-exported
from retromae.data.workers import started_workers, worker_context
from retromae.models.finite import nonfinite_parameters
from retromae.runtime.console import TrainingSummary, progress
from retromae.runtime.cpu_features import has_bf16_matrix_units
from retromae.runtime.errors import NonFiniteError
from retromae.runtime.io import append_line, check_free_space, write_text_atomic, writing
from retromae.runtime.lines import appended_records
from retromae.runtime.options import ConfigError
from retromae.runtime.processes import check_process_count, without_gpus
from retromae.runtime.run_folder import (
    MARKER,
    check_same_run,
    claim_folder,
    input_paths,
    mark_started,
    read_marker,
    run_identity,
    write_marker,
)
from retromae.training.checkpoint_state import (
    check_complete,
    check_shared_folder,
    load_training_state,
    put_master_weights,
    save_training_state,
)
from retromae.training.config import HeadTrainingConfig as HeadTrainingConfig  # re-exported: the loop's options
from retromae.training.config import TrainingConfig
from retromae.training.trackers import TENSORBOARD_DIR, Reporter, start_reporter

CHECKPOINT_PATTERN = re.compile(r"^step-(\d+)$")
# What the loop writes into --output; a command adds its exported models (cleared by --overwrite, `claim_output`).
TRAINING_OUTPUTS = ("checkpoints", "metrics.jsonl", "config.json", TENSORBOARD_DIR)


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


def body_parameter_ids(model: nn.Module) -> set[int]:
    """The parameters of every pre-trained transformer body (`PreTrainedModel.base_model`) inside `model`."""
    return {id(p) for module in model.modules() if isinstance(module, PreTrainedModel)
            for p in module.base_model.parameters()}


def _optimizer(model: nn.Module, config: TrainingConfig, fused: bool = False) -> torch.optim.AdamW:
    """AdamW over four groups: body or head × weight decay or not (none for biases and norms); empty ones left out.

    Each group carries `body` (True for the encoder body) so that the schedule and the frozen phase can tell them
    apart. `fused` (parameters on CUDA or the CPU) updates every parameter in one pass of one kernel rather than
    several passes per tensor: on two CPU cores the MiniLM update takes a ninth of the CPU time of the per-tensor
    loop, which took about 18% of the CPU time of an enhanced RetroMAE step (docs/benchmarks.md)."""
    body = body_parameter_ids(model)
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            decays = parameter.ndim >= 2 and "norm" not in name.lower()
            groups.setdefault((id(parameter) in body, decays), []).append(parameter)
    return torch.optim.AdamW([
        {"params": params, "body": in_body, "weight_decay": config.weight_decay if decays else 0.0,
         "lr": config.learning_rate if in_body or config.head_learning_rate is None else config.head_learning_rate}
        for (in_body, decays), params in sorted(groups.items(), reverse=True)], **({"fused": True} if fused else {}))


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
    """The schedule of `config.max_steps` steps: a function of the step and --max-steps alone (nothing of it is
    read from a checkpoint but the step), so a run resumed with a larger --max-steps follows the longer run's
    schedule from its step on (`follow_schedule`)."""
    body = linear_schedule(config.freeze_encoder_steps, config.warmup_ratio, config.max_steps)
    head = linear_schedule(0, config.warmup_ratio, config.max_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, [body if g["body"] else head for g in optimizer.param_groups])


def follow_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int) -> tuple[float, float]:
    """Put the schedule at `step` and every group's learning rate at the schedule's rate there, as an uninterrupted
    run has them; returns the first group's rate before and after. A resumed optimiser holds the rate its
    checkpoint's schedule gave (0 at the last step of a finished run): without this, the first step after resuming
    with a larger --max-steps would run at it rather than at the longer schedule's. Only the step is taken from the
    checkpoint, whatever else of the scheduler it holds."""
    scheduler.last_epoch = step
    before = scheduler.optimizer.param_groups[0]["lr"]
    rates = [base * factor(step) for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    return before, rates[0]


def make_accelerator(config: TrainingConfig) -> Accelerator:
    """The run's Accelerator; create it before any distributed work (e.g. building a data cache on rank 0 first).

    Accelerate keeps one process-wide state; it is reset (the distributed set-up kept) so that one process can run
    several trainings with different precision, as the quickstart and the tests do. Processes wait for each other
    up to --distributed-timeout minutes (rank 0 probes and mines negatives while the others wait in a collective).
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    waiting = InitProcessGroupKwargs(timeout=timedelta(minutes=config.distributed_timeout))
    accelerator = Accelerator(mixed_precision=resolve_mixed_precision(config.mixed_precision),
                              cpu=without_gpus(), kwargs_handlers=[waiting])
    check_process_count(accelerator.num_processes)
    _configure_deepspeed(accelerator, config)
    use_tensor_cores(accelerator.device)
    if config.mixed_precision == "auto" and (accelerator.device.type == "cuda" or accelerator.mixed_precision != "no"):
        accelerator.print(_precision_notice(accelerator.mixed_precision, accelerator.device))
    return accelerator


def _configure_deepspeed(accelerator: Accelerator, config: TrainingConfig) -> None:
    """Under a DeepSpeed config the engine does as the options say: its micro-batch is --batch-size (our loop, not
    a prepared DataLoader, feeds it), and its gradient accumulation and clipping (the engine clips; the loop's call
    does not) are --gradient-accumulation-steps and --max-grad-norm, a config that says otherwise being refused.
    ZeRO-3: `_configure_zero3`."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    settings = plugin.deepspeed_config
    if plugin.zero_stage == 3:
        _configure_zero3(settings)
    if config.batch_size and settings.get("train_micro_batch_size_per_gpu") in (None, "auto"):
        settings["train_micro_batch_size_per_gpu"] = config.batch_size
    _take_option(settings, "gradient_accumulation_steps", "--gradient-accumulation-steps",
                 config.gradient_accumulation_steps)
    _take_option(settings, "gradient_clipping", "--max-grad-norm", config.max_grad_norm)


def _take_option(settings: dict[str, Any], key: str, option: str, value: float) -> None:
    """The DeepSpeed setting `key` is `option`'s `value`; ConfigError when the config gives another number."""
    found = settings.get(key, "auto")
    if found not in ("auto", value):
        raise ConfigError(f"{option} {value}: the DeepSpeed config gives {key} {found}; give the same number in both")
    settings[key] = value


def _configure_zero3(settings: dict[str, Any]) -> None:
    """Models are built whole and the engine partitions them when it starts: transformers would otherwise build
    every model partitioned (it reads the config Accelerate registers with it, whatever `zero3_init_flag` says),
    leaving empty weights to what runs before training (objectives built on the encoder, unused parameters found,
    negatives mined) and to the models an export builds. And the engine gathers the whole weights when asked
    (`stage3_gather_16bit_weights_on_model_save`, Accelerate's `zero3_save_16bit_model`), as the export does."""
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    settings.setdefault("zero_optimization", {})["stage3_gather_16bit_weights_on_model_save"] = True


def shards_parameters(accelerator: Accelerator) -> bool:
    """Whether each process holds only a shard of the parameters (FSDP, DeepSpeed ZeRO-3): a forward pass then
    gathers each layer's weights from every process, and an export needs them gathered first."""
    state = accelerator.state
    if state.distributed_type == DistributedType.FSDP:
        return True
    plugin = getattr(state, "deepspeed_plugin", None)
    return state.distributed_type == DistributedType.DEEPSPEED and plugin is not None and plugin.zero_stage == 3


def check_unsharded(accelerator: Accelerator, option: str, instead: str) -> None:
    """ConfigError naming `option`, whose work runs the model on process 0 alone while the others wait, when FSDP or
    ZeRO-3 shard the parameters (that process alone cannot gather them); `instead` says what to do."""
    if shards_parameters(accelerator):
        raise ConfigError(f"{option}: runs the model on process 0 alone, but FSDP and DeepSpeed ZeRO-3 shard its "
                          f"weights over every process; train with DDP or ZeRO-2, or {instead}")


# Whether auto picks bf16 on a CPU with bf16 matrix units: not yet, whole steps were not cheaper on an Intel Xeon
# with AMX (docs/performance.md, "CPU speed on every x86 processor").
CPU_AUTO_BF16 = False
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # Accelerate's names → the dtype autocast uses
CPU_FP16 = ("--mixed-precision fp16: not on a CPU, where Accelerate would train in float32 without a word (it has "
            "no fp16 autocast there); use bf16 (autocast, on AMX or AVX-512 bf16 where the CPU has them) or no")


def resolve_mixed_precision(requested: str) -> str:
    """--mixed-precision as Accelerate takes it: "auto" is bf16 on a CUDA GPU that supports it (and, with
    `CPU_AUTO_BF16`, on a CPU with bf16 matrix units: `retromae.runtime.cpu_features`), else "no" (fp32); fp16 without a
    GPU is refused (ConfigError), where Accelerate would quietly run float32."""
    cuda = torch.cuda.is_available() and not without_gpus()
    if requested == "fp16" and not (cuda or torch.backends.mps.is_available()):
        raise ConfigError(CPU_FP16)
    if requested != "auto":
        return requested
    if cuda:
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if CPU_AUTO_BF16 and not torch.backends.mps.is_available() and has_bf16_matrix_units() else "no"


def _precision_notice(resolved: str, device: torch.device) -> str:
    if device.type == "cpu":
        return ("mixed precision: bf16 autocast, this CPU has bf16 matrix units (AMX or AVX-512 bf16; "
                "--mixed-precision no trains in fp32)")
    if resolved == "bf16":
        return "mixed precision: bf16 (the default on GPUs that support it; --mixed-precision no trains in fp32)"
    return "mixed precision: none, this GPU has no bf16 (--mixed-precision fp16 uses its tensor cores)"


def use_tensor_cores(device: torch.device) -> None:
    """On CUDA, let fp32 matrix products run on tensor cores (TF32, 10 mantissa bits), as bf16 autocast leaves
    some products (the loss, the optimiser's view of the weights) in fp32."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")


def _enable_gradient_checkpointing(model: nn.Module) -> None:
    for module in model.modules():
        if not (isinstance(module, PreTrainedModel) and module.supports_gradient_checkpointing):
            continue
        if hasattr(module, "activation_checkpointing_enable"):  # transformers >= 5.x
            module.activation_checkpointing_enable({"use_reentrant": False})
        else:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def claim_output(config: TrainingConfig, command: str, outputs: Iterable[str], accelerator: Accelerator) -> None:
    """Take --output for this run before any work (`retromae.runtime.run_folder.claim_folder`); `outputs` are the
    command's own files beside `TRAINING_OUTPUTS`."""
    claim_folder(config.output, command, run_identity(config), (*TRAINING_OUTPUTS, *outputs), resume=config.resume,
                 overwrite=config.overwrite, processes=accelerator, inputs=input_paths(config), started=False)


def checkpoints_by_step(output: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint under `output/checkpoints`, in increasing step order."""
    folder = Path(output) / "checkpoints"
    return sorted((int(m.group(1)), p) for p in folder.glob("step-*") if (m := CHECKPOINT_PATTERN.match(p.name)))


def latest_checkpoint(output: Path) -> Path | None:
    """The newest complete checkpoint under `output/checkpoints`, or None."""
    found = checkpoints_by_step(output)
    return found[-1][1] if found else None


def checkpoint_identity(checkpoint: Path) -> dict | None:
    """The identity of the run that wrote `checkpoint`, or None for a checkpoint without one."""
    marker = read_marker(checkpoint)
    return None if marker is None else marker.get("identity")


def prune_checkpoints(output: Path, keep: int, identity: dict) -> None:
    """Delete all but the `keep` highest-step checkpoints of the run with `identity`; any other is left alone."""
    ours = [path for _, path in checkpoints_by_step(output) if checkpoint_identity(path) == identity]
    for old in ours[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


class MetricsLog:
    """`metrics.jsonl`: one JSON object per logged step, appended whole or not at all
    (`retromae.runtime.io.append_line`); entries past a resumed step are dropped, and so is a last record a kill cut,
    with a line saying so. The trackers of `--report-to` (`reporter`) get every record too."""

    def __init__(self, path: Path, resume_step: int | None, reporter: Reporter | None = None):
        self.path, self.reporter = path, reporter
        if resume_step is not None and path.exists():
            records, torn = appended_records(path)
            if torn is not None:
                print(f"{path}: line {torn} was cut by the stop of the run; dropped", file=sys.stderr)
            kept = [json.dumps(record) for record in records if record["step"] <= resume_step]
            write_text_atomic(path, "".join(line + "\n" for line in kept))
        elif resume_step is None:
            path.unlink(missing_ok=True)

    def append(self, record: dict[str, float]) -> None:
        append_line(self.path, json.dumps(record))
        if self.reporter is not None:
            self.reporter.log(record)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.finish()


class Trainer:
    """Runs `config.max_steps` optimiser steps of `model` over `dataset`, checkpointing and logging as it goes."""

    def __init__(self, model: nn.Module, dataset: Dataset, collate: Callable, config: TrainingConfig,
                 count_tokens: Callable[[dict], int] | None = None, accelerator: Accelerator | None = None,
                 batch_sampler: Callable[[int, int, int], Iterable[list]] | None = None,
                 on_step: Callable[[Trainer], None] | None = None,
                 log_extra: Callable[[Trainer], dict[str, float]] | None = None, description: str = "training"):
        """`batch_sampler(rank, world_size, start)` replaces the default `ResumableBatchSampler`: it must yield this
        process's micro-batches of dataset keys from micro-batch `start` on, as a pure function of its arguments
        and the seed, so that resuming stays exact. `on_step(trainer)` runs after every optimiser step, after its
        metrics are logged and before it is checkpointed (e.g. to refresh hard negatives). `log_extra(trainer)`
        runs on every process before the first step of a fresh run and at every logged step, before its record is
        written; the metrics it returns join the record (e.g. retrieval probes; their time is outside
        tokens_per_s), a non-empty result before the first step becomes a record of step 0. `description` names
        the run on its progress bar and in its summary, e.g. "pre-training RetroMAE (200 steps)"."""
        self.config = config
        self.batch_sampler, self.on_step, self.log_extra = batch_sampler, on_step, log_extra
        self.output = Path(config.output)
        self.accelerator = accelerator or make_accelerator(config)
        self.dataset, self.collate = dataset, collate
        self.count_tokens = count_tokens or (lambda batch: int(batch["attention_mask"].sum()))
        self.state = TrainState()
        self.identity = run_identity(config)
        self.summary = TrainingSummary(description)
        if config.gradient_checkpointing:
            _enable_gradient_checkpointing(model)
        on_cuda = self.accelerator.device.type == "cuda"
        if on_cuda:
            model.to(self.accelerator.device)  # fused AdamW needs its parameters on the device when it is built
        if config.compile:
            model.compile()  # in place: parameter names, checkpoints and exports stay those of the plain model
        optimizer = _optimizer(model, config, fused=self.accelerator.device.type in ("cuda", "cpu"))
        self._check_heads(optimizer)
        self.scheduler = _scheduler(optimizer, config)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

    def _check_heads(self, optimizer: torch.optim.Optimizer) -> None:
        if self.config.freeze_encoder_steps and all(group["body"] for group in optimizer.param_groups):
            raise ConfigError("--freeze-encoder-steps: the model has no parameters outside its encoder to train alone")

    @property
    def unwrapped_model(self) -> nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def whole_model(self, build: Callable[[], nn.Module]) -> nn.Module | None:
        """The trained model with its whole weights, in float32, on the main process (None on the others): the
        unwrapped model, or under FSDP and DeepSpeed `build()` (a fresh model of the same structure) holding the
        full state dict gathered from every process, and under DeepSpeed the optimiser's float32 master weights
        (its engine holds the model itself in bf16 or fp16 under mixed precision, whatever the ZeRO stage). A
        collective: every process calls it."""
        deepspeed = self.accelerator.distributed_type == DistributedType.DEEPSPEED
        if not deepspeed and not shards_parameters(self.accelerator):
            return self.unwrapped_model if self.accelerator.is_main_process else None
        state = self.accelerator.get_state_dict(self.model)
        if deepspeed:
            put_master_weights(state, self.unwrapped_model)
        if not self.accelerator.is_main_process:
            return None
        model = build()
        model.load_state_dict(state)
        return model

    def run(self) -> None:
        """Train to `max_steps` (resuming first when asked); with `save_every`, the final step is checkpointed too.
        Prints the summary line (final losses, wall time, tokens/s) on the main process; `self.summary` holds its
        numbers."""
        started = time.perf_counter()
        self._check_room()
        resumed = self._maybe_resume()
        if resumed is not None:
            self._follow_schedule()
        metrics = (MetricsLog(self.output / "metrics.jsonl", resumed, start_reporter(self.config))
                   if self.accelerator.is_main_process else None)
        batches = started_workers(self._data_loader())
        bar = progress(self.summary.description, self.config.max_steps, "step", initial=self.state.step,
                       enabled=self.accelerator.is_local_main_process)
        shown: dict[str, float] = {}  # the postfix keeps the latest value of every metric (probes between probes)
        if self.state.step == 0 and self.log_extra is not None and (extra := self.log_extra(self)) and metrics:
            metrics.append({"step": 0, "tokens": 0, **extra})
        window = _Window()
        mark_started(self.output, self.accelerator)  # from here a failure keeps the folder for --resume
        while self.state.step < self.config.max_steps:
            window.add(*self._optimizer_step(batches))
            self.state.step += 1
            bar.update(1)
            if self._logs(self.state.step):
                record = self._reduce(window)
                self._stop_on_nonfinite_loss(record, window, bar)  # before it is logged, probed or checkpointed
                if self.log_extra is not None:
                    record.update(self._hook(self.log_extra, bar))
                shown.update(record)
                bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items() if k not in ("step", "tokens")})
                self.summary.add(record)
                if metrics:
                    metrics.append(record)
                window = _Window()
            if self.on_step is not None:
                self._hook(self.on_step, bar)
            if self.config.save_every and self.state.step % self.config.save_every == 0:
                self._stop_on_nonfinite_weights(bar)
                with writing(self._checkpoint_path(self.state.step)):  # a full disk: one line naming it
                    self.save_checkpoint()
        self._stop_on_nonfinite_weights(bar)  # the weights the command exports next
        bar.close()
        if metrics:
            metrics.close()
        if self.config.save_every and latest_checkpoint(self.output) != self._checkpoint_path(self.state.step):
            with writing(self._checkpoint_path(self.state.step)):
                self.save_checkpoint()
        self.summary.seconds = time.perf_counter() - started
        if self.accelerator.is_main_process:
            print(self.summary.line(), flush=True)

    def _stop_on_nonfinite_loss(self, record: dict[str, float], window: _Window, bar: tqdm) -> None:
        """NonFiniteError naming the step when a loss of the window is NaN or infinite. Read from the record just
        reduced (a sum is non-finite when any of its terms is), so that the check adds no wait for the device; the
        step is the first of the window whose loss this process saw non-finite."""
        bad = {name: value for name, value in record.items() if name in window.totals and not math.isfinite(value)}
        if not bad:
            return
        finite = torch.stack(window.finite).cpu().tolist() if window.finite else []
        first = next((index for index, ok in enumerate(finite) if not ok), None)
        step = (self.state.step - window.steps + 1 + first if first is not None
                else f"{self.state.step - window.steps + 1}-{self.state.step}")
        losses = ", ".join(f"{name} {value}" for name, value in bad.items())
        self._stop(f"training stopped at step {step}: a non-finite loss ({losses})", bar)

    def _stop_on_nonfinite_weights(self, bar: tqdm) -> None:
        """NonFiniteError when any process holds a NaN or infinite weight: checked before every checkpoint and at
        the end (before the command exports), one read from the device each time."""
        bad = nonfinite_parameters(self.unwrapped_model)
        count = torch.tensor([len(bad)], dtype=torch.int64, device=self.accelerator.device)
        if int(self.accelerator.reduce(count, reduction="sum").item()):
            shown = f" ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})" if bad else ""
            self._stop(f"training stopped after step {self.state.step}: the weights hold NaN or infinite "
                       f"values{shown}", bar)

    def _hook(self, hook: Callable[[Trainer], Any], bar: tqdm) -> Any:
        """`hook(self)` (`log_extra`, `on_step`); a hook that met NaN vectors (a probe or a re-mining encoding with
        weights that turned non-finite at this very step, its loss still finite) stops the run as a non-finite loss
        does."""
        try:
            return hook(self)
        except NonFiniteError as error:
            self._stop(f"training stopped after step {self.state.step}: {error}", bar)

    def _stop(self, what: str, bar: tqdm) -> NoReturn:
        """Raise NonFiniteError: `what`, the last good checkpoint of this run and what to change; nothing of the
        diverged state is checkpointed or exported."""
        bar.close()
        ours = [(step, path) for step, path in checkpoints_by_step(self.output)
                if checkpoint_identity(path) == self.identity]
        last = f"the last good checkpoint is {ours[-1][1]} (step {ours[-1][0]})" if ours else "no checkpoint written"
        raise NonFiniteError(f"{what}; {last}; nothing was exported: check the data, or start again with a lower "
                             "--learning-rate (or a longer --warmup-ratio)")

    def _check_room(self) -> None:
        """With checkpoints, one (the weights and AdamW's two moments) must fit on the output's disk: checked on
        every process before the first step, so that a full disk is not found hours in."""
        if self.config.save_every:
            size = sum(p.numel() * p.element_size() for p in self.model.parameters())
            check_free_space(self.output, 3 * size, "a checkpoint (the weights and the optimiser's two moments)")

    def _follow_schedule(self) -> None:
        """After a resume: the rates of this run's schedule at the resumed step, said when they differ from the
        checkpoint's (a larger --max-steps)."""
        before, after = follow_schedule(self.scheduler, self.state.step)
        if not math.isclose(before, after, rel_tol=1e-6, abs_tol=1e-12):
            self.accelerator.print(f"--max-steps {self.config.max_steps}: the learning rate follows the schedule of "
                                   f"{self.config.max_steps} steps from step {self.state.step} on: {after:.3g} "
                                   f"(the checkpoint's schedule was at {before:.3g}); see docs/reliability.md")

    def _logs(self, step: int) -> bool:
        """Whether `step` writes a record: every log_every steps, the last step, and every checkpointed step (so a
        resumed run never loses the losses or tokens of a window cut by the checkpoint it resumes from)."""
        saves = self.config.save_every and step % self.config.save_every == 0
        return step % self.config.log_every == 0 or step == self.config.max_steps or bool(saves)

    def _optimizer_step(self, batches: Iterator[dict]) -> tuple[dict[str, torch.Tensor], int]:
        """Accumulate gradients over micro-batches, clip, step; returns summed loss components and tokens.

        Nothing here waits for the device: the loss components stay device tensors (float64, as the Python floats
        they replace) and tokens are counted on the host copy of the batch, so the host queues the next step while
        the device runs this one. They are read at log steps only (`_reduce`)."""
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
            for name, value in losses.items():
                share = value.detach().to(_sum_dtype(value.device)) / accumulation
                totals[name] = totals[name] + share if name in totals else share
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
        """Mean loss components over the window and all processes; tokens/s over all processes.

        The one host synchronisation of the loop: the values are read (`tolist`) before the clock, so tokens/s
        counts the device's time too. Tokens are summed as int64: float32 rounds counts past 2^24."""
        names = sorted(window.totals)
        means = torch.stack([window.totals[n] for n in names]) / window.steps  # (C,) on the device
        summed = self.accelerator.reduce(means.float(), reduction="sum").tolist()
        summed.append(self._reduce_tokens(window.tokens, means.device))
        world = self.accelerator.num_processes
        record: dict[str, float] = {"step": self.state.step}
        record.update({name: summed[i] / world for i, name in enumerate(names)})
        rates = {group["body"]: group["lr"] for group in self.optimizer.param_groups}
        record["lr"] = rates.get(True, rates.get(False))
        if self.config.separate_heads and False in rates:
            record["head_lr"] = rates[False]
        record["tokens_per_s"] = summed[-1] / max(time.perf_counter() - window.started, 1e-9)
        self.state.tokens += round(summed[-1])
        record["tokens"] = self.state.tokens
        return record

    def _reduce_tokens(self, tokens: int, device: torch.device) -> int:
        """This window's tokens summed over all processes, exactly (int64)."""
        count = torch.tensor([tokens], dtype=torch.int64, device=device)
        return int(self.accelerator.reduce(count, reduction="sum").item())

    def _loader_workers(self) -> int:
        """--num-workers, or by default 2 on CUDA and 0 on CPU; 0 too with an `on_step` hook, which may change the
        data between steps (workers would batch from their stale copy)."""
        if self.config.num_workers is not None:
            return self.config.num_workers
        return 2 if self.accelerator.device.type == "cuda" and self.on_step is None else 0

    def _data_loader(self) -> DataLoader:
        rank, world, start = self.accelerator.process_index, self.accelerator.num_processes, self.state.micro_batches
        if self.batch_sampler is not None:
            sampler = self.batch_sampler(rank, world, start)
        else:
            sampler = ResumableBatchSampler(len(self.dataset), self.config.batch_size, self.config.seed, rank, world,
                                            start=start, lengths=self._example_lengths())
        # A private generator: creating the loader's iterator must not draw from the global RNG restored on resume.
        # Pinned host memory lets the copies to CUDA run asynchronously (`non_blocking` in `_optimizer_step`).
        workers = self._loader_workers()
        return DataLoader(self.dataset, batch_sampler=sampler, collate_fn=self.collate, num_workers=workers,
                          persistent_workers=workers > 0, pin_memory=self.accelerator.device.type == "cuda",
                          generator=torch.Generator().manual_seed(self.config.seed),
                          multiprocessing_context=worker_context() if workers else None)

    def _example_lengths(self) -> np.ndarray | None:
        """The dataset's example lengths when batches are grouped by length (--group-by-length) and it has them."""
        lengths = getattr(self.dataset, "lengths", None)
        return lengths() if self.config.group_by_length and lengths is not None else None

    def _checkpoint_path(self, step: int) -> Path:
        return self.output / "checkpoints" / f"step-{step:07d}"

    def save_checkpoint(self) -> None:
        """Write model, optimiser, scheduler, RNG states and data position (`retromae.training.checkpoint_state`, no
        pickle); named only once complete. Process 0 (of all nodes, not each node's first) stages, marks and renames it;
        a save that fails (a full disk) takes its partial staging folder away with it."""
        final = self._checkpoint_path(self.state.step)
        staging = final.with_name(final.name + ".tmp")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        try:
            save_training_state(staging, self.model, self.optimizer, self.scheduler, self.state.state_dict(),
                                self.accelerator)
            self.accelerator.wait_for_everyone()
            check_complete(staging, self.accelerator)
        except BaseException:
            if self.accelerator.is_main_process:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        if self.accelerator.is_main_process:
            write_marker(staging, "checkpoint", self.identity)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
            prune_checkpoints(self.output, self.config.keep_checkpoints, self.identity)
        self.accelerator.wait_for_everyone()

    def _maybe_resume(self) -> int | None:
        if self.accelerator.num_processes > 1 and (self.config.save_every or self.config.resume):
            check_shared_folder(self.output, MARKER, self.accelerator)
        if not self.config.resume:
            return None
        checkpoint = latest_checkpoint(self.output)
        if checkpoint is None:
            self.accelerator.print(f"no checkpoint under {self.output / 'checkpoints'}; starting from step 0")
            return None
        check_same_run(checkpoint, "checkpoint", read_marker(checkpoint), self.identity)
        self.state.load_state_dict(load_training_state(checkpoint, self.model, self.optimizer, self.scheduler,
                                                       self.accelerator))
        self.accelerator.print(f"resumed from {checkpoint} at step {self.state.step}")
        return self.state.step


def _sum_dtype(device: torch.device) -> torch.dtype:
    """The dtype loss sums accumulate in on `device`: float64, but float32 on Apple's MPS, which has no float64."""
    return torch.float32 if device.type == "mps" else torch.float64


class _Window:
    """Loss sums (device tensors, added without waiting for the device), step count, tokens and whether each step's
    loss was finite since the last log line."""

    def __init__(self) -> None:
        self.totals: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.tokens = 0
        self.started = time.perf_counter()
        self.finite: list[torch.Tensor] = []  # per step, whether its loss was finite (device flags, read on failure)

    def add(self, totals: dict[str, torch.Tensor], tokens: int) -> None:
        for name, value in totals.items():
            self.totals[name] = self.totals[name] + value if name in self.totals else value
        if "loss" in totals:
            self.finite.append(torch.isfinite(totals["loss"]))
        self.steps += 1
        self.tokens += tokens


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch before building models, so decoder initialisation is reproducible."""
    set_seed(seed)
