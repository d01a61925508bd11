"""Every hint the CLI prints names a command that works: each test provokes a hint, reads the command or option it
names, runs that on tiny data and checks it succeeds (issue 38, item 5: `pretrain --model` on a fine-tuning folder
used to suggest `--init-from`, which then failed with "no pre-training head to continue from")."""

from __future__ import annotations

import json
import logging
import re
import shlex

import pytest
from conftest import kill_after_checkpoint, make_sentences, tiny_beir

from retromae.cli import main

TINY_PRETRAIN = ["--max-steps", "2", "--batch-size", "2", "--max-length", "32", "--save-every", "0"]
TINY_FINETUNE = ["--max-steps", "1", "--batch-size", "4", "--save-every", "0", "--passage-max-length", "32",
                 "--query-max-length", "16"]


def cli(*args) -> int:
    return main([str(arg) for arg in args])


def error_of(capsys) -> str:
    """The one-line error the last command printed (without the "retromae: error: " prefix)."""
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("retromae: error: ")
    return err.removeprefix("retromae: error: ")


def hinted_command(message: str) -> list[str]:
    """The first `retromae ...` command with options quoted in `message`, as arguments (without `retromae`)."""
    command = re.search(r"`retromae ([^`]+ --[^`]+)`", message)
    assert command, f"no command in: {message}"
    return shlex.split(command.group(1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """A finished tiny pre-training run and a finished tiny fine-tuning run (as `runs/retromae`, `runs/ft`)."""
    root = tmp_path_factory.mktemp("runs")
    (root / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in make_sentences(40, seed=3)))
    tiny_beir(root / "beir")
    assert cli("pretrain", "--model", tiny_model_dir, "--corpus", root / "corpus.jsonl", "--output", root / "pre",
               "--cache-dir", root / "cache", *TINY_PRETRAIN) == 0
    assert cli("finetune", "--model", tiny_model_dir, "--data", root / "beir", "--output", root / "ft",
               *TINY_FINETUNE) == 0
    return root


def test_the_head_hints_name_what_continues(runs, tmp_path, caplog, capsys):
    corpus = ["--corpus", runs / "corpus.jsonl", "--cache-dir", runs / "cache", *TINY_PRETRAIN]
    # a fine-tuning folder has no head: no --init-from hint (before: one, which then failed) ...
    with caplog.at_level(logging.WARNING, logger="retromae"):
        assert cli("pretrain", "--model", runs / "ft", *corpus, "--output", tmp_path / "a") == 0
    notes = [r.getMessage() for r in caplog.records if "masked-LM head" in r.getMessage()]
    assert notes and not any("--init-from" in note for note in notes)
    # ... and --init-from on it says that --model starts a fresh head, which works (above)
    assert cli("pretrain", "--init-from", runs / "ft", *corpus, "--output", tmp_path / "b") == 2
    assert f"--model {runs / 'ft'} starts a fresh head" in error_of(capsys)
    # a pre-training run's hint names --init-from with the folder, and that continues with its head
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="retromae"):
        assert cli("pretrain", "--model", runs / "pre", *corpus, "--output", tmp_path / "c") == 0
    hint = next(r.getMessage() for r in caplog.records if "masked-LM head" in r.getMessage())
    folder = re.search(r"--init-from (\S+) continues with its head", hint).group(1)
    assert cli("pretrain", "--init-from", folder, *corpus, "--output", tmp_path / "d") == 0


def test_the_output_folder_hints_name_what_works(runs, tmp_path, tiny_model_dir, capsys):
    command = ["pretrain", "--model", tiny_model_dir, "--corpus", runs / "corpus.jsonl", "--output", tmp_path / "o",
               "--cache-dir", runs / "cache", *TINY_PRETRAIN]
    assert cli(*command) == 0
    assert cli(*command) == 2  # the same run again: --resume continues it
    assert "--resume continues it" in error_of(capsys)
    assert cli(*command, "--resume") == 0
    assert cli(*command, "--learning-rate", "0.01") == 2  # another run: --resume would be refused, so not named
    message = error_of(capsys)
    assert "(learning_rate differ)" in message and "--resume" not in message and "--overwrite replaces it" in message
    assert cli(*command, "--learning-rate", "0.01", "--overwrite") == 0
    run = tmp_path / "run.trec"
    run.write_text("q40 Q0 d40 1 1.0 x\n")
    evaluate = ["evaluate", "--run", run, "--data", runs / "beir", "--output", tmp_path / "r.json"]
    assert cli(*evaluate) == 0 and cli(*evaluate) == 2
    assert "add --overwrite to replace it" in error_of(capsys)
    assert cli(*evaluate, "--overwrite") == 0


