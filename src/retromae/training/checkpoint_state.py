"""What a training checkpoint holds on disk, written and read without pickle: opening a run folder runs no code.

Owns the files of `checkpoints/step-N/` beside the run marker:

    model.safetensors      the model's tensors by parameter name; a tensor tied to another is stored once, its
                           other names listed in the header's metadata (`aliases`)
    optimizer.safetensors  the optimiser's tensors, `NAME/KEY` (e.g. `encoder.weight/exp_avg`)
    state.json             the loop's counters, the learning-rate schedule, the fp16 gradient scaler, the
                           optimiser's groups and its non-tensor values, the number of processes that wrote it,
                           the sha256 of the two tensor files (written after them: it binds them to this step)
    rng-R.json             process R's random generators (Python, NumPy, torch CPU and CUDA)

Tensors are read by safetensors, everything else as JSON whose numbers must be finite; a file that is neither, or does
not fit the model, is refused in one line naming it, and so is anything but a regular file at one of these names
(`runtime.lines.check_own_file`: a symbolic link is not followed, a FIFO not opened), a recorded step other than the
checkpoint's own (its folder's name, its schedule's) or beyond --max-steps, a field that restates the run otherwise than
the run's options do (`restated`: the data position, the schedule's base rates, the optimiser's settings) and a tensor
file other than the one saved with it (its sha256; a checkpoint written before they were recorded is read without that
check). A checkpoint in Accelerate's layout (`save_state`: pickles such as `custom_checkpoint_0.pkl`,
`random_states_0.pkl`, `optimizer.bin`, which Accelerate reads with `weights_only=False`) is refused unopened. The
optimiser's state is keyed by parameter name, so one layout serves one process, DDP, FSDP and DeepSpeed; under FSDP the
full state dicts are gathered to process 0 to be written and every process reads them
(`torch.distributed.checkpoint.state_dict`); under DeepSpeed (ZeRO 1, 2 or 3) the same is done with DeepSpeed's own
accessors: the model's float32 master weights and each parameter's optimiser state (`exp_avg`, ...) gathered whole, by
parameter name, and written back into the engine's partitions on resume. DeepSpeed's own checkpoint files (pickles its
engine reads with `weights_only=False`) are never written nor read. A checkpoint is thus the same files whatever wrote
it. Under DeepSpeed's fp16 the dynamic loss scale is not kept (it starts again).

Does not own where checkpoints live, their names, staging, pruning (`retromae.training.checkpoints`) or run markers
(`retromae.runtime.run_folder`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, broadcast
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from retromae.runtime.io import share_as_umask_allows
from retromae.runtime.lines import check_own_file, loads_finite, quoted
from retromae.runtime.options import ConfigError

FORMAT = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
# Files Accelerate's save_state wrote in checkpoints before this format: pickles, never opened.
LEGACY_PATTERNS = ("custom_checkpoint_*.pkl", "random_states_*.pkl", "optimizer*.bin", "scheduler*.bin",
                   "pytorch_model*.bin", "sampler*.bin", "dl_state_dict*.bin", "scaler.pt", "pytorch_model_fsdp_*",
                   "optimizer_*", "pytorch_model")
# The settings of an optimiser group the run's options give (`training.optimizer.build_optimizer`, AdamW's defaults,
# the schedule's `initial_lr`), which a checkpoint's groups must repeat; a group's `lr` is the rate of the checkpoint's
# own schedule (`optimizer.follow_schedule` replaces it), its other keys (`fused`, ...) how this machine runs AdamW.
GROUP_SETTINGS = ("initial_lr", "body", "weight_decay", "betas", "eps", "amsgrad", "maximize", "decoupled_weight_decay")
SCALER_SETTINGS = ("growth_factor", "backoff_factor", "growth_interval")
DIGEST_FILES = (MODEL_FILE, OPTIMIZER_FILE)
_MISSING = object()
# Errors a hostile or damaged file can raise while it is parsed or applied.
_READ_ERRORS = (OSError, ValueError, TypeError, KeyError, IndexError, RuntimeError, SafetensorError, OverflowError)


def rng_file(rank: int) -> str:
    return f"rng-{rank}.json"


def check_shared_folder(folder: Path, marker: str, accelerator: Accelerator) -> None:
    """Every process must see the file `marker` that process 0 wrote into `folder` (when some process sees it): on
    several nodes --output must be on a file system they all share, or a checkpoint would miss the files of the
    other nodes' processes. Checked before any work; `check_complete` checks each checkpoint too."""
    accelerator.wait_for_everyone()
    seen = torch.tensor([1 if (folder / marker).is_file() else 0], device=accelerator.device)
    seeing = int(accelerator.reduce(seen, reduction="sum").item())
    if 0 < seeing < accelerator.num_processes:
        raise ConfigError(f"{folder}: {accelerator.num_processes - seeing} of {accelerator.num_processes} processes "
                          f"cannot see the {marker} written there: on several nodes --output must be a folder on a "
                          "file system every node shares")


