"""Benchmark: memory, size on disk and query latency of the lexical (BM25) side of a hybrid index, beside the dense
side of the same number of documents measured in the same process (the reference).

Two corpora: Debian package descriptions (`../shared/data/beir/debian`, 20,000 documents, its 1,000 test queries)
and a synthetic corpus of --synthetic documents (default 1,000,000) whose words are drawn from a Zipf distribution
(exponent 1.1) over a vocabulary of 200,000 made-up words, 10 to 50 words per document; its 1,000 queries are 2 to
5 words drawn alike. Per corpus, lexical side: building (`retrieval.bm25.BM25.index`, seconds and resident memory
added, the peak included), `bm25/` on disk (`BM25.save`), loading it back (`BM25.load`, resident memory added),
and latency (one query at a time: median and 95th percentile; all queries in one call: queries/s; one thread).
Dense side (the reference): a faiss Flat inner-product index of random unit vectors of MiniLM's width (384) for the
same documents: its file on disk, resident memory added by loading it, and the same latencies (exact search; no
query encoding, which costs the same whatever the index: a few ms per query for MiniLM on a CPU).

Resident memory is read from /proc/self/status (VmRSS; the peak from VmHWM after resetting it through
/proc/self/clear_refs), so figures are Linux-only.

    PYTHONPATH=src nice python benchmarks/lexical_index.py [--synthetic 1000000] [--output runs/lexical-index.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from retromae.retrieval.bm25 import BM25
from retromae.retrieval.index import build_index, load_index, save_index, search

DEBIAN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beir" / "debian"
DIM = 384
SINGLE_QUERIES = 200  # queries timed one at a time
VOCABULARY, MIN_WORDS, MAX_WORDS = 200_000, 10, 50


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def folder_mb(path: Path) -> float:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file()) / 2**20


def loaded_rss_mb(side: str, folder: Path) -> float:
    """Resident memory a fresh process adds by loading one side from `folder` (freed memory of this process,
    kept by its allocator, would hide it here)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import lexical_index as b; print(b.load_side(*sys.argv[2:]))")
    ran = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), side, str(folder)],
                         capture_output=True, text=True, check=True)
    return float(ran.stdout.strip().splitlines()[-1])


def load_side(side: str, folder: str) -> float:
    """In a fresh process: the resident memory (MB) loading one side adds, libraries imported beforehand."""
    import faiss  # noqa: F401  (imported before the baseline, as bm25s is below)

    from retromae.retrieval.bm25 import _bm25s

    _bm25s()
    ids = (Path(folder) / "ids.txt").read_text(encoding="utf-8").splitlines()
    before = rss_mb()
    loaded = BM25.load(Path(folder) / "bm25", ids) if side == "bm25" else load_index(Path(folder) / "dense")
    added = rss_mb() - before
    del loaded
    return added


def zipf_corpus(count: int, seed: int = 0) -> tuple[list[str], list[str], dict[str, str]]:
    """Ids, texts and 1,000 queries of made-up words with Zipf-distributed frequencies."""
    rng = np.random.default_rng(seed)
    letters = rng.integers(ord("a"), ord("z") + 1, (VOCABULARY, 9)).astype(np.uint8)
    sizes = rng.integers(4, 10, VOCABULARY)
    vocabulary = [bytes(row[:size]).decode() + "q" for row, size in zip(letters, sizes, strict=True)]
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.1
    weights /= weights.sum()
    lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, count)
    words = rng.choice(VOCABULARY, int(lengths.sum()), p=weights).tolist()
    ends = np.cumsum(lengths).tolist()
    texts = [" ".join(vocabulary[w] for w in words[end - n:end]) for end, n in zip(ends, lengths.tolist(), strict=True)]
    query_words = rng.choice(VOCABULARY, 5_000, p=weights).tolist()
    queries = {f"q{i}": " ".join(vocabulary[w] for w in query_words[5 * i:5 * i + int(rng.integers(2, 6))])
               for i in range(1_000)}
    return [f"d{i}" for i in range(count)], texts, queries


