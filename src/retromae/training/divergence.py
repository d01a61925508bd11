"""Stopping a run that diverged: a loss or a weight turned NaN or infinite, found where the loop reads the device
anyway, so that nothing diverged is checkpointed or exported.

Owns the words of each stop (`nonfinite_losses`: the first step of the logged window whose loss was not finite;
`nonfinite_weights`: the weights any process holds, one read from the device) and the error raised
(`diverged`: what happened, this run's last good checkpoint, what to change). Does not own when the loop checks
(`retromae.training.loop`) or what finite means for a tensor (`retromae.models.finite`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn

from retromae.models.finite import nonfinite_parameters
from retromae.runtime.errors import NonFiniteError
from retromae.training.checkpoints import last_good
from retromae.training.metrics_log import LossWindow


def nonfinite_losses(record: dict[str, float], window: LossWindow, step: int) -> str | None:
    """"training stopped at step N: a non-finite loss (...)" when a loss of the window is NaN or infinite, else None.
    Read from the record just reduced (a sum is non-finite when any of its terms is), so that the check adds no wait
    for the device; N is the first step of the window whose loss this process saw non-finite."""
    bad = {name: value for name, value in record.items() if name in window.totals and not math.isfinite(value)}
    if not bad:
        return None
    finite = torch.stack(window.finite).cpu().tolist() if window.finite else []
    first = next((index for index, ok in enumerate(finite) if not ok), None)
    where = (step - window.steps + 1 + first if first is not None else f"{step - window.steps + 1}-{step}")
    losses = ", ".join(f"{name} {value}" for name, value in bad.items())
    return f"training stopped at step {where}: a non-finite loss ({losses})"


def nonfinite_weights(model: nn.Module, accelerator: Accelerator, step: int) -> str | None:
    """"training stopped after step N: the weights hold NaN or infinite values (...)" when any process holds such a
    weight, else None: checked before every checkpoint and at the end (before the command exports)."""
    bad = nonfinite_parameters(model)
    count = torch.tensor([len(bad)], dtype=torch.int64, device=accelerator.device)
    if not int(accelerator.reduce(count, reduction="sum").item()):
        return None
    shown = f" ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})" if bad else ""
    return f"training stopped after step {step}: the weights hold NaN or infinite values{shown}"


def diverged(what: str, output: Path, identity: dict) -> NonFiniteError:
    """The error of a stopped run: `what`, the last good checkpoint of this run and what to change; nothing of the
    diverged state is checkpointed or exported."""
    return NonFiniteError(f"{what}; {last_good(output, identity)}; nothing was exported: check the data, or start "
                          "again with a lower --learning-rate (or a longer --warmup-ratio)")
