"""What a training run logs: `metrics.jsonl`, the window of steps each record sums, and the record itself.

Owns: `MetricsLog` (one JSON object per logged step, appended whole or not at all; trimmed on resume; the trackers
of --report-to fed the same records), `LossWindow` (the loss sums of the steps since the last record, device tensors
added without waiting for the device), `reduce_window` (the record of a window: mean losses over the window and all
processes, learning rates, tokens/s; the one host synchronisation of the loop) and `RunLog` (where each record
goes: the progress bar, the end-of-run summary, metrics.jsonl). Does not own when records are written
(`retromae.training.loop`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from retromae.runtime.console import TrainingSummary, notice
from retromae.runtime.io import append_line, write_text_atomic
from retromae.runtime.lines import appended_records, check_own_file
from retromae.training.trackers import Reporter

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """`metrics.jsonl`: one JSON object per logged step, appended whole or not at all
    (`retromae.runtime.io.append_line`); entries past a resumed step are dropped, and so is a last record a kill cut,
    with a line saying so. The trackers of `--report-to` (`reporter`) get every record too."""

    def __init__(self, path: Path, resume_step: int | None, reporter: Reporter | None = None):
        self.path, self.reporter = path, reporter
        check_own_file(path)  # the run's own: a link there is not followed, read or written through
        if resume_step is not None and path.exists():
            records, torn = appended_records(path)
            if torn is not None:
                notice(f"{path}: line {torn} was cut by the stop of the run; dropped")
            kept = [json.dumps(record) for record in records if record["step"] <= resume_step]
            write_text_atomic(path, "".join(line + "\n" for line in kept), own=True)
        elif resume_step is None:
            path.unlink(missing_ok=True)

    def append(self, record: dict[str, float]) -> None:
        append_line(self.path, json.dumps(record))
        if self.reporter is not None:
            self.reporter.log(record)

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.finish()


class LossWindow:
    """Loss sums (device tensors, added without waiting for the device), step count, tokens and whether each step's
    loss was finite since the last log line."""

    def __init__(self) -> None:
        self.totals: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.tokens = 0
        self.started = time.perf_counter()
        self.finite: list[torch.Tensor] = []  # per step, whether its loss was finite (device flags, read on failure)

    def add(self, totals: dict[str, torch.Tensor], tokens: int) -> None:
        for name, value in totals.items():
            self.totals[name] = self.totals[name] + value if name in self.totals else value
        if "loss" in totals:
            self.finite.append(torch.isfinite(totals["loss"]))
        self.steps += 1
        self.tokens += tokens


def reduce_window(window: LossWindow, accelerator: Accelerator, optimizer: torch.optim.Optimizer, step: int,
                  separate_heads: bool) -> tuple[dict[str, float], int]:
    """The record of `step` (mean loss components over the window and all processes; tokens/s over all processes)
    and the window's tokens summed over all processes, the caller adding its running total.

    The one host synchronisation of the loop: the values are read (`tolist`) before the clock, so tokens/s
    counts the device's time too. Tokens are summed as int64: float32 rounds counts past 2^24."""
    names = sorted(window.totals)
    means = torch.stack([window.totals[n] for n in names]) / window.steps  # (C,) on the device
    summed = accelerator.reduce(means.float(), reduction="sum").tolist()
    tokens = reduced_tokens(window.tokens, accelerator, means.device)
    world = accelerator.num_processes
    record: dict[str, float] = {"step": step}
    record.update({name: summed[i] / world for i, name in enumerate(names)})
    rates = {group["body"]: group["lr"] for group in optimizer.param_groups}
    record["lr"] = rates.get(True, rates.get(False))
    if separate_heads and False in rates:
        record["head_lr"] = rates[False]
    record["tokens_per_s"] = tokens / max(time.perf_counter() - window.started, 1e-9)
    return record, tokens


def reduced_tokens(tokens: int, accelerator: Accelerator, device: torch.device) -> int:
    """This window's tokens summed over all processes, exactly (int64)."""
    count = torch.tensor([tokens], dtype=torch.int64, device=device)
    return int(accelerator.reduce(count, reduction="sum").item())


class RunLog:
    """Where each record of a run goes: the progress bar (its postfix keeps the latest value of every metric, probes
    between probes), the end-of-run summary and, on the main process, metrics.jsonl (`metrics`, None elsewhere)."""

    def __init__(self, bar: tqdm, summary: TrainingSummary, metrics: MetricsLog | None) -> None:
        self.bar, self.summary, self.metrics = bar, summary, metrics
        self.shown: dict[str, float] = {}

    def add(self, record: dict[str, float]) -> None:
        self.shown.update(record)
        self.bar.set_postfix({k: f"{v:.4g}" for k, v in self.shown.items() if k not in ("step", "tokens")})
        self.summary.add(record)
        if self.metrics:
            self.metrics.append(record)

    def close(self) -> None:
        self.bar.close()
        if self.metrics:
            self.metrics.close()
