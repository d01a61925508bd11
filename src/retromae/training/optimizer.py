"""The optimiser and its learning-rate schedule.

Owns: AdamW over the body and head parameters (heads outside the pre-trained body may have their own learning rate
and a warm-up phase alone, `HeadTrainingConfig`: `check_heads`, `drop_body_gradients`), the linear warm-up and
decay, and putting a resumed run on its schedule (`follow_schedule`, `resume_schedule`). Does not own the steps
themselves (`retromae.training.loop`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from accelerate import Accelerator
from torch import nn
from transformers import PreTrainedModel

from retromae.runtime.console import say
from retromae.runtime.options import ConfigError
from retromae.training.config import TrainingConfig


def body_parameter_ids(model: nn.Module) -> set[int]:
    """The parameters of every pre-trained transformer body (`PreTrainedModel.base_model`) inside `model`."""
    return {id(p) for module in model.modules() if isinstance(module, PreTrainedModel)
            for p in module.base_model.parameters()}


def build_optimizer(model: nn.Module, config: TrainingConfig, fused: bool = False) -> torch.optim.AdamW:
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


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainingConfig) -> torch.optim.lr_scheduler.LambdaLR:
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


def resume_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int, max_steps: int,
                    accelerator: Accelerator) -> None:
    """After a resume: the rates of this run's schedule at the resumed step, said when they differ from the
    checkpoint's (a larger --max-steps)."""
    before, after = follow_schedule(scheduler, step)
    if not math.isclose(before, after, rel_tol=1e-6, abs_tol=1e-12):
        say(f"--max-steps {max_steps}: the learning rate follows the schedule of {max_steps} steps from step {step} "
            f"on: {after:.3g} (the checkpoint's schedule was at {before:.3g}); see docs/reliability.md",
            accelerator.is_main_process)


def check_heads(config: TrainingConfig, optimizer: torch.optim.Optimizer) -> None:
    """ConfigError when --freeze-encoder-steps would train nothing: the model has no parameters beside its body."""
    if config.freeze_encoder_steps and all(group["body"] for group in optimizer.param_groups):
        raise ConfigError("--freeze-encoder-steps: the model has no parameters outside its encoder to train alone")


def drop_body_gradients(optimizer: torch.optim.Optimizer) -> None:
    """While the encoder is frozen: no update, no optimiser moments, and no share in the clipped norm."""
    for group in optimizer.param_groups:
        if group["body"]:
            for parameter in group["params"]:
                parameter.grad = None
