"""The metric registry: the built-in metrics' titles, keys and order, and a metric added by one `register` entry
(Success@k, trec_eval's `success`) that `evaluate` (one set and a table), the probes' options and records, and
`retromae report` then compute, accept and print with no other edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tiny_beir

from retromae.cli import main
from retromae.evaluation import metric_registry
from retromae.evaluation.experiments import read_variant, report_table
from retromae.evaluation.metric_registry import (
    CORRELATION,
    RANKING,
    JudgedRanking,
    RankingMetric,
    long_title,
    parse_key,
    primary_key,
    register,
    reported_keys,
    title,
)
from retromae.evaluation.metrics import evaluate_run
from retromae.evaluation.probe import Probe
from retromae.evaluation.report import format_table
from retromae.evaluation.table import SetRow, Table
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.runtime.options import ConfigError

pytrec_eval = pytest.importorskip("pytrec_eval")


def success(query: JudgedRanking, k: int) -> float:
    """1 when a relevant document is in the top k."""
    return 1.0 if query.hits(k) else 0.0


@pytest.fixture()
def with_success(monkeypatch):
    """Success@k registered (reported at 10) for one test; the registry is restored after it."""
    monkeypatch.setattr(metric_registry, "METRICS", dict(metric_registry.METRICS))
    return register(RankingMetric("success", "S", "Success", compute=success, reported_at=(10,)))


def cli(*args) -> int:
    return main([str(arg) for arg in args])


def test_builtin_metrics_keys_titles_and_reported_keys():
    assert [metric.name for metric in metric_registry.metrics(RANKING)] == ["ndcg", "mrr", "recall", "map", "p"]
    assert [metric.name for metric in metric_registry.metrics(CORRELATION)] == ["pearson", "spearman"]
    assert list(evaluate_run({"q": {"a": 1}}, {"q": {"a": 1.0}}, (10,))) == ["ndcg@10", "mrr@10", "recall@10",
                                                                             "map@10", "p@10"]
    assert [title(key) for key in ("ndcg@10", "recall@100", "mrr@5", "map@20", "p@1")] == [
        "NDCG@10", "R@100", "MRR@5", "MAP@20", "P@1"]
    assert long_title("recall@100") == "Recall@100" and title("spearman") == "Spearman"
    assert reported_keys() == ["ndcg@10", "recall@100", "spearman"] and primary_key() == "ndcg@10"
    assert parse_key("ndcg@10")[1] == 10 and parse_key("spearman")[1] is None
    for bad in ("ndcg", "ndcg@0", "spearman@10", "bleu@4", "ndcg@x"):
        with pytest.raises(ValueError, match="is not a"):
            parse_key(bad)
    with pytest.raises(ValueError, match="registered already"):
        register(RankingMetric("ndcg", "N", "N", compute=success))
    with pytest.raises(ValueError, match="without '@'"):
        register(RankingMetric("a@b", "A", "A", compute=success))


def test_a_registered_metric_matches_trec_eval_and_joins_every_evaluation(with_success):
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}, "q3": {"d": 1}}
    run = {"q1": {"b": 3.0, "a": 2.0}, "q2": {"x": 5.0, "y": 4.0, "c": 1.0}}
    means, per_query = evaluate_run(qrels, run, (1, 3), per_query=True)
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"success.1,3"}).evaluate(run)
    for qid in qrels:
        for k in (1, 3):
            assert per_query[qid][f"success@{k}"] == reference.get(qid, {}).get(f"success_{k}", 0.0)
    assert means["success@1"] == 0.0 and means["success@3"] == pytest.approx(2 / 3)
    assert list(means)[-2:] == ["success@1", "success@3"]  # after the built-in metrics, in registration order
    assert reported_keys() == ["ndcg@10", "recall@100", "success@10", "spearman"]


def test_evaluate_prints_saves_and_tabulates_a_registered_metric(with_success, tmp_path, tiny_model_dir, capsys):
    for name, seed in (("alpha", 7), ("beta", 8)):
        tiny_beir(tmp_path / "sets" / name, seed=seed)
    alpha = tmp_path / "sets" / "alpha"
    assert cli("bm25", "--data", alpha, "--output", tmp_path / "alpha.trec") == 0
    capsys.readouterr()
    assert cli("evaluate", "--run", tmp_path / "alpha.trec", "--data", alpha, "--k-values", "1", "10",
               "--output", tmp_path / "alpha.json") == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "alpha.json").read_text())
    assert saved["success@1"] == pytest.approx(saved["recall@1"])  # one relevant document per query
    assert f"success@10  {saved['success@10']:.4f}" in printed
    assert cli("evaluate", "--model", tiny_model_dir, "--pooling", "mean", "--batch-size", "8", "--data",
               tmp_path / "sets", "--metrics", "success@5", "ndcg@10", "--output", tmp_path / "table") == 0
    printed = capsys.readouterr().out
    table = json.loads((tmp_path / "table" / "results.json").read_text())
    name = tiny_model_dir.name
    assert f"| data set | queries | documents | {name} S@5 | {name} NDCG@10 |" in printed
    assert f"| average |  |  | {table['average'][name]['success@5']:.4f} |" in printed
    assert cli("evaluate", "--run", tmp_path / "alpha.trec", "--data", alpha, "--data", tmp_path / "sets" / "beta",
               "--metrics", "succes@5") == 2
    assert "--metrics: 'succes@5' is not a metric; use NAME@K with NAME one of ndcg, mrr, recall, map, p, success" \
        in capsys.readouterr().err


def test_probes_offer_record_and_keep_the_best_of_a_registered_metric(with_success, tmp_path, tiny_model_dir,
                                                                      capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    assert "{ndcg@10,recall@100,success@10,sts_spearman}" in capsys.readouterr().out
    tiny_beir(tmp_path / "beir")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(json.loads(line)["text"] for line in (tmp_path / "beir" / "corpus.jsonl").open()))
    options = dict(model=str(tiny_model_dir), corpus=[str(corpus)], output=str(tmp_path / "run"), max_steps=2,
                   batch_size=4, max_length=32, log_every=1, save_every=0, cache_dir=str(tmp_path / "cache"),
                   probe=str(tmp_path / "beir"), probe_every=1, probe_queries=8, probe_documents=20,
                   probe_metric="success@10", keep_best_probe=True)
    config = PretrainConfig(**options)
    assert config.probe_keys == ["probe_ndcg@10", "probe_recall@100", "probe_success@10"]
    with pytest.raises(ConfigError, match="--probe-metric"):
        PretrainConfig(**{**options, "probe_metric": "success@5"})
    output = pretrain(config)
    probes = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()
              if "probe_success@10" in json.loads(line)]
    assert [record["step"] for record in probes] == [0, 1, 2]
    best = json.loads((output / "best-probe" / "probe.json").read_text())
    assert best["metric"] == "probe_success@10"
    assert best["probe_success@10"] == max(record["probe_success@10"] for record in probes)
    variant = Path(tmp_path / "variant")
    (variant / "eval").mkdir(parents=True)
    (variant / "eval" / "test.json").write_text(json.dumps({"ndcg@10": 0.5, "success@10": 0.75, "p@10": 0.1}))
    assert "| test ndcg@10 | test success@10 |" in report_table([read_variant(variant)])


def first_rank(query: JudgedRanking, k: int) -> float:
    """The rank of the first relevant document in the top k, k + 1 when none is."""
    hits = query.hits(k)
    return float(hits[0] if hits else k + 1)


def test_a_lower_is_better_metric_keeps_its_lowest_probe_and_prints_in_its_format(monkeypatch, tmp_path):
    monkeypatch.setattr(metric_registry, "METRICS", dict(metric_registry.METRICS))
    register(RankingMetric("first", "First", "First rank", compute=first_rank, higher_is_better=False, spec=".2f",
                           reported_at=(10,)))
    assert evaluate_run({"q": {"b": 1}}, {"q": {"a": 2.0, "b": 1.0}}, (1, 10))["first@10"] == 2.0
    table = Table(["model"], ["first@10"], [SetRow("set", 1, 2, {"model": {"first@10": 2.5}})])
    assert table.markdown().splitlines()[-1] == "| set | 1 | 2 | 2.50 |"  # one data set: no average row
    rows = format_table({"first@10": 2.5, "p@10": 0.25}).splitlines()[2:]
    assert [row.split() for row in rows] == [["first@10", "2.50"], ["p@10", "0.2500"]]
    output = tmp_path / "run"
    output.mkdir()
    (output / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "probe_first@10": value}) + "\n"
                                                  for step, value in ((0, 4.0), (2, 1.5), (4, 3.0))))
    options = PretrainConfig(model="m", corpus=["c"], output=str(output), probe="beir", probe_metric="first@10",
                             keep_best_probe=True)
    probe = Probe(options, None, 32, output, is_main_process=False)
    probe._restore_best()
    assert probe.best == 1.5 and options.probe_metric_entry.better(1.0, probe.best)
