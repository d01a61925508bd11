"""Benchmark: what `retromae index --recall-queries/--target-recall` measures, chooses and costs, beside exact search.

For each approximate factory over an embeddings folder (and encoded queries of the same model): the build's time;
recall@10 against exact search at faiss's default setting, on the queries and on as many of the indexed vectors
taken as queries (what a measure without queries would have said); then for each target, the setting `tune` chooses
on half of the queries, its recall on the other half, the tuning's seconds beside the build's, and the p50 and p95
latency of a query at that setting beside the Flat index's in the same process, a query at a time, the two in turn
on each query (faiss on one thread), so that the ratio holds on a loaded machine.

    PYTHONPATH=src python benchmarks/recall_tuning.py --embeddings DIR --queries DIR \
        [--factories HNSW32 IVF256,Flat IVF256,SQ8 binary] [--targets 0.9 0.95 0.99] [--output recall.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import machine_header
from scale import interleaved, one_thread

TIMED_QUERIES = 200  # queries timed per setting, a query at a time


def timed(work: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def latency(index: Any, flat: Any, queries: np.ndarray, ids: list[str]) -> dict[str, dict[str, float]]:
    """p50/p95 ms of a query on `index` and on `flat`, in turn on each of the first TIMED_QUERIES queries."""
    from retromae.retrieval.index import search

    searches = {name: (lambda n, built=built: search(built, queries[n:n + 1], 10, ids=ids))
                for name, built in (("index", index), ("flat", flat))}
    return interleaved(searches, min(TIMED_QUERIES, len(queries)))


def factory_rows(factory: str, vectors: np.ndarray, ids: list[str], queries: np.ndarray, flat: Any,
                 targets: list[float]) -> dict[str, Any]:
    """One factory: its build, its recall at the defaults (queries, documents), and each target's choice."""
    from retromae.retrieval.index import build_index
    from retromae.retrieval.recall import measure_recall, tune
    from retromae.runtime.errors import DataError

    index, build_s = timed(lambda: build_index(vectors, factory))
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), min(1000, len(vectors)), replace=False))
    default = measure_recall(index, vectors, ids, "ip", queries, factory)
    documents = measure_recall(index, vectors, ids, "ip", np.asarray(vectors[rows]), factory)
    found = {"build_s": build_s, "default_setting": default.setting, "default_recall_queries": default.value,
             "default_recall_documents": documents.value, "targets": {}}
    for target in targets:
        try:
            (setting, recall), tune_s = timed(lambda target=target: tune(index, vectors, ids, "ip", queries, factory,
                                                                         target))
        except DataError as error:
            found["targets"][str(target)] = {"refused": str(error)}
            continue
        times = latency(index, flat, queries, ids)
        found["targets"][str(target)] = {
            "setting": setting, "held_out_recall": recall.value, "chosen_on_recall": recall.chosen_on[0],
            "tune_s": tune_s, "tune_vs_build": tune_s / build_s, "p50_ms": times["index"]["p50_ms"],
            "p95_ms": times["index"]["p95_ms"], "flat_p50_ms": times["flat"]["p50_ms"],
            "vs_flat_p50": times["index"]["p50_ms"] / times["flat"]["p50_ms"]}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embeddings", type=Path, required=True, help="embeddings folder of the corpus")
    parser.add_argument("--queries", type=Path, required=True, help="embeddings folder of queries, same model")
    parser.add_argument("--factories", nargs="+", default=["HNSW32", "IVF256,Flat", "IVF256,SQ8", "binary"])
    parser.add_argument("--targets", nargs="+", type=float, default=[0.9, 0.95, 0.99])
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from retromae.retrieval.encode import load_embeddings
    from retromae.retrieval.index import build_index

    one_thread()
    ids, vectors, _ = load_embeddings(args.embeddings)
    _, queries, _ = load_embeddings(args.queries)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    flat = build_index(vectors, "Flat")
    results = {"machine": machine_header(), "documents": len(ids), "queries": len(queries),
               "factories": {factory: factory_rows(factory, vectors, ids, queries, flat, args.targets)
                             for factory in args.factories}}
    print(json.dumps(results, indent=1))
    if args.output:
        args.output.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