def debian_corpus(folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    from retromae.data.retrieval_sets import load_retrieval_set

    data = load_retrieval_set(folder, "test")
    return list(data.corpus), [passage.joined() for passage in data.corpus.values()], data.queries


def latencies(search_one, search_all, queries: dict[str, str]) -> dict[str, float]:
    """Median and 95th percentile ms of one query at a time, and queries/s of all in one call."""
    times = []
    for query_id in list(queries)[:SINGLE_QUERIES]:
        started = time.perf_counter()
        search_one(query_id)
        times.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    search_all()
    batch = time.perf_counter() - started
    return {"p50_ms": statistics.median(times), "p95_ms": float(np.percentile(times, 95)),
            "batch_qps": len(queries) / batch}


def lexical_side(ids: list[str], texts: list[str], queries: dict[str, str], folder: Path) -> dict[str, float]:
    gc.collect()
    before = rss_mb()
    reset_peak()
    started = time.perf_counter()
    engine = BM25().index(ids, texts, show_progress=False)
    built = {"build_s": time.perf_counter() - started, "build_rss_mb": rss_mb() - before,
             "build_peak_mb": rss_mb("VmHWM") - before}
    engine.save(folder / "bm25")
    loaded = {"disk_mb": folder_mb(folder / "bm25"), "loaded_rss_mb": loaded_rss_mb("bm25", folder)}
    timing = latencies(lambda q: engine.search({q: queries[q]}, 100, show_progress=False, threads=1),
                       lambda: engine.search(queries, 100, show_progress=False, threads=1), queries)
    return {**built, **loaded, **timing}


def dense_side(ids: list[str], queries: dict[str, str], folder: Path) -> dict[str, float]:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((len(ids), DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    save_index(build_index(vectors, "Flat"), folder / "dense", ids)
    del vectors
    index, _, _ = load_index(folder / "dense")
    loaded = {"disk_mb": folder_mb(folder / "dense"), "loaded_rss_mb": loaded_rss_mb("dense", folder)}
    query_vectors = rng.standard_normal((len(queries), DIM), dtype=np.float32)
    rows = {query_id: n for n, query_id in enumerate(queries)}
    timing = latencies(lambda q: search(index, query_vectors[rows[q]:rows[q] + 1], 100, ids=ids),
                       lambda: search(index, query_vectors, 100, ids=ids), queries)
    return {**loaded, **timing}


def measure(name: str, ids: list[str], texts: list[str], queries: dict[str, str]) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="lexical-bench-") as tmp:
        (Path(tmp) / "ids.txt").write_text("".join(f"{doc_id}\n" for doc_id in ids), encoding="utf-8")
        lexical = lexical_side(ids, texts, queries, Path(tmp))
        dense = dense_side(ids, queries, Path(tmp))
    print(f"\n{name}: {len(ids):,} documents, {len(queries):,} queries, top 100")
    print(f"{'':>8} {'build s':>8} {'build MB':>9} {'peak MB':>8} {'disk MB':>8} {'load MB':>8} {'p50 ms':>7} "
          f"{'p95 ms':>7} {'batch q/s':>10}")
    for side, row in (("BM25", lexical), ("dense", dense)):
        print(f"{side:>8} {row.get('build_s', float('nan')):8.1f} {row.get('build_rss_mb', float('nan')):9.0f} "
              f"{row.get('build_peak_mb', float('nan')):8.0f} {row['disk_mb']:8.1f} {row['loaded_rss_mb']:8.0f} "
              f"{row['p50_ms']:7.2f} {row['p95_ms']:7.2f} {row['batch_qps']:10.0f}", flush=True)
    return {"documents": len(ids), "queries": len(queries), "bm25": lexical, "dense_flat_384": dense}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--debian", type=Path, default=DEBIAN)
    parser.add_argument("--synthetic", type=int, default=1_000_000, help="documents of the Zipf corpus (0: skip)")
    parser.add_argument("--output", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(1)  # one thread on both sides, as BM25's searches below
    results = {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    if args.debian.is_dir():
        results["debian"] = measure("Debian", *debian_corpus(args.debian))
    if args.synthetic:
        started = time.perf_counter()
        corpus = zipf_corpus(args.synthetic)
        print(f"synthetic corpus made in {time.perf_counter() - started:.0f} s", flush=True)
        results["synthetic"] = measure("synthetic Zipf corpus", *corpus)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