def check_complete(folder: Path, accelerator: Accelerator) -> None:
    """After every process wrote into the staging `folder`: process 0 must see every process's RNG file (on several
    nodes, --output on a file system they all share); decided on process 0 and raised on every process."""
    missing = -1
    if accelerator.is_main_process:
        missing = next((rank for rank in range(accelerator.num_processes)
                        if not (folder / rng_file(rank)).is_file()), -1)
    flag = broadcast(torch.tensor([missing], device=accelerator.device), from_process=0)
    if int(flag.item()) >= 0:
        raise ConfigError(f"{folder / rng_file(int(flag.item()))}: process {int(flag.item())} wrote it, but process 0 "
                          "cannot see it: on several nodes --output must be on a file system every node shares")


def _sharded(accelerator: Accelerator) -> bool:
    return accelerator.distributed_type == DistributedType.FSDP


def _deepspeed(accelerator: Accelerator) -> bool:
    return accelerator.distributed_type == DistributedType.DEEPSPEED


# -- writing ----------------------------------------------------------------------------------------------------


def save_training_state(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                        counters: Mapping[str, int], accelerator: Accelerator) -> None:
    """Write the training state into `folder` (every process calls it: FSDP gathers, each writes its RNG file).

    `model` and `optimizer` are the prepared ones (DDP/FSDP wrapped, `AcceleratedOptimizer`)."""
    weights, optimizer_state = _state_dicts(model, optimizer, accelerator)
    folder.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        tensors, values = _split_optimizer(optimizer_state)
        for name, content in ((MODEL_FILE, weights), (OPTIMIZER_FILE, tensors)):
            _save_tensors(folder / name, content)
            share_as_umask_allows(folder / name)  # safetensors creates its files 0600
        scaler = accelerator.scaler.state_dict() if accelerator.scaler is not None else None
        _write_json(folder / STATE_FILE, {
            "format": FORMAT, "processes": accelerator.num_processes, "counters": dict(counters),
            "scheduler": {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"},
            "scaler": scaler, "optimizer": {"param_groups": optimizer_state["param_groups"], "values": values},
            "sha256": {name: _sha256(folder / name) for name in DIGEST_FILES}})
    _write_json(folder / rng_file(accelerator.process_index), _rng_states())


def _state_dicts(model: nn.Module, optimizer: torch.optim.Optimizer,
                 accelerator: Accelerator) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(model state, optimiser state keyed by parameter name); under FSDP full, on process 0 only (a collective)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's wrapper around the torch optimiser
    if _sharded(accelerator):
        # torch.distributed.checkpoint: only for a sharded (FSDP) model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(model, inner, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if _deepspeed(accelerator):
        return _deepspeed_state_dicts(model, accelerator)
    plain = accelerator.unwrap_model(model)
    names = _parameter_names(plain, inner)
    state = inner.state_dict()
    return plain.state_dict(), {
        "state": {names[index]: value for index, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]}


def _deepspeed_state_dicts(model: nn.Module, accelerator: Accelerator) -> tuple[dict[str, torch.Tensor],
                                                                              dict[str, Any]]:
    """Under DeepSpeed: the whole model state with the float32 master weights, and each trained parameter's
    optimiser state gathered whole (`exp_avg`, `exp_avg_sq`, the step), keyed by name as `_state_dicts` keys them.
    A collective under ZeRO-3 (the model state is then whole on process 0 only)."""
    from deepspeed.utils import safe_get_full_optimizer_state

    plain = accelerator.unwrap_model(model)
    weights = accelerator.get_state_dict(model)
    put_master_weights(weights, plain)
    zero, names = model.optimizer, _trained_names(plain)
    _link_optimizer_states(zero)
    base = zero.optimizer  # the torch optimiser, stepping DeepSpeed's flat float32 partitions
    flat_state = next((base.state[flat] for flat in _flat_partitions(zero) if base.state.get(flat)), {})
    keys = [key for key, value in flat_state.items() if key != "step" and isinstance(value, torch.Tensor)]
    state: dict[str, dict[str, Any]] = {}
    for parameter, name in names.items():
        entries = {key: safe_get_full_optimizer_state(parameter, key).detach().float().cpu() for key in keys}
        if "step" in flat_state:
            entries["step"] = flat_state["step"].detach().clone().cpu()
        state[name] = entries
    groups = [{**{key: value for key, value in group.items() if key != "params"},
               "params": [names[parameter] for parameter in members if parameter in names]}
              for group, members in zip(base.param_groups, _group_members(zero), strict=True)]
    return weights, {"state": state, "param_groups": groups}


def _trained_names(model: nn.Module) -> dict[nn.Parameter, str]:
    """Each trained parameter of `model` by its first name (a tied parameter once)."""
    return {parameter: name for name, parameter in model.named_parameters() if parameter.requires_grad}


def _link_optimizer_states(zero: Any) -> None:
    """Point each parameter of ZeRO 1 and 2 (and DeepSpeed's bf16 optimiser) at its optimiser state again. They link
    once, after the first group's first step, when the other groups have no state yet (DeepSpeed steps its groups one
    by one): a parameter of a later group would then have no `exp_avg` to gather. ZeRO-3 reads the state itself."""
    if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):
        zero._hp_optimizer_states_linked = False
        zero._lazy_init_hp_params_optimizer_state()


