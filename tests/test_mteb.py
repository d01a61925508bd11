"""mteb v2 runs a model this tool exports, unchanged, on a local retrieval task built from a BEIR folder (no hub),
and agrees with `retromae evaluate` on it."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_beir

from retromae.cli import main


@pytest.mark.slow  # importing mteb alone takes several seconds
def test_mteb_runs_an_exported_model_on_a_local_beir_task(tmp_path, tiny_model_dir, monkeypatch):
    mteb = pytest.importorskip("mteb")
    from sentence_transformers import SentenceTransformer

    from retromae.evaluation.mteb_task import beir_task

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tiny_beir(tmp_path / "beir")
    run = tmp_path / "run"
    assert main(["finetune", "--model", str(tiny_model_dir), "--data", str(tmp_path / "beir"), "--output", str(run),
                 "--max-steps", "30", "--batch-size", "8", "--learning-rate", "1e-3", "--pooling", "mean",
                 "--normalize", "--passage-max-length", "64", "--save-every", "0"]) == 0  # scores apart: no near-ties
    exported = run / "sentence-transformer"
    result = mteb.evaluate(SentenceTransformer(str(exported), device="cpu"), [beir_task(tmp_path / "beir")],
                           cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]
    assert main(["evaluate", "--model", str(exported), "--data", str(tmp_path / "beir"),
                 "--output", str(tmp_path / "ours.json")]) == 0
    ours = json.loads((tmp_path / "ours.json").read_text())
    assert scores["ndcg_at_10"] == pytest.approx(ours["ndcg@10"], abs=1e-5)
    assert scores["recall_at_100"] == pytest.approx(ours["recall@100"], abs=1e-5)
