"""Which torch device a command runs on: the one place a `--device` option (or the default) becomes a device.

Owns: the names a `--device` may take (`check_device_name`, the option's check: cpu, cuda, cuda:N, mps; not torch's
others, such as meta, on which no command can run, nor an empty name or an index on the CPU); `resolve_device`: the
device named (checked to exist on this machine, in one line naming --device: a CUDA device on a machine without CUDA,
an index beyond the GPUs present), or this process's GPU when there is one, else the CPU. Does not own moving models
(`retromae.models.encoder`, `retromae.reranking.run`) nor the training loop's devices (Accelerate places those).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from retromae.runtime.options import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_NAME = re.compile(r"cpu|cuda(:(0|[1-9][0-9]*))?|mps")  # what `check_device_name` accepts


def check_device_name(name: str) -> None:
    """ValueError unless `name` names a device a command can run on: cpu, cuda (this process's GPU), cuda:N (the GPU
    numbered N) or mps; whether this machine has it is `resolve_device`'s to say."""
    if not DEVICE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a device a command runs on: give cpu, cuda, cuda:N (the GPU numbered N) or "
                         "mps, or leave it out (this process's GPU if any)")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The torch device `device` names (None: CUDA when available, else the CPU); ConfigError naming --device when
    it does not exist here."""
    import torch  # torch: only when a model is placed

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        # a name is the user's (checked whole); a torch.device is a process's own (accelerate's may be cpu:0)
        check_device_name(device if isinstance(device, str) else device.type)
        chosen = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise ConfigError(f"--device: {error}") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {device}: this machine has no CUDA device (torch {torch.__version__} sees "
                              f"none); leave --device out or give --device cpu")
        if chosen.index is not None and chosen.index >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device{'s' if count > 1 else ''} "
                              f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: this machine has no MPS device; leave --device out or give "
                          f"--device cpu")
    return chosen
