"""What `--vocabulary-loss auto` runs on a CPU: the fastest kernel at the run's shapes, measured on this machine.

Owns: the candidate kernels of the loss on the vocabulary (`candidates`: unfused; chunked with PyTorch's own
products, MKL on the CPU; chunked with oneDNN's, in float32), timing them at the run's shapes (`time_candidates`),
choosing from timings (`choose`), and the cache of those timings (`CACHE_FILE` in the user's cache folder, one entry
per CPU model, thread count, torch version, precision and shape), which `auto_kind` puts together. Does not own
the kernels (`retromae.losses.fused_loss`) nor where a run applies the choice (`retromae.pretraining.run`).

Why measure: the fused kernels were tuned on an AMD EPYC, where MKL runs AVX2 kernels and oneDNN AVX-512 ones, so
oneDNN's products won there; on an Intel Xeon with AVX-512 and AMX, MKL runs AVX-512 too and oneDNN's float32
products were the slowest of the three (docs/performance.md). No rule on the vendor held on both, so each machine
measures: a fused kernel is chosen only when it takes at most `MARGIN` of the unfused time, so `auto` is never
slower than unfused beyond what a measurement moves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from retromae.losses.fused_loss import linear_cross_entropy_sum
from retromae.models import onednn
from retromae.runtime.cache_entries import entry_lock
from retromae.runtime.cpu_features import cpu_model
from retromae.runtime.errors import DataError
from retromae.runtime.io import cache_folder, write_text_atomic
from retromae.runtime.lines import read_json_file

CACHE_FILE = "vocabulary-loss.json"
MARGIN = 0.95  # a fused kernel is chosen when it takes at most this share of the unfused kernel's time
CALIBRATION_ROWS = 2048  # rows timed at most: four chunks of MiniLM's or BERT's vocabulary
ROUNDS = 3  # timed rounds after one warm-up, alternating between the candidates; the fastest round counts

Timings = dict[str, float]


def candidates(dtype: torch.dtype) -> tuple[str, ...]:
    """The kinds worth timing in `dtype`: "chunked" (oneDNN's products) differs from "chunked-torch" only in
    float32 with oneDNN present."""
    fused = ("chunked-torch", "chunked") if dtype == torch.float32 and onednn.available() else ("chunked-torch",)
    return ("unfused", *fused)


def choose(timings: Timings, margin: float = MARGIN) -> str:
    """The kind to run from seconds per kind (unfused among them): the fastest fused kind when it takes at most
    `margin` of the unfused time, else unfused."""
    fastest = min((kind for kind in timings if kind != "unfused"), key=timings.__getitem__, default="unfused")
    return fastest if timings[fastest] <= margin * timings["unfused"] else "unfused"


def cache_key(width: int, vocab: int, rows: int, dtype: torch.dtype) -> str:
    """What a measurement depends on: the CPU model, threads, torch version, precision and shape."""
    return (f"{cpu_model()} | {torch.get_num_threads()} threads | torch {torch.__version__} | "
            f"{str(dtype).removeprefix('torch.')} | {rows} x {width} -> {vocab}")


def _loss_step(kind: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               labels: torch.Tensor) -> Callable[[], None]:
    """One forward and backward pass of the summed cross-entropy of x W^T + b, as `kind` computes it."""
    def step() -> None:
        if kind == "unfused":
            loss = F.cross_entropy(F.linear(x, weight, bias).float(), labels, reduction="sum")
        else:
            loss = linear_cross_entropy_sum(x, weight, bias, labels, use_onednn=kind == "chunked")
        loss.backward()
    return step


def time_candidates(width: int, vocab: int, rows: int, dtype: torch.dtype, rounds: int = ROUNDS) -> Timings:
    """Seconds per forward and backward pass of each candidate on random states (rows, width) against a random
    (vocab, width) projection, under autocast in `dtype` unless float32: the fastest of `rounds` rounds after a
    warm-up, rounds alternating between the candidates so that a busy machine slows them alike."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=generator).requires_grad_()
    weight = (torch.randn(vocab, width, generator=generator) * width ** -0.5).requires_grad_()
    bias = torch.zeros(vocab, requires_grad=True)
    labels = torch.randint(vocab, (rows,), generator=generator)
    steps = {kind: _loss_step(kind, x, weight, bias, labels) for kind in candidates(dtype)}
    seconds: dict[str, list[float]] = {kind: [] for kind in steps}
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        for round_ in range(rounds + 1):
            for kind, step in steps.items():
                started = time.perf_counter()
                step()
                if round_:
                    seconds[kind].append(time.perf_counter() - started)
    return {kind: min(values) for kind, values in seconds.items()}


def read_cache(path: Path) -> dict[str, Timings]:
    """The cached timings by key; an unreadable, invalid or missing cache is empty (it is measured again)."""
    try:
        entries = read_json_file(path, dict)
    except (OSError, DataError):
        return {}
    return {key: value for key, value in entries.items() if _valid_timings(value)}


def _valid_timings(value: object) -> bool:
    return (isinstance(value, dict) and "unfused" in value
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value.values()))


def auto_kind(width: int, vocab: int, rows: int, dtype: torch.dtype, cache: Path | None = None,
              measure: Callable[..., Timings] = time_candidates) -> tuple[str, Timings, bool]:
    """(the kind `auto` runs, the timings it was chosen from, whether they were measured now rather than cached)
    for a loss over `rows` states of `width` against `vocab` words in `dtype`, on this CPU."""
    rows = min(rows, CALIBRATION_ROWS)
    path = cache or cache_folder() / CACHE_FILE
    key = cache_key(width, vocab, rows, dtype)
    entries = read_cache(path)
    fresh = key not in entries
    if fresh:
        entries[key] = measure(width, vocab, rows, dtype)
        record_timings(path, key, entries[key])
    return choose(entries[key]), entries[key], fresh


def record_timings(path: Path, key: str, timings: Timings) -> None:
    """Add `timings` under `key` to the cache file `path`: read again and written back under its folder's lock
    (`cache_entries.entry_lock`, as the caches' entries are), so that processes recording at once each keep their
    timings; a cache that cannot be written is left as it is (it only saves the next run a measurement)."""
    try:
        with entry_lock(path.parent):
            write_text_atomic(path, _dumps({**read_cache(path), key: timings}))
    except OSError:
        pass


def _dumps(entries: dict[str, Timings]) -> str:
    return json.dumps(entries, indent=2, sort_keys=True) + "\n"


def describe(kind: str, timings: Timings, fresh: bool) -> str:
    """One line for the run's log: what auto chose and from which timings."""
    measured = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in timings.items())
    where = "measured now" if fresh else "cached"
    return f"vocabulary loss: auto runs {kind} on this CPU ({where}: {measured} a pass)"
