"""What the main process of a launch sends every other, where each would otherwise find its own.

Owns `from_main`: a short text (a refusal, a setting read from the machine or measured on it) sent from the main
process to every process of a launch, so that all act on one; and `rows_from_main`: lists of row numbers the main
process found (fine-tuning's mined negatives), sent as one tensor. Neither pickles. Nothing heavy is imported at
module level. Does not own what is sent (`runtime.run_folder`, `runtime.precision`, `finetuning.run`,
`pretraining.run`, `finetuning.negatives`).
"""

from __future__ import annotations

from typing import Any

BROADCAST_BYTES = 4096  # the longest text the main process sends the others


def from_main(text: str, processes: Any) -> str:
    """The main process's `text` on every process of `processes` (an Accelerator or PartialState; with several
    processes a collective: each calls it), for what each would otherwise find on its own (a refusal, a setting
    resolved from its machine or measured on it), so that all act on one. Sent as its UTF-8 bytes in a tensor (no
    pickle between processes), at most `BROADCAST_BYTES`."""
    if processes.num_processes == 1:
        return text
    # torch and accelerate: only where processes exchange
    import torch
    from accelerate.utils import broadcast

    data = torch.zeros(BROADCAST_BYTES, dtype=torch.uint8, device=processes.device)
    encoded = text.encode("utf-8")[:BROADCAST_BYTES]
    data[:len(encoded)] = torch.frombuffer(bytearray(encoded), dtype=torch.uint8) if encoded else data[:0]
    return bytes(broadcast(data, from_process=0).cpu().tolist()).rstrip(b"\0").decode("utf-8", "replace")


def rows_from_main(rows: list[list[int]] | None, count: int, width: int, processes: Any) -> list[list[int]]:
    """The main process's `rows` (`count` lists of at most `width` row numbers, each at least 0; None on the other
    processes) on every process of `processes` (with several processes a collective: each calls it), sent as one
    int64 tensor of `count` x `width`, -1 where a list is shorter (no pickle between processes)."""
    if processes.num_processes == 1:
        return rows
    # torch and accelerate: only where processes exchange
    import torch
    from accelerate.utils import broadcast

    data = torch.full((count, width), -1, dtype=torch.int64)
    if processes.is_main_process:
        for index, row in enumerate(rows):
            data[index, :len(row)] = torch.tensor(row, dtype=torch.int64)
    sent = broadcast(data.to(processes.device), from_process=0).cpu().tolist()
    return [[value for value in row if value >= 0] for row in sent]
