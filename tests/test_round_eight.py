"""Round eight of the hostile-input audit: what earlier rounds left alone, each at one rule.

- `evaluate --run` of a run whose documents the corpus does not hold scored 0 in every metric without a word (ids
  in another Unicode normalisation, a run of another collection): the run's documents are checked against the
  corpus (`data.retrieval_sets.check_run_documents`), refused when none is in it, said when some are not.
- `evaluation.evaluate_run`, the one computation of every metric, took a library caller's grades and scores as they
  came: an integer grade beyond a float was an OverflowError, a text grade a TypeError, a NaN score ranked
  anywhere. They are held to what the file readers allow (`evaluation.metrics.check_judgments`).
- `evaluate --save-run` wrote the run before its metrics were checked: a refused evaluation left a run behind.
- The cross-encoder's `score` took one text as its characters and a batch size of 0; it is checked as `retromae
  score`'s options are (`runtime.options.checked_arguments`).
- $RETROMAE_CACHE where no folder can be (a file, under a file, a dangling link) was found at the cache's first
  use, after the command had claimed its output; every command now refuses it first (`runtime.io.check_cache_setting`,
  in `preflight.check_config`), as --cache-dir's check does.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import command_inputs, error_line, tiny_beir
from test_output_paths import CASES

import retromae.evaluation.run
from retromae.cli import main
from retromae.evaluation import evaluate_run
from retromae.runtime.errors import NonFiniteError
from retromae.runtime.options import ConfigError


@pytest.fixture()
def accented(tmp_path) -> Path:
    """A BEIR folder whose document ids carry an accent, written NFC: d0..d3 are 'café0'..'café3'."""
    folder = tmp_path / "beir"
    tiny_beir(folder)
    for name in ("corpus.jsonl", "qrels/test.tsv", "qrels/train.tsv"):
        path = folder / name
        path.write_text(path.read_text().replace('"d', '"café').replace("\td", "\tcafé"))
    return folder


def write_run(path: Path, rows: list[tuple[str, str, float]]) -> Path:
    path.write_text("".join(f"{qid} Q0 {docid} {rank} {score} x\n"
                            for rank, (qid, docid, score) in enumerate(rows, start=1)))
    return path


@pytest.mark.parametrize("case", ["NFD ids", "another collection"])
def test_evaluate_refuses_a_run_none_of_whose_documents_is_in_the_corpus(case, accented, tmp_path, capsys):
    docid = (unicodedata.normalize("NFD", "café{}") if case == "NFD ids" else "doc{}").format
    run = write_run(tmp_path / "run.trec", [(f"q{i}", docid(i), 1.0) for i in range(36, 48)])
    assert main(["evaluate", "--run", str(run), "--data", str(accented), "--save-run", str(tmp_path / "out.trec")]) \
        == 2
    line = error_line(capsys)
    assert line.startswith(f"retromae: error: {run}: none of the run's documents is in the corpus of beir, so every "
                           "metric would be 0: 12 document ids of the run are missing")
    assert ("equal a corpus id once Unicode-normalised (NFC)" in line) == (case == "NFD ids")
    assert not (tmp_path / "out.trec").exists()


def test_evaluate_says_which_documents_of_a_run_are_not_in_the_corpus(accented, tmp_path, capsys, caplog):
    """Half of each query's documents written NFD: said once, with the look-alike, and scored as not relevant."""
    nfd = unicodedata.normalize("NFD", "café1")
    run = write_run(tmp_path / "run.trec", [row for i in range(36, 48)
                                            for row in ((f"q{i}", f"café{i}", 2.0), (f"q{i}", nfd, 1.0))])
    assert main(["evaluate", "--run", str(run), "--data", str(accented)]) == 0
    warned = [record.getMessage() for record in caplog.records if "missing from" in record.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"{run}: 1 document ids of the run are missing from the corpus "
                                                     "of beir (e.g. 'cafe\u03011'), and 1 of them equal")
    assert "ndcg@10     1.0000" in capsys.readouterr().out


def test_a_refused_evaluation_writes_no_run(monkeypatch, accented, tmp_path):
    def refuse(*args, **kwargs):
        raise NonFiniteError("a metric that is not finite")

    monkeypatch.setattr(retromae.evaluation.run, "evaluate_run", refuse)
    run = write_run(tmp_path / "run.trec", [(f"q{i}", f"café{i}", 1.0) for i in range(36, 48)])
    assert main(["evaluate", "--run", str(run), "--data", str(accented), "--save-run", str(tmp_path / "out.trec")]) \
        == 2
    assert not (tmp_path / "out.trec").exists()


JUDGMENTS = {  # a library caller's (qrels, run) refused by evaluate_run, and the words of its refusal
    "a grade beyond a float": ({"q": {"d": 10**400}}, {"q": {"d": 1.0}}, "a relevance grade is a whole number"),
    "a grade beyond a C int": ({"q": {"d": 2**31}}, {"q": {"d": 1.0}}, "a relevance grade is a whole number"),
    "a fractional grade": ({"q": {"d": 1.5}}, {"q": {"d": 1.0}}, "a relevance grade is a whole number"),
    "a text grade": ({"q": {"d": "1"}}, {"q": {"d": 1.0}}, "a relevance grade is a whole number"),
    "a boolean grade": ({"q": {"d": True}}, {"q": {"d": 1.0}}, "a relevance grade is a whole number"),
    "a NaN score": ({"q": {"d": 1}}, {"q": {"d": float("nan")}}, "a score is a finite real number"),
    "an infinite score": ({"q": {"d": 1}}, {"q": {"d": -float("inf")}}, "a score is a finite real number"),
    "a text score": ({"q": {"d": 1}}, {"q": {"d": "0.5"}}, "a score is a finite real number"),
}


