"""A training run's checkpoints as folders: where they go, which exist, saving one and resuming from the newest.

Owns `OUTPUT/checkpoints/step-N/`: its path, listing the complete ones (`checkpoints_by_step`, `latest_checkpoint`),
the identity of the run that wrote each (`retromae.runtime.run_folder`), so that a resume or a pruning never
touches another run's, keeping the last --keep-checkpoints of this run, checking that one fits on the disk before
the first step, saving one atomically (staged, marked, renamed; `save_checkpoint`) and loading the newest on
--resume (`resume_from`). Does not own what a checkpoint holds (`retromae.training.checkpoint_state`: the files,
without pickle) or when one is written (`retromae.training.loop`).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from retromae.runtime.console import given, say
from retromae.runtime.io import check_free_space
from retromae.runtime.run_folder import MARKER, check_same_run, differences, read_marker, write_marker
from retromae.training.checkpoint_state import (
    check_complete,
    check_shared_folder,
    load_training_state,
    save_training_state,
)
from retromae.training.config import TrainingConfig

CHECKPOINT_PATTERN = re.compile(r"^step-([0-9]+)$")


def checkpoint_path(output: Path, step: int) -> Path:
    """The folder of step `step`'s checkpoint under `output`."""
    return Path(output) / "checkpoints" / f"step-{step:07d}"


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


def same_run(saved: dict | None, identity: dict) -> bool:
    """Whether a checkpoint's identity (`checkpoint_identity`) is the run's `identity` (`run_folder.differences`)."""
    return saved is not None and not differences(saved, identity)


def prune_checkpoints(output: Path, keep: int, identity: dict) -> None:
    """Delete all but the `keep` highest-step checkpoints of the run with `identity`; any other is left alone."""
    ours = [path for _, path in checkpoints_by_step(output) if same_run(checkpoint_identity(path), identity)]
    for old in ours[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def last_good(output: Path, identity: dict) -> str:
    """The words naming this run's newest checkpoint, for a run stopped before it diverged further."""
    ours = [(step, path) for step, path in checkpoints_by_step(output) if same_run(checkpoint_identity(path), identity)]
    return f"the last good checkpoint is {ours[-1][1]} (step {ours[-1][0]})" if ours else "no checkpoint written"


def check_room(config: TrainingConfig, model: nn.Module) -> None:
    """With checkpoints, one (the weights and AdamW's two moments) must fit on the output's disk: checked on
    every process before the first step, so that a full disk is not found hours in."""
    if config.save_every:
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        check_free_space(Path(config.output), 3 * size, "a checkpoint (the weights and the optimiser's two moments)")


def save_checkpoint(final: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                    state: dict[str, int], accelerator: Accelerator, identity: dict, keep: int) -> None:
    """Write model, optimiser, scheduler, RNG states and data position (`retromae.training.checkpoint_state`, no
    pickle) as `final`, named only once complete. Process 0 (of all nodes, not each node's first) stages, marks and
    renames it, then keeps the `keep` newest of this run's; a save that fails (a full disk) takes its partial
    staging folder away with it."""
    staging = final.with_name(final.name + ".tmp")
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()
    try:
        save_training_state(staging, model, optimizer, scheduler, state, accelerator)
        accelerator.wait_for_everyone()
        check_complete(staging, accelerator)
    except BaseException:
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    if accelerator.is_main_process:
        write_marker(staging, "checkpoint", identity)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        prune_checkpoints(final.parent.parent, keep, identity)
    accelerator.wait_for_everyone()


def resume_from(config: TrainingConfig, identity: dict, model: nn.Module, optimizer: torch.optim.Optimizer,
                scheduler: Any, accelerator: Accelerator) -> dict[str, int] | None:
    """With --resume, the loop's counters of this run's newest checkpoint, its model, optimiser and scheduler loaded
    into these; None for a fresh start. A newest checkpoint that cannot be resumed (damaged, another run's, its step
    not its name's or beyond --max-steps, a field restating the run otherwise, a file of another step) is refused
    naming its file, never passed over for an older one. Several processes first check that they share the output
    folder."""
    output = Path(config.output)
    if accelerator.num_processes > 1 and (config.save_every or config.resume):
        check_shared_folder(output, MARKER, accelerator)
    if not config.resume:
        return None
    found = checkpoints_by_step(output)
    if not found:
        say(f"no checkpoint under {given(output / 'checkpoints')}; starting from step 0", accelerator.is_main_process)
        return None
    step, checkpoint = found[-1]
    check_same_run(checkpoint, "checkpoint", read_marker(checkpoint), identity)
    state = load_training_state(checkpoint, model, optimizer, scheduler, accelerator, step=step,
                                max_steps=config.max_steps, accumulation=config.gradient_accumulation_steps)
    say(f"resumed from {given(checkpoint)} at step {state['step']}", accelerator.is_main_process)
    return state
