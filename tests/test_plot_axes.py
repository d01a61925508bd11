"""Every plot of a score keeps its axis within the metric's range (issue 61: results.png's recall axis ran past 1.0):
the range of every registered metric, each plotting function drawn with values at the top of the range, and every
function that saves a figure either checked here or named as plotting no score."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from retromae.evaluation import curves, experiments, table
from retromae.evaluation.axes import clamp, value_range
from retromae.evaluation.metric_registry import CORRELATION, metrics
from retromae.evaluation.probe_options import probe_metrics

ROOT = Path(__file__).resolve().parents[1]
# Functions that save a figure of no score (losses, differences between scores): nothing to clamp.
NO_SCORE_AXIS = {"plot_pretrain_losses": "pre-training losses", "plot_frontier": "gaps between two scores"}


def recipe(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("metric", metrics(), ids=lambda metric: metric.name)
def test_every_metric_has_a_range_and_its_keys_find_it(metric):
    expected = (-1.0, 1.0) if metric.kind == CORRELATION else (0.0, 1.0)
    key = metric.name if metric.kind == CORRELATION else f"{metric.name}@10"
    assert metric.values == expected
    assert value_range(key) == value_range(f"probe_{key}") == value_range(f"scifact {key}") == expected
    assert clamp((0.2, 1.15), key) == (0.2, 1.0) and clamp((-1.5, 0.3), key) == (expected[0], 0.3)
    assert value_range("loss") is None and clamp((0.0, 7.5), "loss") == (0.0, 7.5)


def test_every_probe_key_has_a_range():
    for kind in ("ranking", CORRELATION):
        for name in probe_metrics(kind):
            assert value_range(f"probe_{name}") is not None


def drawn(monkeypatch) -> list:
    """The figures saved from now on (savefig keeps each figure in the list)."""
    import matplotlib.figure

    saved = []
    original = matplotlib.figure.Figure.savefig

    def keep(figure, *args, **kwargs):
        saved.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


def draw_table(path: Path) -> None:
    row = table.SetRow("scifact", 300, 5183, {"model": {"ndcg@10": 0.95, "recall@100": 0.999},
                                              "BM25": {"ndcg@10": 0.96, "recall@100": 0.96}})
    table.plot_table(table.Table(["model", "BM25"], ["ndcg@10", "recall@100"], [row]), path)


def draw_report_bars(path: Path) -> None:
    plt = experiments.pyplot()
    figure, axis = plt.subplots()
    experiments.metric_bars(axis, ["a", "b"], [0.95, 0.99], "scifact recall@100")
    figure.savefig(path)
    plt.close(figure)


def draw_probe_curves(path: Path) -> None:
    points = [curves.ProbePoint(step, step * 100, {"probe_recall@100": 0.9 + step / 200}) for step in (0, 10, 20)]
    curves.plot_probe_curves({"run": points}, path, experiments.pyplot)


def draw_quickstart(path: Path) -> None:
    from retromae.workflows.quickstart import plot_results

    folder = path.parent / "pretrain"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 - s}) + "\n" for s in (1, 2)))
    plot_results({"mlm": folder}, {"BM25": {"ndcg@10": 0.99}, "mlm": {"ndcg@10": 0.98}}, 4.0, path)


def draw_seeds_table(path: Path) -> None:
    recipe("seeds_table").plot({"a": {"recall@100": {"1": 0.98, "2": 0.99}}}, path)


def draw_two_stage(path: Path) -> None:
    rows = [("retromae", "–", "arm", {"stsb": [0.99, 0.98], "ndcg@10": [0.97, 0.99]})]
    recipe("two_stage_cpu").plot(rows, path)


# Each function that saves a figure with a score axis → how the test draws it with values near the top of the range,
# and which axis shows the score ("y" or "x") in which panels (None: all).
DRAWN = {"plot_table": (draw_table, "y", None), "plot_metrics": (draw_report_bars, "x", None),
         "plot_probe_curves": (draw_probe_curves, "y", None), "plot_results": (draw_quickstart, "y", [1]),
         "seeds_table.plot": (draw_seeds_table, "x", None), "two_stage_cpu.plot": (draw_two_stage, "x", None)}


def saving_functions() -> list[str]:
    """Every function of the package and the recipes that calls savefig (a recipe's `plot` as FILE.plot)."""
    found = []
    for path in [*sorted((ROOT / "src").rglob("*.py")), *sorted((ROOT / "recipes").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and "savefig" in ast.unparse(node):
                found.append(f"{path.stem}.{node.name}" if node.name == "plot" else node.name)
    return found


def test_every_function_that_saves_a_figure_is_checked_or_plots_no_score():
    names = saving_functions()
    assert len(names) >= len(DRAWN) + len(NO_SCORE_AXIS) - 1  # plot_metrics saves what metric_bars draws
    for name in names:
        assert name in DRAWN or name in NO_SCORE_AXIS, f"{name} saves a figure: add it to DRAWN or NO_SCORE_AXIS"


@pytest.mark.parametrize("name", list(DRAWN), ids=str)
def test_a_score_axis_ends_at_the_metrics_range(tmp_path, monkeypatch, name):
    draw, which, panels = DRAWN[name]
    saved = drawn(monkeypatch)
    draw(tmp_path / "figure.png")
    axes = [axis for figure in saved for axis in figure.axes]
    for axis in axes if panels is None else [axes[index] for index in panels]:
        low, high = axis.get_ylim() if which == "y" else axis.get_xlim()
        assert 0.9 < high <= 1.0, f"{name}: the score axis runs to {high}"  # before: past 1.0 (recall@100 0.99)
