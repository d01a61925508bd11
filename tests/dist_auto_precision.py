"""Run under torch.distributed.run with 2 CPU (gloo) processes (tests/test_round_ten_ranks.py): rank 0 on a CPU where
`auto` is bf16, rank 1 on one where it is float32; each prints the precision it trains and encodes in, the text and
the rows the main process sent."""

from __future__ import annotations

import os

os.environ["RETROMAE_CPU_BF16"] = "1" if os.environ["RANK"] == "0" else "0"

import torch  # noqa: E402
from conftest import bare_config  # noqa: E402

from retromae.runtime.broadcast import from_main, rows_from_main  # noqa: E402
from retromae.runtime.precision import dtype_label, resolve_dtype  # noqa: E402
from retromae.training.config import TrainingConfig  # noqa: E402
from retromae.training.setup import make_accelerator  # noqa: E402

accelerator = make_accelerator(bare_config(TrainingConfig, mixed_precision="auto", distributed_timeout=2))
dtype = dtype_label(resolve_dtype("auto", torch.device("cpu")))
sent = from_main("données\tà·✓" if accelerator.is_main_process else "", accelerator)
print(f"rank {accelerator.process_index}: {accelerator.mixed_precision} {dtype} {sent!r}", flush=True)
rows = rows_from_main([[3, 1, 4], [], [15, 9]] if accelerator.is_main_process else None, 3, 3, accelerator)
print(f"rank {accelerator.process_index} rows: {rows}", flush=True)
