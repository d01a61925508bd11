"""Benchmark: the memory of a corpus's token ids while it is encoded, by corpus size.

`Encoder.encode` (and `encode_cached`, which orders a corpus as it batches) reads every text's token count before the
first batch. The reference is what they did before: one `Encoder.tokenize` of the whole corpus, whose Python lists
of ints hold about 20 KB a text; ours is `Encoder.token_table` (10,000 texts at a time into one int32 array). Each
runs in a child process of its own (a fresh interpreter, so that memory freed by one cannot hide the other's peak),
which reports the resident memory the work added at its peak (VmHWM reset through /proc/self/clear_refs, minus VmRSS
before) and its seconds. The corpora are `benchmarks/scale.py`'s mix (Debian descriptions, NPL, SciFact, then
passages of the other pre-training files), written under --work.

    PYTHONPATH=src python benchmarks/token_memory.py --sizes 10000 30000 100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import machine_header, minilm_path
from scale import DATA, measured, write_corpus

WAYS = ("tokenize", "token_table")


def child(way: str, corpus: Path, model: str, max_length: int) -> dict[str, float]:
    """The cost of reading every text's tokens `way` (in this process)."""
    from retromae.data.retrieval_sets import load_corpus
    from retromae.models.encoder import Encoder

    texts = [passage.joined() for passage in load_corpus(corpus).values()]
    encoder = Encoder.load(model, device="cpu")
    read = encoder.tokenize if way == "tokenize" else encoder.token_table
    _, cost = measured(lambda: read(texts, max_length))
    return cost


def in_child(way: str, corpus: Path, args: argparse.Namespace) -> dict[str, float]:
    ran = subprocess.run([sys.executable, __file__, "--child", way, "--corpus", str(corpus), "--model", args.model,
                          "--max-length", str(args.max_length)], capture_output=True, text=True, check=True)
    return json.loads(ran.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--model", default=str(minilm_path()), help="default: all-MiniLM-L6-v2's tokenizer")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--work", type=Path, default=Path("/tmp/retromae-scale"))
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.corpus, args.model, args.max_length)))
        return
    print(machine_header(), flush=True)
    print(f"{'texts':>8} | {'whole-corpus tokenize: peak MB, s':>34} | {'token_table: peak MB, s':>24} | memory ratio")
    for size in args.sizes:
        folder = args.work / f"docs-{size}"
        if not (folder / "corpus.jsonl").is_file():
            write_corpus(size, 10, folder, DATA)
        reference, ours = (in_child(way, folder / "corpus.jsonl", args) for way in WAYS)
        print(f"{size:>8,} | {reference['peak_mb']:>26,.0f}, {reference['s']:5.1f} | "
              f"{ours['peak_mb']:>16,.0f}, {ours['s']:5.1f} | {ours['peak_mb'] / reference['peak_mb']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
