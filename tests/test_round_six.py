"""Round six of the hostile-input audit (/work/audit6/report.md, sections 4, 8 and 9), each class tried through
every command it reaches: a relevance grade beyond a C int and a metric that is not finite (evaluate with a run,
a model and a table, the pre-training probe, quickstart's and adapt's scoring); an optimiser step that would read
the data without end (pretrain, finetune, train-reranker); a rank window beyond the passages mined (mine,
finetune, train-reranker). Each is one line and exit code 2, before the work and with nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tiny_beir

import retromae.training.loop
from retromae.adaptation.guard import metric_of
from retromae.cli import main
from retromae.data import retrieval_sets
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.evaluation import metrics
from retromae.runtime.errors import NonFiniteError
from retromae.runtime.lines import quoted
from retromae.workflows.quickstart import evaluate_bm25

HUGE_GRADE = "17" + "0" * 307  # finite, but two of them sum to infinity: NDCG inf/inf = NaN (the audit's case)


def one_line(capsys) -> str:
    """The command's one line of error, checked to come without a traceback."""
    err = capsys.readouterr().err
    lines = [line[line.index("retromae: "):].strip() for line in err.splitlines() if "retromae: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture()
def beir(tmp_path) -> Path:
    """The tiny BEIR folder; query q36 of its test split judges every document with `HUGE_GRADE` (from line 2), so
    that any ranking's top 10 sums to infinity."""
    folder = tmp_path / "beir"
    tiny_beir(folder)
    qrels = folder / "qrels" / "test.tsv"
    rows = qrels.read_text().splitlines()
    huge = [f"q36\td{i}\t{HUGE_GRADE}" for i in range(48)]
    qrels.write_text("\n".join([rows[0], *huge, *rows[2:]]) + "\n")
    return folder


@pytest.fixture()
def no_step(monkeypatch):
    """A training run that takes an optimiser step fails the test at once (the refusals come before any)."""
    def step(self, batches):
        raise AssertionError("an optimiser step began")

    monkeypatch.setattr(retromae.training.loop.Trainer, "_optimizer_step", step)


def metric_commands(model: Path, beir: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that scores a ranking against qrels, by name: its arguments."""
    run = tmp_path / "run.trec"
    run.write_text("".join(f"q{i} Q0 d{i} 1 2.0 x\nq{i} Q0 d0 2 1.0 x\n" for i in range(36, 48)))
    out = tmp_path / "out"  # each command writes its own output in it
    return {"evaluate --run": ["evaluate", "--run", str(run), "--data", str(beir), "--output", f"{out}/run.json"],
            "evaluate --model": ["evaluate", "--model", str(model), "--data", str(beir), "--output",
                                 f"{out}/model.json"],
            "evaluate table": ["evaluate", "--model", str(model), "--bm25", "--data", str(beir), "--output",
                               f"{out}/table"],
            "pretrain --probe": ["pretrain", "--model", str(model), "--corpus", str(beir / "corpus.jsonl"),
                                 "--output", f"{out}/probe", "--max-steps", "1", "--max-length", "32", "--probe",
                                 str(beir), "--probe-split", "test", "--cache-dir", str(tmp_path / "cache")]}


def test_a_grade_beyond_a_c_int_is_refused_by_every_command_naming_file_and_line(tiny_model_dir, beir, tmp_path,
                                                                                 capsys):
    """Section 4: the bound is trec_eval's (a grade is a C int), checked where qrels are read, before any work."""
    commands = metric_commands(tiny_model_dir, beir, tmp_path)
    commands["mine"] = ["mine", "--data", str(beir), "--split", "test", "--negatives", "bm25", "--output",
                        str(tmp_path / "out.jsonl")]
    for name, args in commands.items():
        assert main(args) == 2, name
        assert one_line(capsys) == (f"retromae: error: {beir / 'qrels' / 'test.tsv'}:2: relevance grade "
                                    f"{quoted(HUGE_GRADE)} is beyond what trec_eval reads (a C int): "
                                    "give a whole number from -2147483647 to 2147483647"), name
        assert not (tmp_path / "out").exists(), name


def test_a_metric_that_is_not_finite_is_never_written_by_any_command(tiny_model_dir, beir, tmp_path, capsys,
                                                                     monkeypatch):
    """Section 4, the second rule: with the grade bound lifted, every metric path stops at `evaluate_run`'s check,
    naming the query set, the metric and the query (before: `"ndcg@10": NaN` in results, exit 0)."""
    monkeypatch.setattr(retrieval_sets, "MAX_GRADE", float("inf"))
    monkeypatch.setattr(metrics, "MAX_GRADE", float("inf"))  # evaluate_run's own bound (round eight) too
    for name, args in metric_commands(tiny_model_dir, beir, tmp_path).items():
        assert main(args) == 2, name
        line = one_line(capsys)
        assert "ndcg@10 of query 'q36' is nan, not a finite number" in line and "beir" in line, (name, line)
        assert not [*(tmp_path / "out").glob("*.json"), *(tmp_path / "out").rglob("results.*")], name
    data = load_retrieval_set(beir)
    for score in (lambda: evaluate_bm25(beir), lambda: metric_of(data, {"q36": {"d36": 2.0, "d0": 1.0}})):
        with pytest.raises(NonFiniteError, match="ndcg@10 of query 'q36' is nan"):
            score()


def test_an_optimiser_step_that_reads_the_data_without_end_is_refused_by_every_training_command(
        tiny_model_dir, tmp_path, capsys, no_step):
    """Section 8: `--gradient-accumulation-steps 100000000` on 48 documents ran for ever (a step wraps round the
    data from epoch to epoch); a step may read it at most 100 times over, as every training command's sampler says."""
    beir = tmp_path / "beir"
    tiny_beir(beir)
    out, many = str(tmp_path / "out"), ["--gradient-accumulation-steps", "100000000", "--max-steps", "1"]
    commands = {
        "pretrain": ["--corpus", str(beir / "corpus.jsonl"), "--max-length", "32", "--batch-size", "2",
                     "--cache-dir", str(tmp_path / "cache")],
        "finetune": ["--data", str(beir), "--negatives", "none", "--batch-size", "4", "--group-size", "2"],
        "train-reranker": ["--data", str(beir), "--batch-size", "4", "--group-size", "2"],
    }
    for command, args in commands.items():
        assert main([command, "--model", str(tiny_model_dir), "--output", out, *args, *many]) == 2, command
        line = one_line(capsys)
        assert "global batches; --gradient-accumulation-steps 100000000 reads 100,000,000 in one optimiser step" in line
        assert line.endswith("(a step may wrap round the data at most 100 times): lower --gradient-accumulation-steps")
        assert not Path(out).exists(), command


def test_a_rank_window_beyond_the_passages_is_refused_by_every_mining_command(tiny_model_dir, tmp_path, capsys,
                                                                              no_step):
    """Section 9: `mine --rank-start 50 --rank-end 100` over 48 passages mined nothing, exit 0, every `neg` empty."""
    beir = tmp_path / "beir"
    tiny_beir(beir)
    out, window = str(tmp_path / "out"), ["--rank-start", "50", "--rank-end", "100", "--negatives", "bm25"]
    model, steps = ["--model", str(tiny_model_dir)], ["--batch-size", "4", "--group-size", "2", "--max-steps", "1"]
    commands = {"mine": [], "finetune": [*model, *steps], "train-reranker": [*model, *steps]}
    for command, args in commands.items():
        assert main([command, "--data", str(beir), "--output", out, *window, *args]) == 2, command
        assert one_line(capsys) == (f"retromae: error: --rank-start: the window of ranks 50 to 100 lies beyond the 48 "
                                    f"passages of {beir} (train) that mining ranks, so no negative could be mined; "
                                    "give --rank-start 48 or less"), command
        assert not Path(out).exists(), command
