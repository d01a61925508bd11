"""Round ten, `retromae report`'s cells (audit 11, class H, and its smaller finding on eval/SF.JSON):

- A column compares one data set and split, as each evaluation file records them: variants whose files of one NAME
  measured different ones get columns of their own, named by what they measured, with one warning
  (`evaluation.experiments.comparable_columns`).
- Evaluate's table folder (eval/NAME/results.json, or that file as eval/NAME.json) is read: its model's scores,
  BM25's and the hybrid's beside them; a JSON of neither layout, a table of several models, two files giving one
  column and a folder given twice are refused in one line (`eval_cells`, `variant_cells`, `ReportConfig`).
- Rows are named by the shortest path that tells them apart (`names.distinct_names`) and report.json keeps each
  row's folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import error_line

from retromae.cli import main
from retromae.evaluation.experiments import comparable_columns, read_variant, read_variants
from retromae.evaluation.report import save_results
from retromae.evaluation.table import SetRow, Table
from retromae.runtime.errors import ConfigError
from retromae.runtime.lines import quoted

SCORES = {"ndcg@10": 0.5, "recall@100": 0.75, "mrr@10": 0.25}


def file_result(path: Path, data: str | None = "beir/sf", split: str | None = "test", scale: float = 1.0) -> Path:
    """An `evaluate --output FILE.json` result as `evaluation.run.evaluate_one` saves it (None: a field not
    recorded)."""
    recorded = {key: value for key, value in (("data", data), ("split", split)) if value is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_results({**{key: value * scale for key, value in SCORES.items()}, "source": "run.trec", **recorded}, path)
    return path


def table_result(path: Path, sets: dict[str, str], models: tuple[str, ...] = ("m",), hybrid: bool = False,
                 split: str = "test") -> Path:
    """An `evaluate --output FOLDER` results.json as `evaluation.table.write_report` writes it (the table's
    `as_dict` beside what `evaluation.run` says of the run: models, split, data)."""
    systems = [*models, *(["BM25", "m+BM25"] if hybrid else [])]
    rows = [SetRow(name, 10, 40, {system: dict(SCORES) for system in systems}) for name in sets]
    about = {"models": {model: f"/models/{model}" for model in models}, "split": split, "data": sets}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**about, **Table(systems, ["ndcg@10"], rows).as_dict()}))
    return path


# Item 1: a column compares one data set and split.

DIFFERENCES = {
    "another data set": {"data": "other/sf"},
    "another split": {"split": "train"},
    "both": {"data": "other/sf", "split": "train"},
    "no data recorded": {"data": None},
    "no split recorded": {"split": None},
}


@pytest.mark.parametrize("layout", ["file", "table"])
@pytest.mark.parametrize("difference", DIFFERENCES)
def test_cells_measured_on_different_data_get_columns_of_their_own_with_one_warning(difference, layout, tmp_path,
                                                                                     capsys):
    on = {"data": "beir/sf", "split": "test", **DIFFERENCES[difference]}
    file_result(tmp_path / "a" / "eval" / "sf.json")
    if layout == "file":
        file_result(tmp_path / "b" / "eval" / "sf.json", on["data"], on["split"])
    else:
        table_result(tmp_path / "b" / "eval" / "sf" / "results.json", {"sf": on["data"]}, split=on["split"])
    variants = [read_variant(tmp_path / name) for name in ("a", "b")]
    comparable_columns(variants)
    other = ", ".join([quoted(on["data"]) if on["data"] is not None else "data not recorded",
                       f"split {quoted(on['split'])}" if on["split"] is not None else "split not recorded"])
    assert list(variants[0].scores) == [f"sf ('beir/sf', split 'test') {key}" for key in ("ndcg@10", "recall@100")]
    assert list(variants[1].scores) == [f"sf ({other}) ndcg@10", f"sf ({other}) recall@100"]
    assert error_line(capsys) == (f"retromae: warning: the 'sf' columns were measured on different data (a: 'beir/sf', "
                                  f"split 'test'; b: {other}); each is shown in columns of its own")


@pytest.mark.parametrize("layout", ["file", "table", "table named NAME.json"])
def test_cells_of_one_data_set_and_split_share_their_column_without_a_word(layout, tmp_path, capsys):
    file_result(tmp_path / "a" / "eval" / "sf.json")
    if layout == "file":
        file_result(tmp_path / "b" / "eval" / "sf.json", scale=0.5)
    else:
        table_result(tmp_path / "b" / "eval" / ("sf.json" if layout.endswith(".json") else "sf/results.json"),
                     {"sf": "beir/sf"})
    variants = [read_variant(tmp_path / name) for name in ("a", "b")]
    comparable_columns(variants)
    assert [list(v.scores) for v in variants] == [["sf ndcg@10", "sf recall@100"]] * 2
    assert variants[1].measured["sf"]["data"] == "beir/sf" and capsys.readouterr().err == ""


# Item 2: evaluate's table folder read; what is neither refused.

TABLES = {
    "one set": ({"sf": "beir/sf"}, False, ["sf ndcg@10", "sf recall@100"]),
    "two sets": ({"sf": "beir/sf", "fiqa": "beir/fiqa"}, False,
                 ["sf/sf ndcg@10", "sf/sf recall@100", "sf/fiqa ndcg@10", "sf/fiqa recall@100"]),
    "a hybrid": ({"sf": "beir/sf"}, True, ["sf ndcg@10", "sf recall@100", "sf BM25 ndcg@10", "sf BM25 recall@100",
                                           "sf hybrid ndcg@10", "sf hybrid recall@100"]),
}


@pytest.mark.parametrize("place", ["eval/sf/results.json", "eval/sf.json", "eval/SF.JSON"])
@pytest.mark.parametrize("case", TABLES)
def test_evaluates_table_is_read_wherever_it_lies(case, place, tmp_path):
    sets, hybrid, columns = TABLES[case]
    table_result(tmp_path / "v" / place, sets, hybrid=hybrid)
    variant = read_variant(tmp_path / "v")
    named = place.split("/")[1].split(".")[0]  # SF.JSON gives the columns of SF
    assert list(variant.scores) == [column.replace("sf", named, 1) for column in columns]
    assert set(variant.scores.values()) == {0.5, 0.75}


REFUSED = {
    "neither layout": (lambda v: (v / "eval").mkdir() or (v / "eval" / "sf.json").write_text('{"ndcg@5": 0.5}'),
                       "eval/sf.json: not a result of `retromae evaluate --output` (no 'sets', and none of ndcg@10, "
                       "recall@100, spearman)"),
    "not an object": (lambda v: (v / "eval").mkdir() or (v / "eval" / "sf.json").write_text("[0.5]"),
                      "eval/sf.json: holds a JSON list, not an object"),
    "several models": (lambda v: table_result(v / "eval" / "sf" / "results.json", {"sf": "b"}, models=("m", "n")),
                       "eval/sf/results.json: compares 2 models ('m', 'n'); a report row is one variant's: evaluate "
                       "its model alone"),
    "a table without data": (lambda v: (v / "eval").mkdir() or (v / "eval" / "t.json").write_text(
        json.dumps({"models": {"m": "m"}, "systems": ["m"], "sets": {"sf": {"m": SCORES}}})),
                             "eval/t.json: not the results.json of `retromae evaluate --output FOLDER` (at 'data')"),
    "a split not text": (lambda v: file_result(v / "eval" / "sf.json").write_text(json.dumps({**SCORES, "split": 1})),
                         "eval/sf.json: field 'split' is 1, not a path or split name"),
    "one column twice": (lambda v: file_result(v / "eval" / "sf.json") and table_result(
        v / "eval" / "sf" / "results.json", {"sf": "beir/sf"}),
                         "eval/sf.json: gives column 'sf ndcg@10', as {v}/eval/sf/results.json does; keep one of them"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_report_cannot_read_as_an_evaluation_is_refused_in_one_line(case, tmp_path, capsys):
    make, message = REFUSED[case]
    variant = tmp_path / "v"
    variant.mkdir()
    make(variant)
    assert main(["report", "--variants", str(variant), "--output", str(tmp_path / "out")]) == 2
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {variant}/") and message.format(v=variant) in line
    assert not (tmp_path / "out").exists()


# Item 3: rows named apart; report.json keeps their folders; a folder given twice refused.

ROWS = {
    "two names": (["runs/a", "runs/b"], ["a", "b"]),
    "one name in two folders": (["a/v", "b/v"], ["a/v", "b/v"]),
    "one name two levels up": (["x/a/v", "y/a/v", "w"], ["x/a/v", "y/a/v", "w"]),
}


@pytest.mark.parametrize("case", ROWS)
def test_rows_are_named_by_the_shortest_path_that_tells_them_apart(case, tmp_path, monkeypatch):
    folders, names = ROWS[case]
    monkeypatch.chdir(tmp_path)
    for folder in folders:
        file_result(Path(folder) / "eval" / "sf.json")
    variants = read_variants([Path(folder) for folder in folders])
    assert [(v.name, v.path) for v in variants] == [(n, str(tmp_path / f)) for n, f in zip(names, folders, strict=True)]


def test_the_report_names_each_row_and_keeps_its_folder(tmp_path, capsys):
    folders = [tmp_path / "a" / "v", tmp_path / "b" / "v"]
    for folder in folders:
        file_result(folder / "eval" / "sf.json")
    assert main(["report", "--variants", *map(str, folders), "--output", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in table[2:4]] == ["| a/v", "| b/v"]
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(v["name"], v["path"], v["measured"]["sf"]["data"]) for v in saved] == [
        ("a/v", str(folders[0]), "beir/sf"), ("b/v", str(folders[1]), "beir/sf")]


@pytest.mark.parametrize("spelling", ["same", "slash", "dot", "link"])
def test_a_folder_given_twice_is_refused_before_anything_is_written(spelling, tmp_path, capsys):
    folder = tmp_path / "v"
    file_result(folder / "eval" / "sf.json")
    os.symlink(folder, tmp_path / "link")
    second = {"same": str(folder), "slash": f"{folder}/", "dot": f"{tmp_path}/./v", "link": str(tmp_path / "link")}
    assert main(["report", "--variants", str(folder), second[spelling], "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == (f"retromae: error: --variants: names the folder {quoted(str(folder))} twice (a row "
                                  "each time); give it once")
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_a_folder_given_twice_as_the_command_does(tmp_path):
    import retromae

    folder = file_result(tmp_path / "v" / "eval" / "sf.json").parent.parent
    with pytest.raises(ConfigError, match=r"^--variants: names the folder '.*/v' twice \(a row each time\); give"):
        retromae.report(variants=[folder, tmp_path / "v" / "."], output=tmp_path / "out")
    assert not (tmp_path / "out").exists()
