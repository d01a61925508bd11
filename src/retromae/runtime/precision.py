"""The precision a run computes in: what `auto` (--mixed-precision, --dtype) resolves to on this machine, and that
resolved value as every record of a run holds it, so that a record says what ran.

Owns `resolve_mixed_precision` (a training run's, in Accelerate's names), `resolve_dtype` (an encoder's autocast
dtype) and `dtype_label` (that dtype as --dtype names it: what encode.json, and index.json's copy of it, record);
`resolved_precision` (the precision options of a command's config as they resolve here: what
`run_folder.run_identity` records, so that a training run's marker and checkpoints and evaluate's report folder say
what ran, and a resume where `auto` resolves otherwise is refused as an explicit change of precision is, the refusal
saying so: `precision_change`); and the rule for records made before precision was resolved (`unresolved`): their
`auto` ran in a precision no record says, so it is taken as this run's, with a note (`note_unresolved`) — refusing
would leave every run started before unable to continue, and the machine that resumes it most often is the one that
began it. Does not own the machine's capability (`runtime.cpu_features.auto_bf16`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retromae.runtime.console import notice
from retromae.runtime.cpu_features import auto_bf16
from retromae.runtime.devices import resolve_device
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError, require
from retromae.runtime.processes import without_gpus

AUTO = "auto"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# A record's precision field and the value its absence means (encode.json before precision was recorded: float32,
# as its backend was torch's before backends were recorded); a training identity always holds mixed_precision.
PRECISION_FIELDS = {"mixed_precision": None, "dtype": "float32"}
CPU_FP16 = ("--mixed-precision fp16: not on a CPU, where Accelerate would train in float32 without a word (it has "
            "no fp16 autocast there); use bf16 (autocast, on AMX or AVX-512 bf16 where the CPU has them) or no")


def resolve_mixed_precision(requested: str) -> str:
    """--mixed-precision as Accelerate takes it: "auto" is bf16 on a CUDA GPU that supports it and on a CPU where
    bf16 autocast was measured to pay (`retromae.runtime.cpu_features.auto_bf16`: AMX), else "no" (fp32); fp16
    without a GPU is refused (ConfigError), where Accelerate would quietly run float32."""
    import torch  # torch: only when a run resolves its precision

    cuda = torch.cuda.is_available() and not without_gpus()
    if requested == "fp16" and not (cuda or torch.backends.mps.is_available()):
        raise ConfigError(CPU_FP16)
    if requested != AUTO:
        return requested
    if cuda:
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if not torch.backends.mps.is_available() and auto_bf16() else "no"


def resolve_dtype(dtype: Any, device: Any) -> Any:
    """The autocast dtype (a torch dtype) of `dtype` (a --dtype name or a torch dtype) on the torch `device`: None
    means full float32; "auto" is bf16 (or fp16) on CUDA, bf16 on a CPU where it was measured to pay
    (`retromae.runtime.cpu_features.auto_bf16`: AMX), float32 elsewhere."""
    import torch  # torch: only when an encoder is loaded

    if isinstance(dtype, torch.dtype):
        return None if dtype == torch.float32 else dtype
    if dtype in (None, AUTO):
        if device.type == "cpu":
            return torch.bfloat16 if auto_bf16() else None
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    require(dtype in DTYPE_NAMES, "dtype", f"must be auto or one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    return None if dtype == "float32" else getattr(torch, dtype)


def dtype_label(dtype: Any) -> str:
    """An autocast dtype (`resolve_dtype`'s) as --dtype names it: None (no autocast) is float32."""
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


def resolved_precision(config: Any) -> dict[str, str]:
    """The precision options `config` has (--mixed-precision, --dtype), each as this run computes in it here: `auto`
    resolved (`resolve_mixed_precision`; `resolve_dtype` on --device, and float32 under a backend other than torch,
    which computes in float32 whatever --dtype says), an explicit value as given."""
    resolved = {}
    if isinstance(getattr(config, "mixed_precision", None), str):
        resolved["mixed_precision"] = resolve_mixed_precision(config.mixed_precision)
    if isinstance(getattr(config, "dtype", None), str):
        torch_backend = getattr(config, "backend", None) in (None, "torch")
        resolved["dtype"] = dtype_label(resolve_dtype(config.dtype, resolve_device(config.device))
                                        if torch_backend else None)
    return resolved


def unresolved(field: str, recorded: Any) -> bool:
    """Whether a record's `field` holds a precision of a run made before precision was resolved (`auto`): it matches
    whatever this run resolves to (the rule above)."""
    return field in PRECISION_FIELDS and recorded == AUTO


def precision_change(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What a refusal says of the precision fields two identities differ in: what ran and what runs now, and how to
    continue as it ran (an explicit value is recorded as the `auto` that resolved to it); empty where they agree."""
    said = []
    for field, absent in PRECISION_FIELDS.items():
        ran, now = saved.get(field, absent), current.get(field, absent)
        if (field in saved or field in current) and ran != now and not unresolved(field, ran):
            flag = f"--{field.replace('_', '-')}"
            said.append(f"the run computed in {quoted(ran)} and this one would in {quoted(now)}; {flag} auto "
                        f"resolves per machine, {flag} {quoted(ran)} continues as it ran")
    return "; ".join(said)


def note_unresolved(folder: Path, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Say, once, that the run continued in `folder` recorded `auto` (`unresolved`) and goes on in what it resolves
    to here."""
    for field in PRECISION_FIELDS:
        if unresolved(field, saved.get(field)) and field in current:
            notice(f"retromae: note: {folder}: its run recorded {field} auto, before records said what auto computed "
                   f"in; it continues in {quoted(current[field])}, what auto is on this machine")
