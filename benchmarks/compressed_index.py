"""Benchmark: memory and NDCG@10 of the compressed indexes (int8, binary with float rescoring) against the float Flat
index, on vectors `retromae encode` wrote (issue 60).

Per collection (a BEIR folder, its corpus and queries encoded into two embeddings folders): each index type is built
from the same vectors (`retrieval.index.build_index`, as `retromae index --factory TYPE`), saved (`save_index`), read
back (`load_index`: the binary index's float rows memory-mapped, as `retromae search` reads them), and its top-10
run over the judged queries of --split scored with `evaluation.metrics.evaluate_run` (k = 10: a binary index then
rescores --shortlists x 11 rows per query, 11 being the depth `ranked_top_k` asks for; a run of 100 would rescore
ten times as many and hide the compression's loss on a small corpus). The reference is Flat
(exact inner product) in the same process: the bytes of each index file and NDCG@10 are given beside Flat's, as a
ratio. Index memory is the size of index.faiss, which faiss holds in memory whole; a binary index's float rows
(vectors.npy) stay on disk and are read a shortlist at a time, so they are given apart.

    PYTHONPATH=src python benchmarks/compressed_index.py --data ../shared/data/beir/scifact \
        --corpus-vectors /work/vectors60/scifact/corpus --query-vectors /work/vectors60/scifact/queries \
        [--shortlists 1 10] [--output runs/compressed-scifact.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from retromae.data.retrieval_sets import load_retrieval_set
from retromae.evaluation.metrics import evaluate_run
from retromae.retrieval.encode import load_embeddings
from retromae.retrieval.faiss_options import BINARY, SHORTLIST
from retromae.retrieval.index import FAISS_FILE, VECTORS_FILE, build_index, load_index, save_index, search
from retromae.retrieval.search import results_to_run

K = 10


def measure(factory: str, ids: list[str], corpus: np.ndarray, query_ids: list[str], queries: np.ndarray,
            qrels: dict[str, dict[str, int]], shortlist: int, folder: Path) -> dict[str, float]:
    """Build, save, load and search one index type: its bytes, build and search seconds, NDCG@10 and Recall@10."""
    started = time.perf_counter()
    built = build_index(corpus, factory, shortlist=shortlist)
    build_s = time.perf_counter() - started
    save_index(built, folder, ids, {"factory": factory})
    del built
    index, _, _ = load_index(folder)
    started = time.perf_counter()
    scores, rows = search(index, queries, K, ids=ids)
    search_s = time.perf_counter() - started
    metrics = evaluate_run(qrels, results_to_run(query_ids, ids, scores, rows), [K])
    rescoring = folder / VECTORS_FILE
    return {"index_bytes": (folder / FAISS_FILE).stat().st_size,
            "rescoring_bytes_on_disk": rescoring.stat().st_size if rescoring.is_file() else 0,
            "build_s": build_s, "search_s": search_s, "ndcg@10": metrics["ndcg@10"], "recall@10": metrics["recall@10"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="BEIR folder (its qrels)")
    parser.add_argument("--corpus-vectors", type=Path, required=True, help="embeddings folder of the corpus")
    parser.add_argument("--query-vectors", type=Path, required=True, help="embeddings folder of the queries")
    parser.add_argument("--split", default="test")
    parser.add_argument("--shortlists", type=int, nargs="+", default=[1, SHORTLIST],
                        help="binary: rows rescored, times k, a row each")
    parser.add_argument("--output", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    data = load_retrieval_set(args.data, args.split)
    ids, corpus, _ = load_embeddings(args.corpus_vectors)
    all_query_ids, all_queries, _ = load_embeddings(args.query_vectors)
    rows = [n for n, query_id in enumerate(all_query_ids) if query_id in data.qrels]
    query_ids, queries = [all_query_ids[n] for n in rows], np.asarray(all_queries[rows], dtype=np.float32)
    results = {}
    with tempfile.TemporaryDirectory(prefix="compressed-bench-") as tmp:
        kinds = [("Flat", None), ("int8", None), *((BINARY, n) for n in args.shortlists)]
        for factory, shortlist in kinds:
            name = factory if shortlist is None else f"{factory} x{shortlist}"
            results[name] = measure(factory, ids, np.asarray(corpus), query_ids, queries, data.qrels, shortlist,
                                    Path(tmp) / name)
    flat = results["Flat"]
    print(f"{args.data.name}: {len(ids):,} documents ({corpus.shape[1]}-d), {len(query_ids)} judged queries "
          f"({args.split}), top {K}; binary xN: a shortlist of N x k rows rescored")
    print(f"{'index':10s} {'index bytes':>12s} {'vs Flat':>8s} {'rescoring rows on disk':>23s} {'NDCG@10':>8s} "
          f"{'vs Flat':>8s} {'R@10':>6s} {'build s':>8s} {'search s':>9s}")
    for name, row in results.items():
        print(f"{name:10s} {row['index_bytes']:12,d} {row['index_bytes'] / flat['index_bytes']:7.3f}x "
              f"{row['rescoring_bytes_on_disk']:23,d} {row['ndcg@10']:8.4f} {row['ndcg@10'] / flat['ndcg@10']:7.1%} "
              f"{row['recall@10']:6.3f} {row['build_s']:8.2f} {row['search_s']:9.2f}")
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"collection": args.data.name, "documents": len(ids),
                                           "queries": len(query_ids), "k": K,
                                           "results": results}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
