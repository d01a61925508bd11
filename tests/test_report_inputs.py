"""What `report` and `evaluate` read is read as hostile, and no NaN is written out (the audit's sections 9, 10, 12).

Before: a times.txt of `pretrain nan` wrote NaN into report.json, a metrics.jsonl loss given as the text "NaN" showed
"nan → 3.00", `pretrain abc`, a step "x", a line `[1, 2]`, a loss `{"a": 1}` and a pretrain/config.json of `{}` gave
tracebacks; STS pairs of constant gold scores wrote NaN Pearson and Spearman (and scipy's warning); `evaluate
--qrels-format trec` on a file with a BEIR header read it as BEIR without a word. Generated over every file of a
variant folder `report` reads and the fields read from it: the command exits 2 with one line naming the file (and
line and field), and writes no report.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_beir

from retromae.cli import main
from retromae.evaluation.sts import sts_correlations
from retromae.runtime.errors import DataError, NonFiniteError

# (file of the variant folder, its text, what the refusal names besides the file)
HOSTILE = [
    ("times.txt", "pretrain abc\n", ["times.txt:1", "seconds"]),
    ("times.txt", "pretrain nan\n", ["times.txt:1", "not finite"]),
    ("times.txt", "pretrain -inf\n", ["times.txt:1", "not finite"]),
    ("times.txt", "pretrain 1e999\n", ["times.txt:1", "not finite"]),
    ("times.txt", "pretrain 60\nfinetune -5\n", ["times.txt:2", "negative"]),
    ("times.txt", "pretrain\n", ["times.txt:1", "STAGE SECONDS"]),
    ("pretrain/metrics.jsonl", '{"step": "x", "loss": 1}\n', ["metrics.jsonl:1", "'step'"]),
    ("pretrain/metrics.jsonl", '{"step": -1, "loss": 1}\n', ["metrics.jsonl:1", "'step'"]),
    ("pretrain/metrics.jsonl", '{"step": 1.5, "loss": 1}\n', ["metrics.jsonl:1", "'step'"]),
    ("pretrain/metrics.jsonl", '{"loss": 1}\n', ["metrics.jsonl:1", "'step'"]),
    ("pretrain/metrics.jsonl", "[1, 2]\n", ["metrics.jsonl:1", "JSON object"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "loss": {"a": 1}}\n', ["metrics.jsonl:1", "'loss'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "loss": "NaN"}\n', ["metrics.jsonl:1", "'loss'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "loss": true}\n', ["metrics.jsonl:1", "'loss'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "loss": NaN}\n', ["metrics.jsonl:1", "not finite"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1' + "0" * 400 + "}\n",
     ["metrics.jsonl:2", "'loss'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "encoder_mlm": "x"}\n', ["metrics.jsonl:1", "'encoder_mlm'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "tokens": "x", "probe_ndcg@10": 0.5}\n', ["metrics.jsonl:1", "'tokens'"]),
    ("pretrain/metrics.jsonl", '{"step": 1, "probe_ndcg@10": "0.5"}\n', ["metrics.jsonl:1", "'probe_ndcg@10'"]),
    ("pretrain/config.json", "{}", ["config.json", "'objective' is missing"]),
    ("pretrain/config.json", '{"objective": 5}', ["config.json", "'objective' is 5"]),
    ("pretrain/config.json", '{"objective": ["mlm"]}', ["config.json", "'objective'"]),
    ("pretrain/config.json", '{"objective": "nope"}', ["config.json", "'objective' is 'nope'"]),
    ("pretrain/config.json", '{"objective": "mlm"}', ["config.json", "retromae pretrain"]),
    ("eval/beir.json", '{"ndcg@10": "0.5"}', ["beir.json", "'ndcg@10'"]),
    ("eval/beir.json", '{"ndcg@10": 1e999}', ["beir.json", "not finite"]),
    ("eval/beir.json", '{"ndcg@10": 1' + "0" * 400 + "}", ["beir.json", "'ndcg@10'"]),
]


def variant(folder: Path, file: str | None = None, text: str = "") -> Path:
    """A variant folder with one evaluation, and `file` holding `text`."""
    (folder / "eval").mkdir(parents=True)
    (folder / "eval" / "beir.json").write_text(json.dumps({"ndcg@10": 0.5}))
    if file is not None:
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(text)
    return folder


def one_line_refusal(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "Traceback" not in err and "Warning" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("retromae: error:"), err
    return lines[0]


@pytest.mark.parametrize("file, text, words", HOSTILE, ids=[f"{f}:{t[:30]}" for f, t, _ in HOSTILE])
def test_every_number_report_reads_is_checked_naming_file_line_and_field(tmp_path, capsys, file, text, words):
    folder = variant(tmp_path / "v", file, text)
    line = one_line_refusal(capsys, main(["report", "--variants", str(folder), "--output", str(tmp_path / "out")]))
    assert str(folder) in line and all(word in line for word in words), line
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_report_of_good_numbers_writes_plain_json(tmp_path):
    folder = variant(tmp_path / "v", "times.txt", "pretrain 60\nfinetune 30.5\n")
    (folder / "pretrain").mkdir()
    (folder / "pretrain" / "metrics.jsonl").write_text('{"step": 1, "loss": 3.5}\n{"step": 2, "loss": 3.0}\n')
    assert main(["report", "--variants", str(folder), "--output", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    [record] = json.loads(text)
    assert record["seconds"] == {"pretrain": 60.0, "finetune": 30.5}
    assert record["pretrain_losses"] == [[1, 3.5], [2, 3.0]]


@pytest.mark.parametrize("lines, words", [
    ("g\tf\t2012\t1\t2.5\tA cat\tA dog\ng\tf\t2012\t2\t2.5\tA b\tc d\n", "every gold score is 2.5"),
    ("g\tf\t2012\t1\t2.5\tA cat\tA dog\n", "at least 2 sentence pairs"),
])
def test_sts_pairs_whose_correlation_is_undefined_are_refused_not_written_as_nan(tiny_model_dir, tmp_path, capsys,
                                                                                  lines, words):
    (tmp_path / "sts.csv").write_text(lines)
    code = main(["evaluate", "--model", str(tiny_model_dir), "--data", str(tmp_path / "sts.csv"), "--output",
                 str(tmp_path / "r.json")])
    line = one_line_refusal(capsys, code)
    assert str(tmp_path / "sts.csv") in line and words in line
    assert not (tmp_path / "r.json").exists()


def test_a_model_giving_every_pair_one_similarity_is_refused_not_nan():
    with pytest.raises(NonFiniteError, match="sts.csv: the model gives all 3 sentence pairs .*undefined"):
        sts_correlations(np.eye(3), np.eye(3), np.array([1.0, 2.0, 3.0]), "sts.csv")
    with pytest.raises(DataError, match="sts.csv: every gold score is 1"):
        sts_correlations(np.eye(3), np.eye(3)[::-1], np.ones(3), "sts.csv")


def test_a_declared_qrels_format_the_file_contradicts_is_refused(tmp_path, capsys):
    tiny_beir(tmp_path / "beir")
    (tmp_path / "run.trec").write_text("q36 Q0 d36 1 1.0 x\n")
    code = main(["evaluate", "--run", str(tmp_path / "run.trec"), "--data", str(tmp_path / "beir"),
                 "--qrels-format", "trec", "--output", str(tmp_path / "r.json")])
    line = one_line_refusal(capsys, code)
    assert str(tmp_path / "beir" / "qrels" / "test.tsv") in line and "BEIR header" in line
    assert not (tmp_path / "r.json").exists()
    assert main(["evaluate", "--run", str(tmp_path / "run.trec"), "--data", str(tmp_path / "beir"),
                 "--qrels-format", "beir", "--output", str(tmp_path / "r.json")]) == 0


@pytest.mark.parametrize("args, option", [
    (["evaluate", "--run", "{run}", "--data", "{beir}", "--top-k", "1"], "--top-k"),
    (["evaluate", "--run", "{run}", "--data", "{beir}", "--cache-dir", "{out}"], "--cache-dir"),
    (["index", "--embeddings", "{beir}", "--output", "{out}", "--seed", "5"], "--seed"),
    (["index", "--embeddings", "{beir}", "--output", "{out}", "--seed", "5", "--factory", "HNSW32"], "--seed"),
    (["index", "--embeddings", "{beir}", "--output", "{out}", "--seed", "5", "--factory", "binary"], "--seed"),
])
def test_the_options_the_audit_found_ignored_are_refused_where_they_do_not_act(tmp_path, capsys, args, option):
    tiny_beir(tmp_path / "beir")
    (tmp_path / "run.trec").write_text("q36 Q0 d36 1 1.0 x\n")
    paths = {"run": tmp_path / "run.trec", "beir": tmp_path / "beir", "out": tmp_path / "out"}
    line = one_line_refusal(capsys, main([arg.format(**paths) for arg in args]))
    assert line.startswith(f"retromae: error: {option}: acts only with")
    assert not (tmp_path / "out").exists()
