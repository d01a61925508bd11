"""Benchmark: queries/s and recall@10 of HNSW and IVF-PQ indexes against exact Flat search.

Two vector sets: 100k random unit vectors (384-d, the MiniLM width; the hard case for approximate search, as
random data has no cluster structure), and real SciFact vectors (embeddings folders written by
`retromae encode`, corpus and queries). Flat (exact inner product, faiss) is the reference measured in the
same process: recall@10 is the share of Flat's top 10 an index also returns; speed is queries/s of one batched
search call, best of --repeats, with the ratio to Flat.

    PYTHONPATH=src python benchmarks/search.py \
        --scifact-corpus runs/scifact-corpus --scifact-queries runs/scifact-queries
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import machine_header

from retromae.retrieval.encode import load_embeddings
from retromae.retrieval.index import build_index, search, set_search_params


def random_vectors(count: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def factories(count: int, dim: int) -> list[tuple[str, str]]:
    """(factory, search params): HNSW at two beam widths and IVF-PQ with about sqrt(N) lists."""
    lists = 2 ** round(np.log2(np.sqrt(count)))
    return [("HNSW32", "efSearch=64"), ("HNSW32", "efSearch=256"),
            (f"IVF{lists},PQ{dim // 8}", f"nprobe={max(1, lists // 16)}"),
            (f"IVF{lists},PQ{dim // 8}", f"nprobe={max(1, lists // 4)}")]


def best_queries_per_second(index, queries: np.ndarray, k: int, repeats: int) -> tuple[float, np.ndarray]:
    best, rows, ids = float("inf"), None, [str(row) for row in range(index.ntotal)]
    for _ in range(repeats):
        start = time.perf_counter()
        _, rows = search(index, queries, k, ids=ids)
        best = min(best, time.perf_counter() - start)
    return len(queries) / best, rows


def recall(exact: np.ndarray, approximate: np.ndarray) -> float:
    return float(np.mean([len(set(e) & set(a)) / len(e) for e, a in zip(exact, approximate, strict=True)]))


def measure(name: str, corpus: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> None:
    print(f"\n{name}: {len(corpus)} vectors, {len(queries)} queries, {corpus.shape[1]}-d, inner product, k=10")
    print(f"{'index':22s} {'search params':14s} {'build s':>8s} {'queries/s':>10s} {'vs Flat':>8s} {'recall@10':>10s}")
    start = time.perf_counter()
    flat = build_index(corpus, "Flat")
    flat_build = time.perf_counter() - start
    flat_qps, exact = best_queries_per_second(flat, queries, 10, args.repeats)
    print(f"{'Flat':22s} {'':14s} {flat_build:8.1f} {flat_qps:10.0f} {1.0:7.2f}x {1.0:10.3f}")
    built: dict[str, object] = {}
    for factory, params in factories(len(corpus), corpus.shape[1]):
        start = time.perf_counter()
        if factory not in built:
            built[factory] = build_index(corpus, factory)
        build_seconds = time.perf_counter() - start
        index = built[factory]
        set_search_params(index, params)
        qps, rows = best_queries_per_second(index, queries, 10, args.repeats)
        print(f"{factory:22s} {params:14s} {build_seconds:8.1f} {qps:10.0f} {qps / flat_qps:7.2f}x "
              f"{recall(exact, rows):10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="random corpus vectors")
    parser.add_argument("--queries", type=int, default=1000, help="random query vectors")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scifact-corpus", type=Path, help="embeddings folder of the SciFact corpus")
    parser.add_argument("--scifact-queries", type=Path, help="embeddings folder of the SciFact queries")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    measure("random unit vectors", random_vectors(args.count, args.dim, 0), random_vectors(args.queries, args.dim, 1),
            args)
    if args.scifact_corpus and args.scifact_queries:
        corpus, queries = (np.asarray(load_embeddings(p)[1]) for p in (args.scifact_corpus, args.scifact_queries))
        measure("SciFact (retromae encode vectors)", corpus, queries, args)
    else:
        print("\nSciFact skipped: pass --scifact-corpus and --scifact-queries (folders from `retromae encode`)")


if __name__ == "__main__":
    main()