def _group_members(zero: Any) -> list[list[nn.Parameter]]:
    """The model's parameters of each parameter group of DeepSpeed's optimiser (ZeRO 1 and 2, its bf16 optimiser;
    ZeRO-3's sub-groups joined back into their groups)."""
    groups = next(getattr(zero, name) for name in ("bit16_groups", "bf16_groups", "fp16_groups") if hasattr(zero, name))
    owner = getattr(zero, "sub_group_to_group_id", None)
    if owner is None:
        return list(groups)
    members: list[list[nn.Parameter]] = [[] for _ in zero.optimizer.param_groups]
    for sub_group, parameters in enumerate(groups):
        members[owner[sub_group]].extend(parameters)
    return members


def _flat_partitions(zero: Any) -> list[torch.Tensor]:
    """The flat float32 partitions DeepSpeed's optimiser steps (ZeRO 1 and 2, ZeRO-3, its bf16 optimiser): the keys
    of the torch optimiser's state."""
    names = ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat", "fp32_groups_flat_partition")
    return list(next(getattr(zero, name) for name in names if hasattr(zero, name)))


def put_master_weights(state: dict[str, torch.Tensor], model: nn.Module) -> None:
    """Each trained parameter of `model` in `state` (the engine's 16-bit weights under mixed precision) replaced by
    DeepSpeed's float32 master copy, under every name it has (tied weights). A collective under ZeRO-3, where the
    other processes' `state` is empty; a frozen parameter keeps the engine's weights (it has no master copy)."""
    from deepspeed.utils import safe_get_full_fp32_param

    names: dict[nn.Parameter, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(parameter, []).append(name)
    for parameter, aliases in names.items():
        master = safe_get_full_fp32_param(parameter) if parameter.requires_grad else None
        for name in aliases:
            if master is not None and name in state:
                state[name] = master.detach().float().cpu()


def _parameter_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each of the optimiser's parameters in the index order of its `state_dict` (a tied parameter by
    its first name, as `named_parameters` gives it)."""
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    return [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"]]


def _split_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, Any]]]:
    """The optimiser's per-parameter tensors (`NAME/KEY`) and its other per-parameter values (JSON)."""
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, dict[str, Any]] = {}
    for name, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}/{key}"] = value
            else:
                values.setdefault(name, {})[key] = value
    return tensors, values


