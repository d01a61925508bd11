"""The precision a run computes in: what `auto` (--mixed-precision, --dtype) resolves to on this machine (in a launch
of several processes, on the main process's, for every process), and that resolved value as every record of a run
holds it, so that a record says what ran.

Owns `resolve_mixed_precision` (a training run's, in Accelerate's names), `resolve_dtype` (an encoder's autocast
dtype), the one answer both take `auto` from (`bf16_under_auto`: this machine's, `machine_bf16`, or in a launch of
several processes the main process's, which every process takes where their state is made, `agree_on_auto`) and
`dtype_label` (that dtype as --dtype names it: what encode.json, and index.json's copy of it, record);
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

from retromae.runtime.broadcast import from_main
from retromae.runtime.console import notice
from retromae.runtime.cpu_features import auto_bf16
from retromae.runtime.devices import resolve_device
from retromae.runtime.lines import quoted
from retromae.runtime.options import ConfigError, require

AUTO = "auto"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# A record's precision field and the value its absence means (encode.json before precision was recorded: float32,
# as its backend was torch's before backends were recorded); a training identity always holds mixed_precision.
PRECISION_FIELDS = {"mixed_precision": None, "dtype": "float32"}
_LAUNCH_ANSWERS: dict[str, bool] = {}  # device type -> the main process's `machine_bf16` (`agree_on_auto`)
CPU_FP16 = ("--mixed-precision fp16: not on a CPU, where Accelerate would train in float32 without a word (it has "
            "no fp16 autocast there); use bf16 (autocast, on AMX or AVX-512 bf16 where the CPU has them) or no")


def resolve_mixed_precision(requested: str) -> str:
    """--mixed-precision as Accelerate takes it: "auto" is bf16 on the run's device where `bf16_under_auto` says so
    (a CUDA GPU that supports it, a CPU with AMX), else "no" (fp32); fp16 without a GPU is refused (ConfigError),
    where Accelerate would quietly run float32."""
    import torch  # torch: only when a run resolves its precision

    cuda = torch.cuda.is_available()
    mps = torch.backends.mps.is_available()
    if requested == "fp16" and not (cuda or mps):
        raise ConfigError(CPU_FP16)
    if requested != AUTO:
        return requested
    return "bf16" if bf16_under_auto("cuda" if cuda else "mps" if mps else "cpu") else "no"


def resolve_dtype(dtype: Any, device: Any) -> Any:
    """The autocast dtype (a torch dtype) of `dtype` (a --dtype name or a torch dtype) on the torch `device`: None
    means full float32; "auto" is bf16 where `bf16_under_auto` says so, else fp16 on CUDA and float32 elsewhere."""
    import torch  # torch: only when an encoder is loaded

    if isinstance(dtype, torch.dtype):
        return None if dtype == torch.float32 else dtype
    if dtype in (None, AUTO):
        if bf16_under_auto(device.type):
            return torch.bfloat16
        return torch.float16 if device.type == "cuda" else None
    require(dtype in DTYPE_NAMES, "dtype", f"must be auto or one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    return None if dtype == "float32" else getattr(torch, dtype)


def bf16_under_auto(device_type: str) -> bool:
    """Whether `auto` (--mixed-precision, --dtype) computes in bf16 autocast on a `device_type` device: in a launch of
    several processes, the main process's answer (`agree_on_auto`); else this machine's (`machine_bf16`)."""
    agreed = _LAUNCH_ANSWERS.get(device_type)
    return machine_bf16(device_type) if agreed is None else agreed


def machine_bf16(device_type: str) -> bool:
    """This machine's answer to `bf16_under_auto`: on a CUDA GPU that supports bf16, on a CPU where bf16 autocast was
    measured to pay (`retromae.runtime.cpu_features.auto_bf16`: AMX), on no other device (MPS)."""
    import torch  # torch: only when a run resolves its precision

    if device_type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device_type == "cpu" and auto_bf16()


def agree_on_auto(processes: Any) -> None:
    """Every process of `processes` (a launch of several; a collective: each calls it) takes the main process's answer
    to `bf16_under_auto` on the CPU and on the launch's device (`from_main`), so that `auto` computes in one precision
    on every process and what the main process records is what each ran: a node with AMX beside one without, or an
    A100 beside a V100, would otherwise each resolve its own. A process whose machine alone would answer otherwise
    says so in a note. Called where the processes' state is made (`runtime.processes.process_state`)."""
    own = {kind: machine_bf16(kind) for kind in dict.fromkeys(("cpu", processes.device.type))}
    said = from_main(" ".join(f"{kind}={int(answer)}" for kind, answer in own.items()), processes)
    _LAUNCH_ANSWERS.update({kind: answer == "1" for kind, answer in (pair.split("=") for pair in said.split())})
    for kind, answer in own.items():
        if _LAUNCH_ANSWERS[kind] != answer:
            notice(f"retromae: note: process {processes.process_index}: auto precision "
                   f"{'uses' if _LAUNCH_ANSWERS[kind] else 'leaves out'} bf16 autocast on {kind} as the main process "
                   "does, which this machine alone would not (--mixed-precision and --dtype choose)")


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
