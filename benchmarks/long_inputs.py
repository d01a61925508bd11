"""Peak memory of one enhanced-RetroMAE training step against the input length, with and without the blockwise mask.

Enhanced decoding's attention mask is (B, L, L): 64 Mi cells per example at 8,192 tokens (64 MiB of booleans, and
256 MiB of the float32 scores it is drawn from). Past `RetroMAE.mask_cells` (32 Mi) the objective decodes the query
stream a block of rows at a time and recomputes each block in the backward pass. For each length this prints the
peak resident memory of one forward + backward step, measured in a fresh process (`ru_maxrss` less the memory held
before the step), for: plain MLM on the same backbone (what the backbone alone costs), RetroMAE with the blockwise
mask (the default), and RetroMAE with the whole mask (mask_cells raised to B * L * L). The backbone is a random
ModernBERT-shaped model (rotary, global and 128-token local attention, `--hidden-size`, `--layers`), B = `--batch-size`.

Run: PYTHONPATH=src python benchmarks/long_inputs.py [--lengths 512 1024 2048 4096 8192] [--batch-size 1]
     [--hidden-size 64] [--layers 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from common import machine_header

RUNS = ("mlm", "retromae blockwise", "retromae whole mask")
VOCAB = 1000


def child(args: argparse.Namespace) -> None:
    """One step at one length in this process; prints {"peak_mib", "seconds"} as JSON."""
    import torch
    from transformers import AutoModelForMaskedLM

    from retromae.backbones.registry import architecture_adapter
    from retromae.objectives import build_objective

    torch.manual_seed(0)
    special = {"pad": 0, "cls": 1, "sep": 2}
    config = architecture_adapter("modernbert").scratch_config(
        "modernbert", VOCAB, special, hidden_size=args.hidden_size, layers=args.layers, max_positions=8192)
    encoder = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
    settings = SimpleNamespace(encoder_mask_ratio=0.3, decoder_mask_ratio=0.5, whole_word_mask=False,
                               decoding="enhanced", decoder_layers=None)
    objective = build_objective(args.run.split()[0], encoder, _Tokenizer(), settings).train()
    if args.run == "retromae whole mask":
        objective.mask_cells = args.batch_size * args.length ** 2
    batch = _batch(args.batch_size, args.length)
    before = _resident_mib()
    started = time.perf_counter()
    objective(batch, torch.Generator().manual_seed(0))["loss"].backward()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"peak_mib": peak - before, "seconds": seconds}))


class _Tokenizer:
    """What `MaskingSettings.create` reads of a tokenizer."""

    mask_token_id = 3

    def __len__(self) -> int:
        return VOCAB


def _batch(batch_size: int, length: int):
    import torch

    input_ids = torch.randint(4, VOCAB, (batch_size, length), generator=torch.Generator().manual_seed(1))
    input_ids[:, 0], input_ids[:, -1] = 1, 2
    special = torch.zeros(batch_size, length, dtype=torch.bool)
    special[:, [0, -1]] = True
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "special_tokens_mask": special,
            "word_starts": torch.ones_like(special)}


def _resident_mib() -> float:
    """The process's resident memory now, MiB (from /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(machine_header(), flush=True)
    if args.child:
        child(args)
        return
    print(f"B={args.batch_size} ModernBERT-shaped, hidden {args.hidden_size}, {args.layers} layers; peak resident "
          "memory of one forward + backward step (MiB above the process before it) and its seconds")
    print(f"{'length':>8}" + "".join(f"{run:>28}" for run in args.runs))
    for length in args.lengths:
        cells = []
        for run in args.runs:
            command = [sys.executable, __file__, "--child", "--run", run, "--length", str(length), "--batch-size",
                       str(args.batch_size), "--hidden-size", str(args.hidden_size), "--layers", str(args.layers)]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                cells.append(f"failed ({result.stderr.strip().splitlines()[-1][:20]})")
                continue
            figures = json.loads(result.stdout.strip().splitlines()[-1])
            cells.append(f"{figures['peak_mib']:,.0f} MiB, {figures['seconds']:.1f} s")
        print(f"{length:>8}" + "".join(f"{cell:>28}" for cell in cells), flush=True)


if __name__ == "__main__":
    main()