def _save_tensors(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """safetensors refuses tensors sharing memory: a tensor that is the same view as an earlier one (tied weights)
    is stored once and named in the metadata; another view of the same memory is copied."""
    stored: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    storages: set[int] = set()
    for name, tensor in tensors.items():
        tensor = tensor.detach()
        view = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
                tensor.dtype, tensor.device)
        if view in seen:
            aliases[name] = seen[view]
            continue
        storage = tensor.untyped_storage().data_ptr()
        stored[name] = tensor.clone() if storage in storages and tensor.numel() else tensor.contiguous()
        seen[view] = name
        storages.add(storage)
    save_file({name: tensor.cpu() for name, tensor in stored.items()}, str(path),
              metadata={"aliases": json.dumps(aliases)})


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _write_json(path: Path, value: Any) -> None:
    # Inside the staging folder a checkpoint becomes visible only whole (`Trainer.save_checkpoint`'s rename).
    path.write_text(json.dumps(value, allow_nan=False) + "\n", encoding="utf-8")


def _rng_states() -> dict[str, Any]:
    name, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    cuda = [state.tolist() for state in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []
    return {"python": [version, list(internal), gauss], "numpy": [name, keys.tolist(), position, has_gauss, cached],
            "torch": torch.get_rng_state().tolist(), "cuda": cuda}


# -- reading ----------------------------------------------------------------------------------------------------


def load_training_state(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                        accelerator: Accelerator, *, step: int, max_steps: int, accumulation: int) -> dict[str, int]:
    """Restore what `save_training_state` wrote into `folder`, the checkpoint of step `step` (its name's) of a run
    of `max_steps` steps and `accumulation` micro-batches a step into the run's fresh `optimizer` and `scheduler`
    (every process calls it); returns the counters.

    ConfigError naming the file for a checkpoint in the old pickle layout, or a file that is damaged, hostile, of
    another model or not the one saved with it (`_check_digest`); naming state.json for a step other than `step` or
    beyond `max_steps` (`_check_step`), or a field that restates the run otherwise (`_check_restated`)."""
    state_path = folder / STATE_FILE
    if not os.path.lexists(state_path):
        raise ConfigError(_not_this_format(folder))
    state = _read_json(state_path)
    with _reading(state_path):
        if state["format"] != FORMAT:
            raise ValueError(f"format {state['format']!r}; this retromae reads format {FORMAT}")
        counters, processes = _counters(state["counters"]), state["processes"]
        _check_step(state_path, counters["step"], state["scheduler"]["last_epoch"], step, max_steps)
        if type(processes) is not int or processes < 1:
            raise ValueError(f"processes must be a positive integer, not {processes!r}")
        groups, values = _optimizer_structure(state["optimizer"])
        _check_restated(state_path, state, restated(scheduler, optimizer, accelerator.scaler, step, accumulation))
        digests = _digests(state)
        _load_scheduler(scheduler, state["scheduler"])
        if accelerator.scaler is not None:
            accelerator.scaler.load_state_dict(state["scaler"])
    weights = _read_tensors(folder / MODEL_FILE, digests)
    with _reading(folder / MODEL_FILE):
        _load_model(model, weights, accelerator)
    tensors = _read_tensors(folder / OPTIMIZER_FILE, digests)
    with _reading(folder / OPTIMIZER_FILE):
        _load_optimizer(model, optimizer, _join_optimizer(tensors, values, groups, optimizer), accelerator)
    _load_rng(folder, accelerator.process_index, processes)
    return counters


def _not_this_format(folder: Path) -> str:
    legacy = sorted(path for pattern in LEGACY_PATTERNS for path in folder.glob(pattern))
    if legacy:
        return (f"{legacy[0]}: a checkpoint in Accelerate's pickle layout (written by an older retromae); it is not "
                "opened, since reading a pickle can run code planted in it. Start the run again with --overwrite "
                "(or without --resume into another --output)")
    return f"{folder / STATE_FILE}: missing; {folder} is not a complete checkpoint (delete it to resume from another)"


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn any failure while a checkpoint file is parsed or applied into one line naming the file."""
    try:
        yield
    except ConfigError:
        raise
    except _READ_ERRORS as error:
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"{path}: not a checkpoint file of this run ({type(error).__name__}: {cause[:300]})") \
            from None


def _read_json(path: Path) -> Any:
    check_own_file(path)
    with _reading(path):
        return loads_finite(path.read_text(encoding="utf-8"))


def read_model_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's model tensors by name (`MODEL_FILE`), checked as a resume checks them (its sha256 against the
    one its state.json records, where a state.json is beside it: not beside adapt's distilled student); for reading
    one checkpoint's weights without its training state (`retromae adapt`'s guard)."""
    state_path = path.parent / STATE_FILE
    if not os.path.lexists(state_path):
        return _read_tensors(path, None)
    state = _read_json(state_path)
    with _reading(state_path):
        digests = _digests(state)
    return _read_tensors(path, digests)


def _read_tensors(path: Path, digests: Mapping[str, str] | None) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, the aliases of its metadata restored; each floating tensor finite; the
    file the one whose sha256 `digests` records under its name (`_check_digest`)."""
    check_own_file(path)
    with _reading(path):
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
            aliases = loads_finite((handle.metadata() or {}).get("aliases", "{}"))
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"tensor {name} holds non-finite values")
        tensors.update({alias: tensors[original] for alias, original in dict(aliases).items()})
    _check_digest(path, digests)
    return tensors


def _digests(state: Mapping[str, Any]) -> dict[str, str] | None:
    """The sha256 of each tensor file that state.json records (`DIGEST_FILES`); None for a checkpoint written before
    they were recorded."""
    if "sha256" not in state:
        return None
    digests = state["sha256"]
    if not (isinstance(digests, dict) and sorted(digests) == sorted(DIGEST_FILES)
            and all(isinstance(value, str) for value in digests.values())):
        raise ValueError(f"sha256 must name the digests of {' and '.join(DIGEST_FILES)}")
    return digests


def _check_digest(path: Path, digests: Mapping[str, str] | None) -> None:
    """ConfigError naming `path` when its sha256 is not the one its checkpoint's state.json records (`digests`): the
    model and optimiser files of another step (or run) would resume as this step's, training its steps again."""
    if digests is not None and _sha256(path) != digests[path.name]:
        raise ConfigError(f"{path}: not the file saved with this checkpoint (its sha256 is not the one {STATE_FILE} "
                          f"records); {path.parent} is damaged (delete it to resume from another)")


def _counters(saved: Any) -> dict[str, int]:
    counters = {key: saved[key] for key in ("step", "micro_batches", "tokens")}
    if not all(type(value) is int and value >= 0 for value in counters.values()):
        raise ValueError(f"counters must be non-negative integers, not {counters}")
    return counters


def _check_step(path: Path, recorded: int, scheduled: Any, step: int, max_steps: int) -> None:
    """ConfigError naming state.json (`path`) unless the step it records and its schedule's are `step`, the step of
    its checkpoint's name, and at most `max_steps`: a step beyond the run's end would export the checkpoint's weights
    as the finished model, one short of its name would train steps again."""
    if recorded != step or scheduled != step:
        raise ConfigError(f"{path}: records step {recorded} (its schedule step {scheduled!r}), but it is the "
                          f"checkpoint of step {step}; {path.parent} is damaged (delete it to resume from another)")
    if step > max_steps:
        raise ConfigError(f"{path}: the checkpoint of step {step}, beyond --max-steps {max_steps}; give --max-steps "
                          f"{step} or more to resume it")


def restated(scheduler: Any, optimizer: torch.optim.Optimizer, scaler: Any, step: int,
             accumulation: int) -> dict[str, Any]:
    """The fields of the state.json of step `step` that the run determines, by their place in it (as
    `optimizer.param_groups.0.betas`), with the values this run gives: the data position (each process consumed
    `accumulation` micro-batches a step), the fresh schedule's base rates and counts, each fresh optimiser group's
    settings (`GROUP_SETTINGS`) and the gradient scaler's. Not the step (`_check_step` owns it), nor the rates of the
    checkpoint's schedule (`_last_lr`, each group's `lr`): a run resumed with a longer --max-steps follows its own
    (`optimizer.follow_schedule`)."""
    fields: dict[str, Any] = {"counters.micro_batches": step * accumulation}
    schedule = {key: value for key, value in scheduler.state_dict().items()
                if key not in ("lr_lambdas", "_last_lr", "last_epoch")}
    fields.update({f"scheduler.{key}": value for key, value in {**schedule, "_step_count": step + 1}.items()})
    groups = getattr(optimizer, "optimizer", optimizer).param_groups
    fields.update({f"optimizer.param_groups.{index}.{key}": group[key] for index, group in enumerate(groups)
                   for key in GROUP_SETTINGS if key in group})
    if scaler is not None:
        fields.update({f"scaler.{key}": value for key, value in scaler.state_dict().items() if key in SCALER_SETTINGS})
    return json.loads(json.dumps(fields))  # as state.json holds them (a tuple as a list)


def _check_restated(path: Path, state: Any, run: Mapping[str, Any]) -> None:
    """ConfigError naming state.json (`path`) and the first field of `run` (`restated`) it records otherwise: the
    checkpoint, not the run's options, would set the learning rate, AdamW's settings or the data the run reads next.
    A field it does not hold is left to the loaders (each takes the run's, or refuses)."""
    step = state["counters"]["step"]
    for field, expected in run.items():
        saved = _at(state, field)
        if saved is not _MISSING and saved != expected:
            raise ConfigError(f"{path}: {field}: the checkpoint of step {step} says {quoted(saved)}, the run's "
                              f"options make {expected!r}; {path.parent} is damaged (delete it to resume from another)")


def _at(value: Any, field: str) -> Any:
    """The value at the dotted place `field` of a JSON value (`optimizer.param_groups.0.betas`); `_MISSING` where
    it holds none."""
    for key in field.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def _optimizer_structure(saved: Any) -> tuple[list[dict], dict[str, dict[str, Any]]]:
    """(parameter groups, per-parameter non-tensor values) of `state.json`, their shapes and numbers checked."""
    groups, values = saved["param_groups"], saved["values"]
    if not (isinstance(groups, list) and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
            and isinstance(values, dict) and all(isinstance(v, dict) for v in values.values())):
        raise ValueError("the optimiser's groups must be a list of objects with `params`, its values an object")
    _check_finite(groups)
    _check_finite(values)
    return groups, values


def _load_scheduler(scheduler: Any, saved: dict[str, Any]) -> None:
    """Only the fields the schedule itself saves, its factor functions kept (a JSON value never replaces them)."""
    expected = {k for k in scheduler.state_dict() if k != "lr_lambdas"}
    if set(saved) != expected:
        raise ValueError(f"the schedule's fields are {sorted(saved)}, expected {sorted(expected)}")
    _check_finite(saved)
    scheduler.load_state_dict({**saved, "lr_lambdas": [None] * len(scheduler.lr_lambdas)})


def _check_finite(value: Any) -> None:
    """Every float in a JSON value finite: the parser refuses `NaN` and `Infinity`, but reads `1e999` as inf."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        _check_finite(item)


def _load_model(model: nn.Module, weights: dict[str, torch.Tensor], accelerator: Accelerator) -> None:
    if _deepspeed(accelerator):
        _load_deepspeed_model(accelerator.unwrap_model(model), weights)
    elif _sharded(accelerator):
        # torch.distributed.checkpoint: only for a sharded (FSDP) model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    else:
        accelerator.unwrap_model(model).load_state_dict(weights, strict=True)


def _load_deepspeed_model(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """The whole weights into DeepSpeed's model (gathered whole under ZeRO-3, then partitioned again) and into its
    float32 master copies; every process loads the same file."""
    import deepspeed
    from deepspeed.utils import safe_set_full_fp32_param

    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        model.load_state_dict(weights, strict=True)
    for parameter, name in _trained_names(model).items():
        safe_set_full_fp32_param(parameter, weights[name].float())


def _load_deepspeed_optimizer(model: nn.Module, zero: Any, saved: dict[str, Any]) -> None:
    """Each trained parameter's saved optimiser state into DeepSpeed's partitions (created first when the engine
    has not stepped yet: torch's AdamW makes its state at the first step), and the groups' settings."""
    from deepspeed.utils import safe_set_full_optimizer_state

    names, base = _trained_names(model), zero.optimizer
    unknown = sorted(set(saved["state"]) - set(names.values()))
    if unknown:
        raise KeyError(f"state for {unknown[0]}, which the model's optimiser does not have")
    if len(saved["param_groups"]) != len(base.param_groups):
        raise ValueError(f"{len(saved['param_groups'])} parameter groups, the engine's optimiser has "
                         f"{len(base.param_groups)}")
    first = next(iter(saved["state"].values()), {})
    for group, settings in zip(base.param_groups, saved["param_groups"], strict=True):
        group.update({key: value for key, value in settings.items() if key != "params"})
    for flat in _flat_partitions(zero):
        fresh = {key: torch.zeros_like(flat) for key in first if key != "step"}
        base.state[flat] = {**fresh, **base.state.get(flat, {})}
        if "step" in first:
            base.state[flat]["step"] = first["step"].clone().to(flat.device)
    _link_optimizer_states(zero)
    for parameter, name in names.items():
        for key, value in saved["state"].get(name, {}).items():
            if key != "step":
                safe_set_full_optimizer_state(parameter, value.float(), key)


def _join_optimizer(tensors: dict[str, torch.Tensor], values: dict[str, dict[str, Any]], groups: list[dict],
                    optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimiser state dict keyed by parameter name, each group with the run's settings (`_check_restated`
    compared them), its parameters and the rate of its checkpoint's schedule (`lr`, a number)."""
    state: dict[str, dict[str, Any]] = {name: dict(entries) for name, entries in values.items()}
    for key, tensor in tensors.items():
        name, _, field = key.rpartition("/")
        state.setdefault(name, {})[field] = tensor
    current = getattr(optimizer, "optimizer", optimizer).param_groups
    if len(groups) != len(current):
        raise ValueError(f"{len(groups)} parameter groups, the model's optimiser has {len(current)}")
    if not all(type(group.get("lr")) in (int, float) for group in groups):
        raise ValueError("each parameter group's lr must be a number")
    restored = [{**{key: value for key, value in now.items() if key != "params"}, "lr": group["lr"],
                 "params": group["params"]} for group, now in zip(groups, current, strict=True)]
    return {"state": state, "param_groups": restored}


def _load_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any],
                    accelerator: Accelerator) -> None:
    inner = getattr(optimizer, "optimizer", optimizer)
    if _deepspeed(accelerator):
        _load_deepspeed_optimizer(accelerator.unwrap_model(model), model.optimizer, saved)
        return
    if _sharded(accelerator):
        # torch.distributed.checkpoint: only for a sharded (FSDP) model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, inner, saved, options=StateDictOptions(full_state_dict=True))
        return
    names = _parameter_names(accelerator.unwrap_model(model), inner)
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(saved["state"]) - set(index))
    if unknown:
        raise KeyError(f"state for {unknown[0]}, which the model's optimiser does not have")
    groups = [{**group, "params": [index[name] for name in group["params"]]} for group in saved["param_groups"]]
    if [len(group["params"]) for group in groups] != [len(group["params"]) for group in inner.param_groups]:
        raise ValueError("its parameter groups differ from the model's")
    optimizer.load_state_dict({"state": {index[name]: entries for name, entries in saved["state"].items()},
                               "param_groups": groups})


def _load_rng(folder: Path, rank: int, processes: int) -> None:
    """This process's generators; a process beyond those that wrote the checkpoint keeps its seeded ones."""
    path = folder / rng_file(rank)
    if rank >= processes:
        return
    states = _read_json(path)
    with _reading(path):
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
        name, keys, position, has_gauss, cached = states["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
        torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))
        if torch.cuda.is_available() and states["cuda"]:
            torch.cuda.set_rng_state_all([torch.tensor(state, dtype=torch.uint8) for state in states["cuda"]])
