"""Benchmark: texts/s and NDCG@10 of each inference backend (`--backend`, `--quantize`) against torch float32.

Every system runs in this one process, on the same threads: torch float32 (the reference; run with
RETROMAE_CPU_BF16=0 so that `auto` means float32 on a CPU with AMX), ONNX Runtime in float32 and int8, OpenVINO in
float32 (its int8 and torch's dynamic int8, measured at commit 1408566, are no longer offered: docs/performance.md),
torch in bf16 (what `--dtype auto` runs on a CPU with AMX: the weights cast once, the layers packed) with --bf16,
and `SentenceTransformer.encode` (torch float32) beside them. Throughput: each encodes the same --sample corpus
texts (at --passage-max-length tokens, batches of 64) once per round, the systems interleaved round after round so
that load on a shared machine falls on all alike; the best round is reported with the median, and the ratio of the
best to torch float32's best. Each export is made (or found) before any clock runs, and its time printed apart. With
--ndcg, each system also encodes the whole corpus and the queries of --split and is scored as `retromae evaluate`
scores (exact search, NDCG@10), the full corpus pass timed too.

    PYTHONPATH=src RETROMAE_CPU_BF16=0 python benchmarks/encode_backends.py \
        --data ../shared/data/beir/scifact --split test --sample 64 --rounds 2 --bf16 --ndcg
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import machine_header, minilm_path

from retromae.data.retrieval_sets import load_retrieval_set
from retromae.evaluation.metrics import evaluate_run
from retromae.models.encoder import Encoder
from retromae.retrieval.search import TextOptions, dense_search

# int8 first after the reference: on a loaded machine a run cut short has scored the systems quality is asked of
SYSTEMS = (("torch", "none", "float32"), ("onnx", "int8", "float32"), ("onnx", "none", "float32"),
           ("openvino", "none", "float32"))
BF16 = ("torch", "none", "bfloat16")
BATCH = 64


def load(model: str, backend: str, quantize: str, dtype: str) -> tuple[Encoder, float]:
    """The encoder and the seconds its export took (made or found), by encoding one text."""
    encoder = Encoder.load(model, backend=backend, quantize=quantize, dtype=dtype)
    start = time.perf_counter()
    encoder.encode(["warm up"], show_progress=False)
    return encoder, time.perf_counter() - start


def sentence_transformers(model: str, max_length: int) -> Callable[[list[str]], np.ndarray]:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(model, device="cpu")
    reference.max_seq_length = max_length
    return lambda texts: reference.encode(texts, batch_size=BATCH, convert_to_numpy=True)


def throughput(runs: dict[str, Callable[[list[str]], np.ndarray]], texts: list[str], rounds: int) -> dict[str, list]:
    """Seconds of each system per round over `texts`, interleaved."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run(texts)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def ndcg(encoder: Encoder, data, passage_length: int, query_length: int) -> tuple[float, float]:
    """NDCG@10 of `encoder` on `data` and the corpus texts/s of its pass (queries included in the time)."""
    start = time.perf_counter()
    run = dense_search(encoder, data.corpus_texts(), data.queries, k=100, passages=TextOptions("", passage_length),
                       questions=TextOptions("", query_length), batch_size=BATCH, show_progress=False)
    elapsed = time.perf_counter() - start
    return evaluate_run(data.qrels, run, (10,))["ndcg@10"], len(data.corpus) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(minilm_path()))
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--sample", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passage-max-length", type=int, default=256)
    parser.add_argument("--query-max-length", type=int, default=64)
    parser.add_argument("--ndcg", action="store_true", help="also score each system on the whole split")
    parser.add_argument("--bf16", action="store_true", help="also torch in bf16")
    parser.add_argument("--ndcg-first", nargs="*", default=["torch none"],
                        help="the systems scored first (e.g. 'onnx int8'), each line printed as it is scored")
    args = parser.parse_args()
    print(machine_header())
    data = load_retrieval_set(args.data, args.split)
    texts = list(data.corpus_texts().values())[:args.sample]
    encoders = {}
    for backend, quantize, dtype in (*SYSTEMS, *([BF16] if args.bf16 else [])):
        name = f"{backend} {quantize}" + (" bf16" if dtype == "bfloat16" else "")
        encoders[name], made = load(args.model, backend, quantize, dtype)
        print(f"# {name}: export made or found in {made:.1f} s")
    runs = {name: (lambda texts, encoder=encoder: encoder.encode(texts, batch_size=BATCH,
                                                                 max_length=args.passage_max_length,
                                                                 show_progress=False))
            for name, encoder in encoders.items()}
    runs["SentenceTransformer.encode"] = sentence_transformers(args.model, args.passage_max_length)
    reference = runs["torch none"](texts)
    agreement = {name: float((run(texts) * reference).sum(axis=1).min()) for name, run in runs.items()}
    seconds = throughput(runs, texts, args.rounds)
    best = {name: len(texts) / min(times) for name, times in seconds.items()}
    print(f"# {len(texts)} texts of {args.data.name} at {args.passage_max_length} tokens, {args.rounds} rounds")
    print("system | texts/s best | texts/s median | ratio to torch float32 | lowest cosine to torch float32")
    for name, times in seconds.items():
        median = len(texts) / statistics.median(times)
        print(f"{name} | {best[name]:.1f} | {median:.1f} | {best[name] / best['torch none']:.2f} | "
              f"{agreement[name]:.5f}")
    if args.ndcg:
        print(f"# NDCG@10 on {args.data.name} {args.split} ({len(data.corpus)} documents, {len(data.queries)} queries)")
        print("system | NDCG@10 | difference to torch float32 | corpus texts/s of the pass")
        reference = None
        for name in sorted(encoders, key=lambda name: name not in args.ndcg_first):  # the asked for first
            score, speed = ndcg(encoders[name], data, args.passage_max_length, args.query_max_length)
            reference = score if name == "torch none" else reference
            difference = "" if reference is None else f"{score - reference:+.4f}"
            print(f"{name} | {score:.4f} | {difference} | {speed:.1f}", flush=True)


if __name__ == "__main__":
    main()
