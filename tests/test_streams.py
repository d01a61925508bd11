"""The stream rule (docs/output.md): every command's results, summaries, verdicts and tables go to standard output;
standard error carries only progress bars, stage and step lines, notes and warnings. Each command runs on tiny inputs;
its result lines must be on stdout, and every stderr line must be one of those kinds. The inputs and outputs lie under
a folder whose name ASCII cannot hold, and standard output holds only ASCII (as under PYTHONIOENCODING=ascii): every
command ends, its lines complete, what ASCII lacks escaped (`runtime.console.fitted`)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
from collections.abc import Iterator

import pytest
from conftest import tiny_beir
from test_adapt import topical_corpus

from retromae.cli import main

TINY = ["--batch-size", "4", "--max-length", "32"]
NOT_ASCII = "données·\n✓"  # a newline too: a path stays in its line (round ten)
STDERR_KINDS = (
    re.compile(r".*\[\d+:\d\d.*\]$"),  # a progress bar (tqdm: "name: 50%|███  | 1/2 [00:01<00:01, 1.28s/step]")
    re.compile(r"^\d+/\d+ \S.*"),  # a numbered stage: "2/4 scoring the base ..."
    re.compile(r"^.+ \.\.\.( done in .+| \S.*)?$"),  # a step: "reading corpus.jsonl ... done in 0.4 s"
    re.compile(r"^retromae: (note|warning): .+"),  # a note or a warning
)


def cli(*args) -> int:
    return main([str(arg) for arg in args])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir):
    """Tiny inputs for every command, each made by the command that makes it in a user's pipeline."""
    root = tmp_path_factory.mktemp("streams") / NOT_ASCII
    root.mkdir()
    tiny_beir(root / "beir")
    topical_corpus(root / "topical.jsonl")
    base = root / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    assert cli("encode", "--model", base, "--corpus", root / "beir" / "corpus.jsonl", "--output", root / "docs") == 0
    assert cli("encode", "--model", base, "--queries", root / "beir" / "queries.jsonl", "--output",
               root / "queries") == 0
    assert cli("index", "--embeddings", root / "docs", "--output", root / "index") == 0
    assert cli("mine", "--model", base, "--data", root / "beir", "--output", root / "mined.jsonl",
               "--negatives-per-query", "3") == 0
    assert cli("train-reranker", "--model", base, "--data", root / "mined.jsonl", "--output", root / "reranker",
               "--max-steps", "1", "--batch-size", "2", "--group-size", "3", "--max-length", "48") == 0
    assert cli("evaluate", "--model", base, "--data", root / "beir", "--output",
               root / "variant" / "eval" / "beir.json") == 0
    return root


def commands(root, tmp):
    """Each command: its arguments and what its stdout must hold (a result, a summary, a table, a verdict)."""
    beir, base = root / "beir", root / "base"
    return {
        "init-model": (["--architecture", "bert", "--corpus", root / "topical.jsonl", "--vocab-size", "300",
                        "--hidden-size", "64", "--layers", "1", "--output", tmp / "init"], ["random bert (1 layers"]),
        "pretrain": (["--model", base, "--corpus", root / "topical.jsonl", "--output", tmp / "pre", "--max-steps", "2",
                      *TINY, "--save-every", "0", "--cache-dir", tmp / "cache"], ["(2 steps): loss", "wrote"]),
        "finetune": (["--model", base, "--data", beir, "--output", tmp / "ft", "--max-steps", "2", "--batch-size", "4",
                      "--save-every", "0", "--passage-max-length", "32"], ["(2 steps): loss", "wrote"]),
        "adapt": (["--model", base, "--corpus", root / "topical.jsonl", "--output", tmp / "adapt", "--max-steps", "2",
                   "--checkpoints", "1", *TINY, "--validation-queries", "20", "--validation-documents", "80",
                   "--cache-dir", tmp / "cache"], ["validation ndcg@10, estimated on", "wrote"]),
        "train-reranker": (["--model", base, "--data", root / "mined.jsonl", "--output", tmp / "rr", "--max-steps", "1",
                            "--batch-size", "2", "--group-size", "3", "--max-length", "48"], ["wrote"]),
        "score": (["--model", root / "reranker" / "reranker", "--data", root / "mined.jsonl", "--output",
                   tmp / "scored.jsonl", "--max-length", "48"], ["scored.jsonl"]),
        "mine": (["--data", beir, "--output", tmp / "mined.jsonl", "--negatives", "bm25"], ["mined.jsonl"]),
        "encode": (["--model", base, "--corpus", beir / "corpus.jsonl", "--output", tmp / "vectors"], ["encoded 48"]),
        "index": (["--embeddings", root / "docs", "--output", tmp / "index"], ["index"]),
        "search": (["--index", root / "index", "--queries", root / "queries", "--output", tmp / "run.trec"],
                   ["run.trec"]),
        "bm25": (["--data", beir, "--output", tmp / "bm25.trec"], ["bm25.trec"]),
        "evaluate": (["--model", base, "--data", beir, "--bm25"], ["| data set |", "| beir |"]),
        "report": (["--variants", root / "variant", "--output", tmp / "report"], ["| variant |", "report.md"]),
        "quickstart": (["--data", beir, "--output", tmp / "qs", "--preset", "cpu", "--vocab-size", "300",
                        "--hidden-size", "64", "--layers", "1", "--max-length", "32", "--pretrain-steps", "2",
                        "--pretrain-batch-size", "4", "--finetune-epochs", "1", "--finetune-batch-size", "8"],
                       ["| model | NDCG@10"]),
    }


CASES = ["adapt",
         pytest.param("quickstart", marks=pytest.mark.slow),  # eight stages: 40 s on 2 cores
         *("init-model", "pretrain", "finetune", "train-reranker", "score", "mine", "encode", "index", "search",
           "bm25", "evaluate", "report")]


def stray_lines(stderr: str) -> list[str]:
    """The stderr lines that are neither a bar, a stage, a step, a note nor a warning (tqdm's \\r frames split)."""
    lines = [line.strip() for chunk in stderr.split("\n") for line in chunk.split("\r")]
    return [line for line in lines if line and not any(kind.match(line) for kind in STDERR_KINDS)]


@contextlib.contextmanager
def ascii_stdout() -> Iterator[None]:
    """Standard output (as captured) as PYTHONIOENCODING=ascii sets it: a character ASCII lacks fails."""
    stream = io.TextIOWrapper(sys.stdout.buffer, encoding="ascii", errors="strict", write_through=True)
    saved, sys.stdout = sys.stdout, stream
    try:
        yield
    finally:
        sys.stdout = saved
        stream.detach()


@pytest.mark.parametrize("command", CASES)
def test_results_go_to_stdout_and_only_bars_and_notes_to_stderr(inputs, tmp_path, capfd, command):
    (tmp_path / NOT_ASCII).mkdir()
    args, on_stdout = commands(inputs, tmp_path / NOT_ASCII)[command]
    capfd.readouterr()
    with ascii_stdout():
        assert cli(command, *args) == 0
    out, err = capfd.readouterr()
    assert out.isascii() and "Traceback" not in err
    if command != "evaluate":  # its lines name the models, not their paths
        assert ascii(NOT_ASCII)[1:-1] in out
    for marker in on_stdout:
        assert marker in out, f"{command}: {marker!r} not on stdout"
        assert marker not in err.replace(str(tmp_path), ""), f"{command}: {marker!r} on stderr"
    assert stray_lines(err) == [], f"{command} wrote to stderr what is not a bar, stage, step, note or warning"
