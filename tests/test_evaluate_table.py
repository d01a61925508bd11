"""`retromae evaluate` over many data sets: one table whose rows equal the single-set runs, the average row, BM25
beside the model, the report folder, the corpus vectors' cache, resuming after a kill, and the errors users see."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest
from conftest import tiny_beir

import retromae.retrieval.encode
from retromae.cli import main
from retromae.data.retrieval_sets import read_trec_run
from retromae.models.encoder import Encoder

MODEL = ["--pooling", "mean", "--normalize", "--batch-size", "8"]
ENCODE = Encoder.encode


@pytest.fixture()
def sets(tmp_path):
    """A folder holding two small BEIR sets, "alpha" and "beta", with different texts."""
    for name, seed in (("alpha", 7), ("beta", 8)):
        tiny_beir(tmp_path / "sets" / name, seed=seed)
    return tmp_path / "sets"


def cli(*args) -> int:
    return main([str(arg) for arg in args])


def single_run(tmp_path, model, data, *extra) -> dict:
    """The metrics of a one-set `retromae evaluate` into a JSON file."""
    output = tmp_path / f"{data.name}-{len(list(tmp_path.glob('*.json')))}.json"
    source = ["--model", model, *MODEL] if model else []
    assert cli("evaluate", *extra, "--data", data, "--output", output, *source) == 0
    return json.loads(output.read_text())


def test_the_table_rows_equal_single_set_runs_and_the_average_is_their_mean(tmp_path, sets, tiny_model_dir, capsys):
    report = tmp_path / "report"
    assert cli("evaluate", "--model", tiny_model_dir, *MODEL, "--data", sets / "alpha", "--data", sets / "beta",
               "--bm25", "--output", report) == 0
    printed = capsys.readouterr().out
    table = json.loads((report / "results.json").read_text())
    model = tiny_model_dir.name  # a model is shown by its folder's name, never as "model"
    assert table["systems"] == [model, "BM25"] and table["metrics"] == ["ndcg@10", "recall@100"]
    assert (table["model"], table["model_path"], table["models"]) == (model, str(tiny_model_dir),
                                                                     {model: str(tiny_model_dir)})
    per_query = json.loads((report / "per-query.json").read_text())
    for name in ("alpha", "beta"):
        alone = single_run(tmp_path, tiny_model_dir, sets / name)
        assert cli("bm25", "--data", sets / name, "--output", tmp_path / f"{name}.trec") == 0
        bm25 = single_run(tmp_path, None, sets / name, "--run", tmp_path / f"{name}.trec")
        assert read_trec_run(report / "runs" / name / "BM25.trec") == read_trec_run(tmp_path / f"{name}.trec")
        for system, expected in ((model, alone), ("BM25", bm25)):
            kept = single_run(tmp_path, None, sets / name, "--run", report / "runs" / name / f"{system}.trec")
            for metric in ("ndcg@10", "recall@100"):  # the run files kept score as the table says
                assert table["sets"][name][system][metric] == expected[metric] == kept[metric]
                assert math.fsum(scores[metric] for scores in per_query[name][system].values()) / 12 == \
                    pytest.approx(expected[metric], abs=1e-12)
        assert f"{alone['ndcg@10']:.4f}" in printed
        assert table["sets"][name]["queries"] == 12 and table["sets"][name]["documents"] == 48
    for system in (model, "BM25"):
        mean = math.fsum(table["sets"][name][system]["ndcg@10"] for name in ("alpha", "beta")) / 2
        assert table["average"][system]["ndcg@10"] == pytest.approx(mean, abs=1e-15)
    assert (f"| data set | queries | documents | {model} NDCG@10 | {model} R@100 | BM25 NDCG@10 | BM25 R@100 |"
            in printed)
    assert printed.startswith(f"\n{model} (test split)")  # the header names the model, not its path
    rows = list(csv.reader((report / "results.csv").open()))
    assert [row[0] for row in rows] == ["data set", "alpha", "beta", "average"]
    assert (report / "results.md").read_text() in printed and (report / "results.png").stat().st_size > 0


def test_a_folder_of_sets_and_any_metric(tmp_path, sets, tiny_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, *MODEL, "--data", sets, "--metrics", "mrr@5", "map@20") == 0
    printed = capsys.readouterr().out
    model = tiny_model_dir.name
    assert f"| data set | queries | documents | {model} MRR@5 | {model} MAP@20 |" in printed
    assert "| alpha |" in printed and "| beta |" in printed and "| average |" in printed
    assert cli("evaluate", "--model", tiny_model_dir, *MODEL, "--data", sets / "alpha", "--bm25") == 0
    assert f"| data set | queries | documents | {model} NDCG@10 | {model} R@100 | BM25 NDCG@10 |" in \
        capsys.readouterr().out
    assert cli("evaluate", "--model", tiny_model_dir, "--data", sets / "alpha", "--metrics", "mrr@5") == 2
    assert "--metrics: chooses a table's columns" in capsys.readouterr().err


def count_encoded_batches(monkeypatch, kill_at: int | None = None) -> list[int]:
    """Count the texts of every corpus shard encoded (`Encoder.encode` with a caller's bar); with `kill_at`, a
    KeyboardInterrupt stops the run when that shard (1-based) starts."""
    shards: list[int] = []

    def encode(self, texts, *args, bar=None, **kwargs):
        if bar is not None:
            if kill_at is not None and len(shards) + 1 == kill_at:
                raise KeyboardInterrupt("simulated kill")
            shards.append(len(texts))
        return ENCODE(self, texts, *args, bar=bar, **kwargs)

    monkeypatch.setattr(Encoder, "encode", encode)
    return shards


def test_an_interrupted_evaluation_resumes_from_its_cached_vectors(tmp_path, sets, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(retromae.retrieval.encode, "CACHE_SHARD_TEXTS", 16)  # 3 shards of 2 batches per set
    command = ["evaluate", "--model", tiny_model_dir, *MODEL, "--data", sets, "--output", tmp_path / "killed"]
    count_encoded_batches(monkeypatch, kill_at=5)  # the second shard of beta
    assert cli(*command) == 130  # Ctrl-C
    assert not (tmp_path / "killed" / "results.json").exists()
    resumed = count_encoded_batches(monkeypatch)
    assert cli(*command) == 0
    assert resumed == [16, 16]  # only beta's last two shards were left
    fresh = count_encoded_batches(monkeypatch)
    assert cli(*command[:-1], tmp_path / "fresh") == 0 and len(fresh) == 6
    killed, uninterrupted = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("killed", "fresh"))
    assert killed["sets"] == uninterrupted["sets"]
    again = count_encoded_batches(monkeypatch)
    assert cli(*command) == 0 and again == []  # started again when finished: every vector from the cache


def test_evaluations_share_a_cache_dir(tmp_path, sets, tiny_model_dir, monkeypatch):
    shared = ["evaluate", "--model", tiny_model_dir, *MODEL, "--cache-dir", tmp_path / "cache"]
    first = count_encoded_batches(monkeypatch)
    assert cli(*shared, "--data", sets / "alpha", "--bm25", "--output", tmp_path / "one") == 0 and len(first) == 1
    second = count_encoded_batches(monkeypatch)
    assert cli(*shared, "--data", sets / "alpha", sets / "beta", "--output", tmp_path / "two") == 0
    assert len(second) == 1  # beta only: alpha's vectors came from the shared cache
    one, two = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("one", "two"))
    model = tiny_model_dir.name
    assert one["sets"]["alpha"][model] == two["sets"]["alpha"][model]
    assert not (tmp_path / "two" / "embeddings").exists()


def test_the_cache_is_keyed_by_the_models_content_not_its_name(tmp_path, sets, tiny_model_dir, monkeypatch):
    """A link to the model, or a copy of it, under another name, reads the vectors its first evaluation cached."""
    (tmp_path / "minilm").symlink_to(tiny_model_dir, target_is_directory=True)
    shutil.copytree(tiny_model_dir, tmp_path / "copied")
    shared = [*MODEL, "--cache-dir", tmp_path / "cache", "--data", sets / "alpha", "--bm25"]
    first = count_encoded_batches(monkeypatch)
    assert cli("evaluate", "--model", tiny_model_dir, *shared, "--output", tmp_path / "one") == 0 and first
    for number, model in enumerate((tmp_path / "minilm", tmp_path / "copied")):
        again = count_encoded_batches(monkeypatch)
        assert cli("evaluate", "--model", model, *shared, "--output", tmp_path / f"again{number}") == 0
        assert again == []  # before: the link, named otherwise, was encoded again
    linked = json.loads((tmp_path / "again0" / "results.json").read_text())
    assert linked["systems"] == ["minilm", "BM25"] and linked["model_path"] == str(tmp_path / "minilm")
    assert len(list((tmp_path / "cache").iterdir())) == 1


@pytest.mark.parametrize(("extra", "message"), [
    (["--run", "{tmp}/run.trec"], "--run: applies to one data set evaluated alone, not to a table"),
    (["--output", "{tmp}/table.json"], "a table (2 data sets) goes into a folder (results.md"),
    (["--metrics", "ndcg"], "--metrics: 'ndcg' is not a metric"),
])
def test_table_errors_are_one_line(tmp_path, sets, tiny_model_dir, capsys, extra, message):
    model = [] if "--run" in extra else ["--model", tiny_model_dir]
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 x\n")  # a run file, so that the table is what is refused
    args = [arg.format(sets=sets, tmp=tmp_path) for arg in extra]
    assert cli("evaluate", *model, "--data", sets, *args) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error


def test_a_table_error_names_what_made_the_table(tmp_path, sets, tiny_model_dir, capsys):
    """One data set with --hybrid (or --bm25) is a table too: the refusal says so, not "several data sets"."""
    one = ["evaluate", "--model", tiny_model_dir, "--data", sets / "alpha", "--output", tmp_path / "one.json"]
    assert cli(*one, "--hybrid") == 2
    assert "--output " in (error := capsys.readouterr().err) and "a table (--hybrid) goes into a folder" in error
    assert cli(*one, "--bm25", "--per-query") == 2
    assert ("--per-query: applies to one data set evaluated alone; a table (--bm25) keeps every query's scores as "
            "per-query.json in its --output folder") in capsys.readouterr().err


def test_another_evaluation_into_the_same_folder_is_refused(tmp_path, sets, tiny_model_dir, capsys):
    report = ["--data", sets / "alpha", "--output", tmp_path / "report"]
    assert cli("evaluate", "--model", tiny_model_dir, *MODEL, *report) == 0
    assert cli("evaluate", "--model", tiny_model_dir, *["cls" if word == "mean" else word for word in MODEL],
               *report) == 2
    assert "belongs to another run (pooling differ)" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli("evaluate", "--model", tiny_model_dir, "--data", tmp_path / "empty") == 2
    assert "neither a data set" in capsys.readouterr().err