def test_an_unfinished_run_is_finished_with_resume(runs, tmp_path, tiny_model_dir, monkeypatch, capsys):
    command = ["pretrain", "--model", tiny_model_dir, "--corpus", runs / "corpus.jsonl", "--output", tmp_path / "u",
               "--cache-dir", runs / "cache", *TINY_PRETRAIN[:-1], "1"]
    kill_after_checkpoint(monkeypatch, 1, lambda: cli(*command))
    evaluate = ["evaluate", "--model", tmp_path / "u", "--data", runs / "beir"]
    assert cli(*evaluate) == 2
    finish = hinted_command(error_of(capsys))
    assert finish == ["pretrain", "--output", str(tmp_path / "u"), "--resume"]
    assert cli("pretrain", "--init-from", tmp_path / "u", "--corpus", runs / "corpus.jsonl",
               "--output", tmp_path / "v") == 2  # the same hint
    assert hinted_command(error_of(capsys)) == finish
    assert cli(*finish) == 0  # the options come from the run's config.json
    assert cli(*evaluate) == 0


def test_the_training_data_hints_name_commands_that_work(runs, tmp_path, tiny_model_dir, capsys):
    train = tmp_path / "train.jsonl"
    queries = make_sentences(16, seed=5)
    train.write_text("".join(json.dumps({"query": " ".join(q.split()[:4]), "pos": [q]}) + "\n" for q in queries))
    finetune = ["finetune", "--model", tiny_model_dir, "--data", train, *TINY_FINETUNE]
    assert cli(*finetune, "--negatives", "file", "--output", tmp_path / "f1") == 2
    assert "use --negatives none, bm25 or model" in error_of(capsys)
    assert cli(*finetune, "--negatives", "bm25", "--group-size", "2", "--output", tmp_path / "f2") == 0
    # --distill without teacher scores names the scoring command; its RERANKER comes from train-reranker, which
    # on a file without negatives says to mine them
    reranker = ["train-reranker", "--model", tiny_model_dir, "--data", train, "--group-size", "2", "--max-steps", "1",
                "--batch-size", "2", "--max-length", "32", "--save-every", "0", "--output", tmp_path / "rr"]
    assert cli(*reranker, "--negatives", "file") == 2
    assert "use --negatives bm25 or model" in error_of(capsys)
    assert cli(*reranker, "--negatives", "bm25") == 0
    mined = tmp_path / "mined.jsonl"
    assert cli("mine", "--model", tiny_model_dir, "--data", runs / "beir", "--split", "train", "--output", mined,
               "--negatives-per-query", "1") == 0
    assert cli("finetune", "--model", tiny_model_dir, "--data", mined, *TINY_FINETUNE, "--distill",
               "--group-size", "2", "--output", tmp_path / "f3") == 2
    score = hinted_command(error_of(capsys))
    assert score[:2] == ["score", "--model"]
    score = [str(tmp_path / "rr" / "reranker") if arg == "RERANKER" else arg for arg in score]
    score = [str(tmp_path / "scored.jsonl") if arg == "SCORED.jsonl" else arg for arg in score]
    assert cli(*score) == 0
    assert cli("finetune", "--model", tiny_model_dir, "--data", tmp_path / "scored.jsonl", *TINY_FINETUNE,
               "--distill", "--group-size", "2", "--output", tmp_path / "f4") == 0
    # from a folder, the hint mines a training file first
    assert cli("finetune", "--model", tiny_model_dir, "--data", runs / "beir", *TINY_FINETUNE, "--distill",
               "--output", tmp_path / "f5") == 2
    mine = hinted_command(error_of(capsys))
    assert mine[0] == "mine"
    assert cli(*[str(tmp_path / "m.jsonl") if arg == "MINED.jsonl" else arg for arg in mine]) == 0


def test_an_objective_option_hint_names_what_works(runs, tmp_path, tiny_model_dir, capsys):
    command = ["pretrain", "--model", tiny_model_dir, "--corpus", runs / "corpus.jsonl", "--cache-dir", runs / "cache",
               "--decoder-layers", "2", *TINY_PRETRAIN]
    assert cli(*command, "--output", tmp_path / "a") == 2
    assert "pass --decoding basic for deeper decoders" in error_of(capsys)
    assert cli(*command, "--decoding", "basic", "--output", tmp_path / "b") == 0
