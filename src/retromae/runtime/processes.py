"""How many processes a run has, and whether that is what its launcher started.

Owns: reading the launcher's environment (torchrun and `accelerate launch --multi_gpu` set WORLD_SIZE, mpirun sets
PMI_SIZE or OMPI_COMM_WORLD_SIZE), the Accelerate process state that every command splitting its work uses (DDP over
gloo on a machine without CUDA, where Accelerate would otherwise see one process per process), and the checks that
refuse a launch whose processes would each do the whole work alone: `accelerate launch --cpu --num_processes N`
starts one process (Accelerate starts several CPU processes only through mpirun), a state that counts other than
the launcher's number of processes, and several processes for a command that runs in one (each would write the
same outputs). Nothing heavy is imported at module level: the CLI checks the launch before
any command loads torch. Does not own training or encoding.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from retromae.runtime.errors import RetroMAEError

WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
WORKING_FORMS = ("`torchrun --nproc_per_node N -m retromae ...` or `accelerate launch --multi_gpu --num_processes N "
                 "-m retromae ...` (on a machine without GPUs both run N CPU processes over gloo)")


class LaunchError(RetroMAEError):
    """A multi-process launch that would not split the work: the message names the launcher form that does."""


def launched_processes(env: Mapping[str, str] = os.environ) -> int:
    """The number of processes the launcher started, from its environment (1 without a launcher)."""
    for name in WORLD_SIZE_VARIABLES:
        if env.get(name, "").strip().isdigit():
            return int(env[name])
    return 1


def check_launch(command: str, splits_work: bool, env: Mapping[str, str] = os.environ) -> None:
    """LaunchError for a launch that would not split `command`'s work: Accelerate's single-process launcher asked
    for several processes (it always sets ACCELERATE_USE_CPU, and MASTER_PORT only when --num_processes or
    --num_machines exceeds 1, yet starts one), or several processes for a command that runs in one."""
    started = launched_processes(env)
    if "ACCELERATE_USE_CPU" in env and "MASTER_PORT" in env and started == 1:
        raise LaunchError("this `accelerate launch` asked for several processes but started only this one (Accelerate "
                          f"starts several CPU processes only through mpirun); use {WORKING_FORMS}")
    if started > 1 and not splits_work:
        raise LaunchError(f"`retromae {command}` runs in one process, and {started} would each do its whole work "
                          "into the same outputs; start it without torchrun or accelerate launch (pretrain, finetune, "
                          "train-reranker and encode split their work over several)")


def without_gpus() -> bool:
    """True for a multi-process launch on a machine without CUDA: the processes then talk over gloo."""
    # torch: processes is read by --help (retromae.cli.check_launch)
    import torch

    return launched_processes() > 1 and not torch.cuda.is_available()


def check_process_count(num_processes: int) -> None:
    """LaunchError when Accelerate counts other than the launcher's number of processes."""
    started = launched_processes()
    if num_processes != started:
        raise LaunchError(f"the launcher started {started} processes but this one sees {num_processes}: each would do "
                          f"the whole work alone; use {WORKING_FORMS}")


def process_state() -> Any:
    """Accelerate's `PartialState` of this process (gloo on a machine without CUDA), checked against the launch."""
    # accelerate: processes is read by --help (retromae.cli.check_launch)
    from accelerate import PartialState

    state = PartialState(cpu=without_gpus())
    check_process_count(state.num_processes)
    return state


def is_main_process() -> bool:
    """Whether this is the process that prints a command's closing summary (the only one without a launcher)."""
    return process_state().is_main_process
