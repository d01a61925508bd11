"""How many processes a run has, and whether that is what its launcher started.

Owns: reading the launcher's environment (torchrun and `accelerate launch --multi_gpu` set WORLD_SIZE, mpirun sets
PMI_SIZE or OMPI_COMM_WORLD_SIZE; each whole-number variable of a launch read by one reader, `launcher_number`, and a
launch of several processes checked whole, `check_environment`, before Accelerate reads it), the Accelerate process
state that every command splitting its work uses (DDP over gloo on a machine without CUDA, where Accelerate would
otherwise see one process per process), and the checks that refuse a launch whose processes would each do the whole work
alone: `accelerate launch --cpu --num_processes N` starts one process (Accelerate starts several CPU processes only
through mpirun), a state that counts other than the launcher's number of processes, and several processes for a command
that runs in one (each would write the same outputs). Nothing heavy is imported at module level: the CLI checks the
launch before any command loads torch. Does not own training or encoding.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from retromae.runtime.errors import RetroMAEError
from retromae.runtime.lines import quoted
from retromae.runtime.precision import agree_on_auto

WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
# The launcher's whole-number variables (torchrun's and Accelerate's, and mpirun's that Accelerate reads): name →
# (lowest, highest or None, what it is). `launcher_number` reads each.
_SIZE, _RANK, _LOCAL_SIZE, _LOCAL_RANK = ((1, None, "the processes of the launch"), (0, None, "this process's rank"),
                                          (1, None, "the processes of the launch on this machine"),
                                          (0, None, "this process's rank on this machine"))
LAUNCHER_NUMBERS = {
    **dict.fromkeys(WORLD_SIZE_VARIABLES, _SIZE),
    **dict.fromkeys(("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"), _RANK),
    **dict.fromkeys(("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"),
                    _LOCAL_SIZE),
    **dict.fromkeys(("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"),
                    _LOCAL_RANK),
    "MASTER_PORT": (0, 65535, "the port of the main process; 0: any free one"),
}
WORKING_FORMS = ("`torchrun --nproc_per_node N -m retromae ...` or `accelerate launch --multi_gpu --num_processes N "
                 "-m retromae ...` (on a machine without GPUs both run N CPU processes over gloo)")


class LaunchError(RetroMAEError):
    """A multi-process launch that would not split the work: the message names the launcher form that does."""


def launcher_number(name: str, env: Mapping[str, str] = os.environ) -> int | None:
    """The launcher's variable `name` (one of `LAUNCHER_NUMBERS`) as the whole number it must be, None when it is
    not set; LaunchError in one line naming the variable and its value when it is no whole number (ASCII digits,
    spaces around them allowed) in its domain. The one reader of the launcher's numbers: every other read goes through
    it (`launched_processes`, `local_processes`, `check_launch`)."""
    if name not in env:
        return None
    text, (low, high, what) = env[name], LAUNCHER_NUMBERS[name]
    digits = text.strip()
    number = int(digits) if re.fullmatch(r"[0-9]{1,18}", digits) else None
    if number is None or number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise LaunchError(f"{name}={quoted(text)}: must be a whole number {bounds} ({what}); set it so, or unset it "
                          "and let the launcher set it")
    return number


def launched_processes(env: Mapping[str, str] = os.environ) -> int:
    """The number of processes the launcher started, from its environment (1 without a launcher)."""
    for name in WORLD_SIZE_VARIABLES:
        number = launcher_number(name, env)
        if number is not None:
            return number
    return 1


def local_processes(env: Mapping[str, str] = os.environ) -> int:
    """The processes of this launch on this machine (LOCAL_WORLD_SIZE; 1 without a launcher), at most the launch's
    own: what a process's share of the machine's memory is divided by."""
    local = launcher_number("LOCAL_WORLD_SIZE", env)
    started = launched_processes(env)
    if local is not None and local > started:
        raise LaunchError(f"LOCAL_WORLD_SIZE={local}: more processes on this machine than the {started} of the whole "
                          "launch (WORLD_SIZE); set it so, or unset it and let the launcher set it")
    return 1 if local is None else local


def check_environment(env: Mapping[str, str] = os.environ) -> None:
    """LaunchError in one line for a launcher's environment that is not whole: a number variable that is no whole
    number in its domain (`launcher_number`); with WORLD_SIZE above 1 (torchrun, `accelerate launch --multi_gpu`),
    MASTER_ADDR, MASTER_PORT or RANK missing, or RANK, LOCAL_RANK or LOCAL_WORLD_SIZE beyond the launch's size.
    Checked before Accelerate reads it (its bare int() and its own errors end in a traceback)."""
    for name in LAUNCHER_NUMBERS:
        launcher_number(name, env)
    world, local = launched_processes(env), local_processes(env)
    if (launcher_number("WORLD_SIZE", env) or 1) > 1:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT", "RANK") if not env.get(name, "").strip()]
        if missing:
            raise LaunchError(f"WORLD_SIZE={world} without {', '.join(missing)}: a launch of several processes needs "
                              f"each of them; use {WORKING_FORMS}, which set them all")
    on_machine = ((local, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else (world, "WORLD_SIZE"))
    for name, (size, of) in (("RANK", (world, "WORLD_SIZE")), ("LOCAL_RANK", on_machine)):
        rank = launcher_number(name, env)
        if rank is not None and rank >= size:
            raise LaunchError(f"{name}={rank}: a rank must be below the launch's {size} processes ({of}); use "
                              f"{WORKING_FORMS}, which set them all")


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
    if splits_work:
        check_environment(env)


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


def process_state(**init: Any) -> Any:
    """Accelerate's `PartialState` of this process (gloo on a machine without CUDA; the CPU where `accelerate launch
    --cpu` asked for it, as Accelerate's own state takes it), checked against the launch. The call that makes it
    (`init`: its process group's options, e.g. timeout) is where every process of a launch meets (the group's
    rendezvous), and there they agree on what `auto` precision computes in (`precision.agree_on_auto`)."""
    # torch and accelerate: processes is read by --help (retromae.cli.check_launch)
    import torch
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    check_environment()  # the Python API's runs too: Accelerate reads it with bare int()s
    forming = not torch.distributed.is_initialized()
    state = PartialState(cpu=without_gpus() or parse_flag_from_env("ACCELERATE_USE_CPU"), **init)
    check_process_count(state.num_processes)
    if forming and state.num_processes > 1:
        agree_on_auto(state)
    return state


def is_main_process() -> bool:
    """Whether this is the process that prints a command's closing summary (the only one without a launcher)."""
    return process_state().is_main_process