@pytest.mark.parametrize("case", JUDGMENTS)
def test_evaluate_run_holds_a_library_callers_judgments_to_the_file_rules(case):
    qrels, run, words = JUDGMENTS[case]
    with pytest.raises(ValueError, match=f"^my set: .*: {words}"):
        evaluate_run(qrels, run, source="my set")


def test_evaluate_run_takes_numpy_numbers():
    assert evaluate_run({"q": {"d": np.int64(1)}}, {"q": {"d": np.float32(0.5), "e": 0.25}}, [1])["ndcg@1"] == 1.0


@pytest.fixture(scope="module")
def reranker(tiny_model_dir, tmp_path_factory):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from retromae.reranking.run import CrossEncoder

    folder = tmp_path_factory.mktemp("reranker")
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return CrossEncoder(str(folder), "cpu", 32)


@pytest.mark.parametrize(("arguments", "words"), [
    ((["a b"], "d e f"), "passages: expected a list of texts, got one text"),
    (("a b", ["d e f"]), "queries: expected a list of texts, got one text"),
    ((["a", "b"], ["c"]), "passages: expected one passage per query, got 1 passages for 2 queries"),
    ((["a"], ["c"], 0), "batch_size: "),
    ((["a"], [3]), "passages: expected a list of texts, got 3 at position 0"),
])
def test_the_cross_encoder_checks_its_arguments_as_the_score_command(reranker, arguments, words):
    with pytest.raises(ConfigError, match=f"^{words}"):
        reranker.score(*arguments, show_progress=False)


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    return command_inputs(tmp_path_factory.mktemp("inputs"), tiny_model_dir)


@pytest.mark.parametrize("where", ["a file", "under a file", "a dangling link"])
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_command_refuses_a_cache_setting_no_folder_can_be_before_it_claims_its_output(case, where, inputs,
                                                                                           tmp_path, monkeypatch,
                                                                                           capsys):
    """$RETROMAE_CACHE naming a file was found at the cache's first use: after a pre-training run had claimed its
    output and loaded its model (and never by a command whose cache is beside the model)."""
    blocker = tmp_path / "file"
    blocker.write_text("a file of the user's\n")
    setting = {"a file": blocker, "under a file": blocker / "cache", "a dangling link": tmp_path / "link"}[where]
    if where == "a dangling link":
        setting.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("RETROMAE_CACHE", str(setting))
    out = tmp_path / "out"
    args = [str({**inputs, "OUT": out, "OUT.trec": out, "OUT.json": out, "OUT.jsonl": out}.get(word, word))
            for word in CASES[case].split()]
    assert main(args) == 1
    assert error_line(capsys).startswith(f"retromae: error: $RETROMAE_CACHE: {setting}: ")
    assert not os.path.lexists(out) and blocker.read_text() == "a file of the user's\n"


def test_an_entry_point_given_a_config_and_options_refuses_both():
    """A probe of round eight's fixes: `retromae.encode(config, output=...)` ran the config and dropped the option."""
    import retromae
    from retromae import EncodeConfig

    with pytest.raises(ConfigError, match=r"^encode: given a config and options \(output\)"):
        retromae.encode(EncodeConfig(model="m", corpus="c.jsonl", output="a"), output="b")


def test_the_top_level_takes_no_abbreviation(capsys):
    """`retromae --thr 2 bm25 ...` took `2` for the command and refused the command's own options; since round nine
    the abbreviation is named with the option it stands for."""
    assert main(["--thr", "2", "bm25", "--data", "d", "--output", "o"]) == 2
    assert error_line(capsys) == "retromae: error: --thr: give the option's full name --threads"


@pytest.mark.parametrize("argv", [["--version"], ["bm25", "--help"], ["--help"]])
def test_help_and_version_on_a_full_device_say_so(argv):
    """argparse ignores a failed write of its help or version and exits 0: the text lost was not said."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "retromae", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, "retromae: error: standard output: No space left on device; what "
                                                 "the command printed there is lost\n")


def test_a_progress_line_naming_a_file_is_printable(tmp_path, tiny_model_dir, capsys):
    """A probe of round eight's fixes: a corpus file name with ESC and a newline reached the terminal raw in the
    encoding bar (and in stage lines)."""
    corpus = tmp_path / "g\x1b[31mR\nx.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a cat sat"}\n')
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output",
                 str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "g\\x1b[31mR\\nx.jsonl" in err and "\x1b[31m" not in err


def test_the_apis_classes_name_a_malformed_hub_endpoint():
    """A probe of round eight's fixes: `retromae.Encoder` with `HF_ENDPOINT=http://[::1` (huggingface_hub splits it
    as it loads) was a bare ValueError naming no variable; the entry points already checked it."""
    import subprocess
    import sys

    code = "import retromae\ntry:\n    retromae.Encoder\nexcept Exception as error:\n    print(repr(error))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HF_ENDPOINT": "http://[::1"})
    assert done.stdout.startswith("ConfigError(\"HF_ENDPOINT='http://[::1': not a URL with a host and a port")
