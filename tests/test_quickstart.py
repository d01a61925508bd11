"""The quickstart: its preset choice, its stage display, and the pipeline end to end on a tiny BEIR folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import tiny_beir

from retromae.cli import main
from retromae.runtime.console import Stages
from retromae.runtime.options import ConfigError
from retromae.workflows.config import PRESETS, QuickstartConfig, choose_preset
from retromae.workflows.quickstart import planned_stages


@pytest.mark.parametrize(("device", "preset"), [("cuda", "cuda"), ("cuda:1", "cuda"), ("cpu", "cpu"), ("mps", "cpu")])
def test_the_preset_follows_the_device(device, preset):
    assert choose_preset(device) == preset


def test_options_override_the_preset_and_an_explicit_preset_wins_over_the_device():
    name, budget = QuickstartConfig(pretrain_steps=7, hidden_size=64).budget("cuda")
    assert name == "cuda" and budget.pretrain_steps == 7 and budget.hidden_size == 64
    assert budget.layers == PRESETS["cuda"].layers and budget.mixed_precision == "bf16"
    name, budget = QuickstartConfig(preset="cpu").budget("cuda")
    assert name == "cpu" and budget == PRESETS["cpu"] and budget.mixed_precision == "no"
    with pytest.raises(ConfigError, match="--hidden-size"):
        QuickstartConfig(hidden_size=100)


def test_stages_are_numbered_with_the_expected_remaining_time(capsys):
    plan = planned_stages(PRESETS["cpu"], build_data=True)
    stages = Stages.planned(plan)
    for _ in plan:
        stages.next()
    lines = capsys.readouterr().err.split("\n\n")
    assert len(lines) == len(plan) == 8
    assert lines[0].strip().startswith("1/8 build the standard-library docstring set (about ")
    assert "pre-train with RetroMAE (enhanced), 1200 steps x 32 x 64 tokens" in lines[6]
    assert lines[-1].startswith("8/8 fine-tune and evaluate: RetroMAE (enhanced)")
    seconds = dict(plan)  # each objective's pre-training is planned at its own pace
    shape = "1200 steps x 32 x 64 tokens"
    mlm, retromae = (seconds[f"pre-train with {name}, {shape}"] for name in ("MLM", "RetroMAE (enhanced)"))
    pace = PRESETS["cpu"].seconds_per_step
    assert retromae / mlm == pytest.approx(pace["retromae"] / pace["mlm"])


def test_quickstart_writes_a_table_of_every_variant_against_bm25_and_a_plot(tmp_path, capsys):
    tiny_beir(tmp_path / "data")
    output = tmp_path / "run"
    assert main(["quickstart", "--data", str(tmp_path / "data"), "--output", str(output), "--preset", "cpu",
                 "--vocab-size", "300", "--hidden-size", "64", "--layers", "1", "--max-length", "32",
                 "--pretrain-steps", "3", "--pretrain-batch-size", "4", "--finetune-epochs", "1",
                 "--finetune-batch-size", "8"]) == 0
    saved = json.loads((output / "results.json").read_text())
    assert saved["preset"] == "cpu" and saved["device"] in ("cpu", "cuda") and saved["architecture"] == "bert"
    results = saved["results"]
    assert list(results) == ["BM25", "no pre-training", "MLM", "RetroMAE (enhanced)"]
    for scores in results.values():
        assert 0.0 <= scores["ndcg@10"] <= 1.0 and 0.0 <= scores["mrr@10"] <= 1.0
        assert 0.0 <= scores["recall@100"] <= 1.0 and scores["minutes"] >= 0.0
    assert results["BM25"]["ndcg@10"] > 0.5  # the queries are the documents' first words
    table = (output / "results.md").read_text()
    assert "| model | NDCG@10 | MRR@10 | Recall@100 | minutes |" in table and "| RetroMAE (enhanced) |" in table
    assert (output / "results.png").stat().st_size > 0
    printed, stages = capsys.readouterr()
    assert "device: " in printed and "budget: the cpu preset, about " in printed and "{" not in printed
    assert "a 1-layer bert encoder of hidden size 64" in printed
    assert "each objective pre-trains it for 3 steps of 4 blocks of 32 tokens" in printed
    assert "\n7/7 fine-tune and evaluate" in stages
    mlm = json.loads((output / "pretrain-mlm" / "config.json").read_text())
    retromae = json.loads((output / "pretrain-retromae" / "config.json").read_text())
    assert (mlm["objective"], mlm["encoder_mask_ratio"]) == ("mlm", 0.15)
    assert (retromae["objective"], retromae["decoding"]) == ("retromae", "enhanced")
    assert mlm["max_steps"] == retromae["max_steps"] == 3 and mlm["seed"] == retromae["seed"]
    assert json.loads((output / "finetune-none" / "config.json").read_text())["pooling"] == "cls"
    # `retromae evaluate` on a quickstart model reads the length the model records and prints the quickstart's figures
    assert json.loads((output / "initial-model" / "retromae_encoder.json").read_text())["max_length"] == 128
    assert main(["evaluate", "--model", str(output / "finetune-retromae" / "encoder"), "--data",
                 str(tmp_path / "data"), "--split", "test", "--output", str(tmp_path / "eval.json")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert {key: evaluated[key] for key in ("ndcg@10", "mrr@10", "recall@100")} == pytest.approx(
        {key: results["RetroMAE (enhanced)"][key] for key in ("ndcg@10", "mrr@10", "recall@100")}, abs=1e-9)


def test_the_frontier_recipe_averages_the_gaps_over_seeds(tmp_path):
    path = Path(__file__).resolve().parents[1] / "recipes" / "quickstart_frontier.py"
    spec = importlib.util.spec_from_file_location("quickstart_frontier", path)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    frontier_rows, frontier_table, plot_frontier = recipe.frontier_rows, recipe.frontier_table, recipe.plot_frontier

    def summary(steps, none, mlm, retromae):
        return {"budget": {"pretrain_steps": steps}, "results": {
            "no pre-training": {"ndcg@10": none}, "MLM": {"ndcg@10": mlm},
            "RetroMAE (enhanced)": {"ndcg@10": retromae, "pretrain_minutes": steps / 100}}}

    rows = frontier_rows([summary(300, 0.1, 0.2, 0.5), summary(100, 0.1, 0.1, 0.1), summary(300, 0.1, 0.2, 0.3)])
    assert [(row["steps"], row["seeds"]) for row in rows] == [(100, 1), (300, 2)]
    assert rows[1]["RetroMAE - MLM"] == pytest.approx((0.2, 0.1, 0.3))
    assert rows[1]["RetroMAE - none"] == pytest.approx((0.3, 0.2, 0.4))
    assert rows[1]["pretrain minutes"] == pytest.approx((3.0, 3.0, 3.0))
    assert "| 300 | 2 | 3.000 (3.000..3.000) |" in frontier_table(rows)
    plot_frontier(rows, tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").stat().st_size > 0


@pytest.mark.parametrize("architecture,tokenizer_model", [("modernbert", "BPE"), ("xlm-roberta", "Unigram")])
def test_the_initial_model_is_of_the_chosen_family_with_its_kind_of_tokenizer(tmp_path, architecture,
                                                                               tokenizer_model):
    from transformers import AutoConfig, AutoTokenizer

    from retromae.workflows.quickstart import describe_budget, initial_model

    tiny_beir(tmp_path / "data")
    budget = QuickstartConfig(vocab_size=300, hidden_size=64, layers=1).budget("cpu")[1]
    folder = initial_model([str(tmp_path / "data" / "corpus.jsonl")], budget, tmp_path / "initial", 42, architecture)
    assert AutoConfig.from_pretrained(folder).model_type == architecture
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert json.loads(tokenizer.backend_tokenizer.to_str())["model"]["type"] == tokenizer_model
    assert f"a 1-layer {architecture} encoder of hidden size 64" in describe_budget("cpu", budget, 60, architecture)


def test_the_results_plot_names_the_model_and_labels_its_bars(tmp_path, monkeypatch):
    """Issue 38: results.png did not say which model its rows share; its title now does, and each bar its score."""
    import matplotlib.pyplot

    import retromae.workflows.quickstart

    closed = []
    monkeypatch.setattr(retromae.workflows.quickstart, "pyplot",
                        lambda: type("Pyplot", (), {"subplots": staticmethod(matplotlib.pyplot.subplots),
                                                    "close": staticmethod(closed.append)}))
    (tmp_path / "pretrain-mlm").mkdir()
    records = [{"step": s, "loss": 9.0 - s, "encoder_mlm": 9.0 - s, "lr": 1e-4, "tokens": 64 * s} for s in (1, 2)]
    (tmp_path / "pretrain-mlm" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"preset": "cpu", "architecture": "bert", "budget": {"layers": 1, "hidden_size": 64, "vocab_size": 3000}}
    caption = retromae.workflows.quickstart.model_caption(summary, tmp_path / "stdlib-docstrings")
    assert caption == ("a 1-layer bert encoder of hidden size 64 (vocabulary 3,000), from random weights; cpu preset; "
                       "test split of stdlib-docstrings")
    results = {"BM25": {"ndcg@10": 0.355}, "no pre-training": {"ndcg@10": 0.0}, "MLM": {"ndcg@10": 0.036}}
    retromae.workflows.quickstart.plot_results({"MLM": tmp_path / "pretrain-mlm"}, results, 6.5,
                                               tmp_path / "results.png", caption)
    assert (tmp_path / "results.png").read_bytes().startswith(b"\x89PNG")
    figure = closed[0]
    assert figure.get_suptitle() == caption
    assert [text.get_text() for text in figure.axes[1].texts] == ["0.355", "0.000", "0.036"]
