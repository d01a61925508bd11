"""`benchmarks/scale.py` end to end at a tiny size (issue 60): every stage runs in its child process on a corpus of
the shared data and writes its figures. Marked slow (it reads ../shared/data and starts six interpreters); the tiny
model stands for MiniLM, so the figures say nothing of speed, only that each stage measures what it names (the
encoding by two torchrun processes included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "pretrain" / "debian-descriptions.jsonl").is_file(), reason="no ../shared/data")
def test_the_scale_benchmark_measures_every_stage_at_a_tiny_size(tmp_path, tiny_model_dir):
    paths = os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])
    ran = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--sizes", "300", "--queries", "5",
                          "--model", str(tiny_model_dir), "--reference-texts", "0", "--work", str(tmp_path),
                          "--passage-max-length", "32", "--query-max-length", "16", "--processes", "2"],
                         env={**os.environ, "PYTHONPATH": paths}, capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stderr[-2000:]
    figures = json.loads((tmp_path / "scale.json").read_text())["sizes"]["300"]
    assert [row["texts"] for row in figures["encode"]] == [300]
    two = figures["encode"][0]["processes"]  # torchrun's shards merged into the one-process vectors
    assert two["texts"] == 300 and two["max_abs_diff_vs_one_process"] < 1e-5 and two["s"] > 0
    assert len(figures["index"]) == 5 and {"Flat", "HNSW32", "int8", "binary"} < set(figures["index"])
    assert all(row["index_bytes"] > 0 and row["p50_ms"] > 0 for row in figures["index"].values())
    assert figures["index"]["binary"]["index_bytes"] < figures["index"]["int8"]["index_bytes"]
    assert figures["bm25"]["p50_ms"] > 0 and figures["hybrid"]["hybrid"]["p95_ms"] > 0
    assert sum(1 for line in (tmp_path / "300" / "corpus.jsonl").open()) == 300
    assert "index binary" in ran.stdout and "search hybrid" in ran.stdout
