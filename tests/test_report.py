"""Result tables and JSON reports."""

from __future__ import annotations

import json

import numpy as np

from retromae.evaluation.report import format_table, print_results, save_results


def test_table_aligns_names_and_values():
    table = format_table({"ndcg@10": 0.64512, "recall@100": np.float32(0.5), "queries": 300}, title="scifact test")
    lines = table.splitlines()
    assert lines[0] == "scifact test"
    assert "ndcg@10     0.6451" in lines
    assert "recall@100  0.5000" in lines
    assert "queries        300" in lines
    assert len({len(line) for line in lines[1:]}) == 1  # every row as wide as the rules


def test_print_results(capsys):
    print_results({"spearman": 0.8})
    assert "spearman  0.8000" in capsys.readouterr().out


def test_save_results_writes_json_atomically_with_numpy_values(tmp_path):
    path = tmp_path / "out" / "results.json"
    save_results({"ndcg@10": np.float64(0.25), "per_query": {"q1": {"p@10": np.float32(0.5)}}, "k": [10]}, path)
    assert json.loads(path.read_text()) == {"ndcg@10": 0.25, "per_query": {"q1": {"p@10": 0.5}}, "k": [10]}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]
