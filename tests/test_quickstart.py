"""The quickstart pipeline end to end on a tiny BEIR folder and a tiny model."""

from __future__ import annotations

import json

from conftest import tiny_beir

from retromae.cli import main


def test_quickstart_writes_a_table_against_baselines_and_a_loss_plot(tmp_path):
    tiny_beir(tmp_path / "data")
    output = tmp_path / "run"
    assert main(["quickstart", "--data", str(tmp_path / "data"), "--output", str(output), "--vocab-size", "300",
                 "--hidden-size", "64", "--layers", "1", "--max-length", "32", "--pretrain-steps", "3",
                 "--pretrain-batch-size", "4", "--finetune-epochs", "1", "--finetune-batch-size", "8"]) == 0
    results = json.loads((output / "results.json").read_text())
    assert list(results) == ["BM25", "RetroMAE pre-trained + fine-tuned", "fine-tuned without pre-training"]
    for scores in results.values():
        assert 0.0 <= scores["ndcg@10"] <= 1.0 and 0.0 <= scores["recall@100"] <= 1.0
    assert results["BM25"]["ndcg@10"] > 0.5  # the queries are the documents' first words
    assert "| BM25 |" in (output / "results.md").read_text()
    assert (output / "losses.png").stat().st_size > 0
