"""Benchmark: what hashing every byte of a corpus (a run's identity, the token store's key) costs beside tokenising it.

In one process: the content fingerprint of the whole file (`retromae.runtime.run_folder.file_fingerprint`: sha256 in 1
MiB chunks, the file read from the page cache when it was just written), and the token store built from its first
`--slice-mb` megabytes (read, tokenise, pack, write: `TokenStore.build_or_load` into a temporary cache), each as
megabytes per second, and their ratio. Tokenising the whole file is extrapolated from the slice at that rate
(tokenising is linear in the text) when the slice is smaller than the file; the output says which.

    PYTHONPATH=src HF_HUB_OFFLINE=1 python benchmarks/fingerprint.py /tmp/corpus-1g.jsonl --slice-mb 20
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import machine_header, minilm_path
from transformers import AutoTokenizer

from retromae.data.token_store import TokenStore
from retromae.runtime.run_folder import file_fingerprint


def hash_seconds(path: Path) -> float:
    start = time.perf_counter()
    file_fingerprint(path)
    return time.perf_counter() - start


def first_megabytes(path: Path, megabytes: float, folder: Path) -> Path:
    """A copy of the first whole lines of `path` up to `megabytes`, with the same suffix."""
    limit, taken = int(megabytes * 1e6), 0
    copy = folder / f"slice{path.suffix}"
    with path.open("rb") as source, copy.open("wb") as target:
        for line in source:
            if taken + len(line) > limit:
                break
            target.write(line)
            taken += len(line)
    return copy


def tokenise_seconds(path: Path, tokenizer, max_length: int, cache: Path) -> float:
    start = time.perf_counter()
    TokenStore.build_or_load([path], tokenizer, max_length, cache_dir=cache, show_progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a corpus file (.txt or .jsonl)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder or hub name (default: all-MiniLM-L6-v2)")
    parser.add_argument("--slice-mb", type=float, default=20.0, help="megabytes of the file tokenised (default 20)")
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    print(machine_header(), flush=True)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or str(minilm_path()))
    size_mb = args.corpus.stat().st_size / 1e6
    hashed = hash_seconds(args.corpus)
    with tempfile.TemporaryDirectory() as folder:
        piece = first_megabytes(args.corpus, args.slice_mb, Path(folder)) if args.slice_mb < size_mb else args.corpus
        piece_mb = piece.stat().st_size / 1e6
        tokenised = tokenise_seconds(piece, tokenizer, args.max_length, Path(folder) / "cache")
    hash_rate, token_rate = size_mb / hashed, piece_mb / tokenised
    whole = size_mb / token_rate
    how = "measured" if piece_mb >= size_mb else f"extrapolated from {piece_mb:.0f} MB"
    print(f"file: {args.corpus} ({size_mb:,.0f} MB)")
    print(f"hash (sha256, every byte):  {hashed:8.1f} s  {hash_rate:8.0f} MB/s")
    print(f"tokenise into a store:      {whole:8.1f} s  {token_rate:8.2f} MB/s  ({how})")
    print(f"hash / tokenise time:       {hashed / whole:8.4f}  (tokenising is {hash_rate / token_rate:,.0f}x slower)")


if __name__ == "__main__":
    main()
