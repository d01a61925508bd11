"""Round ten: a query that is also a document under its own id (ArguAna, Quora, CQADupStack) is not its own answer.

Every query found itself at rank 1 and was counted as a hit that is not relevant: NDCG@10 0.572 where BEIR's
EvaluateRetrieval, which leaves such hits out (ignore_identical_ids, its default), gives 0.854. One rule says which hit
is the query itself (`data.ranking.is_the_query`: its id, unless the query's judgments grade it relevant); every metric
leaves it out (`evaluation.metrics.scored_run`, in `evaluate_run`), every evaluating search retrieves one more so that
k remain (`retrieval_depth`), `evaluate --keep-identical-ids` keeps it, and mining never takes it as a negative.
The dense paths are checked against the same set without the query documents: an exact search ranks the other
documents alike, so leaving the query out must give that set's figures exactly, at every cut-off.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import bare_config, error_line, tiny_beir

import retromae
from retromae.adaptation.guard import score
from retromae.cli import main
from retromae.data.ranking import is_the_query
from retromae.data.retrieval_sets import load_retrieval_set, read_trec_run
from retromae.data.training_groups import TrainingExample, TrainingSet, load_training_folder
from retromae.evaluation.metrics import evaluate_run
from retromae.evaluation.probe import Probe
from retromae.evaluation.probe_options import ProbeOptions
from retromae.models.encoder import Encoder
from retromae.retrieval.mining import choose_negatives
from retromae.retrieval.mining_options import MiningOptions
from retromae.retrieval.search import dense_search
from retromae.workflows.config import PRESETS
from retromae.workflows.quickstart import evaluate_dense

TEST_QUERIES = [f"q{i}" for i in range(36, 48)]  # tiny_beir's test split
KS = ["--k-values", "1", "3"]


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict[str, Path]:
    """"without": tiny_beir; "themselves": the same with each query also a document under its id (its own text)."""
    root = tmp_path_factory.mktemp("identical")
    tiny_beir(root / "without")
    folder = Path(shutil.copytree(root / "without", root / "themselves"))
    with (folder / "queries.jsonl").open() as queries, (folder / "corpus.jsonl").open("a") as corpus:
        for line in queries:
            record = json.loads(line)
            corpus.write(json.dumps({"_id": record["_id"], "title": "", "text": record["text"]}) + "\n")
    return {"without": root / "without", "themselves": folder}


@pytest.mark.parametrize(("doc_id", "judged", "itself"), [
    ("q1", None, True), ("d1", None, False), ("q1", {"d1": 1, "q1": 0}, True), ("q1", {"q1": 1}, False)],
    ids=["its id", "another id", "its id judged not relevant", "its id judged relevant (debian)"])
def test_the_query_itself_is_the_hit_under_its_id_unless_judged_relevant(doc_id, judged, itself):
    assert is_the_query("q1", doc_id, judged) is itself


def test_evaluate_run_leaves_the_query_out_as_beir_does_and_keeps_it_when_asked():
    qrels, run = {"a": {"x": 1}}, {"a": {"a": 3.0, "x": 2.0}}
    assert evaluate_run(qrels, run, (1,))["ndcg@1"] == 1.0
    assert evaluate_run(qrels, run, (1,), keep_identical_ids=True)["ndcg@1"] == 0.0
    assert evaluate_run({"a": {"a": 1}}, {"a": {"a": 3.0}}, (1,))["ndcg@1"] == 1.0  # its answer, not itself


def single(folder: Path, model: Path, output: Path, *extra: str) -> dict[str, float]:
    output = output.with_suffix(".json")
    assert main(["evaluate", "--model", str(model), "--data", str(folder), *KS, "--output", str(output),
                 *extra]) == 0
    return {key: value for key, value in json.loads(output.read_text()).items() if "@" in key}


def table(folder: Path, model: Path, output: Path, *extra: str) -> dict[str, float]:
    assert main(["evaluate", "--model", str(model), "--data", str(folder), "--bm25", "--hybrid", "--metrics",
                 "ndcg@3", "recall@3", "--output", str(output), *extra]) == 0
    return json.loads((output / "results.json").read_text())["sets"][folder.name]["tiny"]


def api(folder: Path, model: Path, output: Path, *extra: str) -> dict[str, float]:
    results = retromae.evaluate(model=str(model), data=str(folder), k_values=[1, 3],
                                keep_identical_ids=bool(extra))
    return {key: value for key, value in results.items() if "@" in key}


PATHS = {"evaluate --model": single, "evaluate --bm25 --hybrid (table)": table, "retromae.evaluate": api}


@pytest.fixture(scope="module")
def model(tiny_model_dir, tmp_path_factory) -> Path:
    return Path(shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("m") / "tiny"))


@pytest.fixture(scope="module")
def figures(sets, model, tmp_path_factory) -> dict[str, dict[str, float]]:
    """BEIR's protocol by hand: the model's run one deeper than k (4), the lines naming the query as the document
    struck out, scored as it is ("beir"); the run k deep scored with the query kept ("strict"); and what `evaluate
    --run` gives for the unfiltered run ("run")."""
    root = tmp_path_factory.mktemp("figures")
    single(sets["themselves"], model, root / "raw.json", "--keep-identical-ids", "--top-k", "4", "--save-run",
           str(root / "raw.trec"))
    lines = (root / "raw.trec").read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.split()[0] != line.split()[2]]
    (root / "beir.trec").write_text("".join(kept))
    found = {"strict": single(sets["themselves"], model, root / "strict.json", "--keep-identical-ids"),
             "struck": {"lines": len(lines) - len(kept)}}
    for name, run, extra in (("beir", "beir.trec", ["--keep-identical-ids"]), ("run", "raw.trec", [])):
        assert main(["evaluate", "--run", str(root / run), "--data", str(sets["themselves"]), *KS, "--output",
                     str(root / f"{name}.json"), *extra]) == 0
        found[name] = {key: value for key, value in json.loads((root / f"{name}.json").read_text()).items()
                       if "@" in key}
    return found


def test_evaluate_run_scores_a_run_file_as_beir_does(figures):
    assert figures["struck"]["lines"] > 0  # the run holds queries that found themselves (a tiny model's figures may
    assert figures["run"] == figures["beir"]  # all be 0, kept or not, so the figures alone cannot show it)
    assert all(figures["strict"][key] <= figures["beir"][key] for key in figures["beir"])


@pytest.mark.parametrize("path", PATHS)
def test_every_evaluating_path_scores_as_beir_and_as_the_strict_figure_when_asked(path, sets, model, figures,
                                                                                    tmp_path, capsys):
    evaluate = PATHS[path]
    found = evaluate(sets["themselves"], model, tmp_path / "a")
    assert found == {key: figures["beir"][key] for key in found}
    err = capsys.readouterr().err
    if path != "retromae.evaluate":  # the API prints no notes
        assert err.count("queries retrieved themselves (themselves: 12 of 12)") == 1, err
    strict = evaluate(sets["themselves"], model, tmp_path / "b", "--keep-identical-ids")
    assert strict == {key: figures["strict"][key] for key in strict}


def test_a_table_keeps_runs_without_the_query_as_deep_as_asked_and_they_score_as_the_table(sets, model, tmp_path):
    output = tmp_path / "table"
    table(sets["themselves"], model, output)
    results = json.loads((output / "results.json").read_text())["sets"]["themselves"]
    for system in ("tiny", "BM25", "tiny+BM25"):
        path = output / "runs" / "themselves" / f"{system}.trec"
        assert all(qid not in hits and len(hits) == 3 for qid, hits in read_trec_run(path).items()), system
        assert main(["evaluate", "--run", str(path), "--data", str(sets["themselves"]), "--k-values", "3",
                     "--output", str(tmp_path / f"{system}.json"), "--keep-identical-ids"]) == 0
        alone = json.loads((tmp_path / f"{system}.json").read_text())
        assert all(alone[key] == results[system][key] for key in ("ndcg@3", "recall@3")), system


def probe(folder: Path, encoder: Encoder, output: Path) -> float:
    options = bare_config(ProbeOptions, probe=str(folder))
    return Probe(options, encoder.tokenizer, 32, output)._scores(encoder)["probe_ndcg@10"]


LIBRARY = {"adapt's guard": ("retromae.adaptation.guard", lambda folder, encoder, output: score(
               encoder, load_retrieval_set(folder), 64, {"query": "", "passage": ""})[0]),
           "pretrain --probe": ("retromae.evaluation.probe", probe),
           "quickstart": ("retromae.workflows.quickstart", lambda folder, encoder, output: evaluate_dense(
               output / "tiny", folder, PRESETS["cpu"])["ndcg@10"])}


@pytest.mark.parametrize("path", LIBRARY)
def test_the_guard_the_probe_and_quickstart_score_their_search_as_beir(path, sets, model, tmp_path, monkeypatch):
    module, evaluate = LIBRARY[path]
    searched = []

    def search(*args, **kwargs):
        searched.append(dense_search(*args, **kwargs))
        return searched[-1]

    monkeypatch.setattr(f"{module}.dense_search", search)
    shutil.copytree(model, tmp_path / "tiny")
    figure = evaluate(sets["themselves"], Encoder.load(str(model)), tmp_path)
    qrels = load_retrieval_set(sets["themselves"]).qrels
    beir = {qid: {doc: value for doc, value in hits.items() if doc != qid} for qid, hits in searched[0].items()}
    by_hand, strict = (evaluate_run(qrels, run, (10,), keep_identical_ids=True)["ndcg@10"]
                       for run in (beir, searched[0]))
    assert figure == pytest.approx(by_hand, abs=1e-12) != strict


def test_evaluate_refuses_keep_identical_ids_for_sts_pairs(model, tmp_path, capsys):
    rows = [f"main\tfile\t2012\t{i:04d}\t{i % 6}.0\tone two three {i}\tone two {i}" for i in range(8)]
    (tmp_path / "sts-test.csv").write_text("\n".join(rows) + "\n")
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path), "--keep-identical-ids"]) == 2
    line = error_line(capsys)
    assert line.startswith("retromae: error: --keep-identical-ids: acts on retrieval sets"), line


def test_mining_never_takes_the_query_itself_by_id_from_a_folder_and_rows_are_not_ids(sets):
    data = load_training_folder(sets["themselves"], "test")
    own = {qid: data.ids.index(qid) for qid in TEST_QUERIES}
    for row in own.values():
        data.texts[row] = "a title " + data.texts[row]  # texts that differ: only the id tells
    rankings = [[own[example.query_id], *range(10)] for example in data.examples]
    options = MiningOptions(negatives_per_query=3, rank_start=1, rank_end=11)
    for example, negatives in zip(data.examples, choose_negatives(data, rankings, options), strict=True):
        assert own[example.query_id] not in negatives and len(negatives) == 3
    rows = TrainingSet(["x", "y", "z"], ["0", "1", "2"], [TrainingExample("query", [2], query_id="1")], ids_given=False)
    assert choose_negatives(rows, [[0, 1, 2]], options) == [[0, 1]]  # ids of rows are not a corpus's
