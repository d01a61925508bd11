"""Round nine, audit section B: a standard output whose encoding cannot hold a character the tool prints.

Under PYTHONIOENCODING=ascii or latin-1, an ISO-8859 locale or a cp1252 console, the first line holding such a
character (the summary's `·`, init-model's `→`, a cut text's `…`, a query, an id, a path) ended the command in a
traceback: pretrain after its whole training, before exporting its encoder. The rule has one home,
`runtime.console.fitted` (standard output within every command, `standard_output`; a caller's own stream, `say`):
what the encoding lacks is written as its escape. `tests/test_streams.py` runs every command under an ASCII standard
output on inputs under a non-ASCII folder. A training's summary line is said once its model is saved
(`Trainer.say_summary`). And a UTF-8 value read in a locale whose encoding is not UTF-8 is said to be so
(`runtime.options.text_problem`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import tiny_beir
from test_output_paths import CASES

from retromae.cli import main
from retromae.runtime import options
from retromae.runtime.console import STAND_INS, fitted, say, speaking, standard_output

NARROW = ("ascii", "latin-1", "cp1252")
SHOWN = "loss 1.2 · 3 s → café … – − ✓ \ud800"
NOT_ASCII = "données·✓"
IDS = ("café-1", "naïve-2", "ü✓-3")
LOCALE = ("is UTF-8, but the locale (C) decodes the command line and file names as ascii: run retromae under a UTF-8 "
          "locale (e.g. LC_ALL=C.UTF-8) or with PYTHONUTF8=1")


def as_written(text: str, encoding: str) -> str:
    """`text` as a standard output in `encoding` shows it."""
    return fitted(text, io.TextIOWrapper(io.BytesIO(), encoding=encoding))


@contextlib.contextmanager
def stdout_in(encoding: str) -> Iterator[io.BytesIO]:
    """Standard output as PYTHONIOENCODING=`encoding` sets it (strict); yields the bytes written."""
    written = io.BytesIO()
    stream = io.TextIOWrapper(written, encoding=encoding, errors="strict", write_through=True)
    with contextlib.redirect_stdout(stream):
        yield written
    stream.detach()


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """Under a non-ASCII folder, keyed as `test_output_paths.CASES` names them: the model (M), a BEIR folder (B), its
    corpus (C), a training file (T); and an index (X) of a corpus (D) with non-ASCII ids and long texts."""
    root = tmp_path_factory.mktemp("stdout") / NOT_ASCII
    tiny_beir(root / "beir")
    (root / "train.jsonl").write_text(json.dumps({"query": "a cat", "pos": ["the cat sat"], "neg": ["a dog"]}) + "\n")
    corpus = root / "corpus·é.jsonl"
    corpus.write_text("".join(json.dumps({"_id": doc_id, "text": f"café {doc_id} – a cat sat on the mat " * 9}) + "\n"
                              for doc_id in IDS), "utf-8")
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output",
                 str(root / "vectors"), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(root / "vectors"), "--output", str(root / "index")]) == 0
    return {"M": tiny_model_dir, "B": root / "beir", "C": root / "beir" / "corpus.jsonl", "T": root / "train.jsonl",
            "D": corpus, "X": root / "index"}


@pytest.mark.parametrize("encoding", [*NARROW, "utf-8"])
def test_fitted_keeps_what_the_encoding_holds_and_escapes_the_rest(encoding):
    def holds(character: str) -> bool:
        with contextlib.suppress(UnicodeEncodeError):
            return bool(character.encode(encoding))
        return False

    assert as_written(SHOWN, encoding) == "".join(
        c if holds(c) else STAND_INS.get(c, ascii(c)[1:-1]) for c in SHOWN)  # round ten: our symbols stood in
    assert fitted(SHOWN, io.StringIO()) == SHOWN  # a stream that names no encoding takes any text


@pytest.mark.parametrize("encoding", NARROW)
def test_a_command_prints_what_its_standard_output_cannot_hold_as_escapes(encoding):
    with stdout_in(encoding) as written, standard_output():
        print(SHOWN)
    assert written.getvalue().decode(encoding) == as_written(SHOWN, encoding) + "\n"


def test_say_fits_a_callers_stream_and_leaves_it_as_it_is():
    """The Python API prints only through `say`, and only when asked: into the caller's stream as it is set."""
    with stdout_in("ascii") as written:
        say("a · b")
        with speaking(False):
            say("not asked")
        assert sys.stdout.errors == "strict"
    assert written.getvalue() == b"a - b\n"


@pytest.mark.parametrize("encoding", NARROW)
def test_search_prints_every_hit_of_a_non_ascii_query_whatever_the_encoding(encoding, inputs, capsys):
    with stdout_in(encoding) as written:
        assert main(["search", "--index", str(inputs["X"]), "--corpus", str(inputs["D"]), "--query", "café ✓",
                     "--query", "cat", "--top-k", "3"]) == 0
    lines = written.getvalue().decode(encoding).splitlines()
    assert "Traceback" not in capsys.readouterr().err
    hits = [line.split()[2] for line in lines if line[:4].strip().isdigit()]
    assert sorted(hits) == sorted(as_written(doc_id, encoding) for doc_id in IDS * 2)
    assert lines[0].startswith(as_written("query: café ✓  (model; 3 hits)", encoding))
    assert all(line.endswith(as_written("…", encoding)) for line in lines if line[:4].strip().isdigit())  # cut


class FullAtSummary(io.TextIOBase):
    """A standard output that fills up at a training's summary line."""

    encoding = "ascii"

    def write(self, text: str) -> int:
        if "): loss " in text:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(text)


# Each training command: what makes its run small, and the folder it saves its model in.
TRAININGS = {"pretrain": ("--batch-size 4 --vocabulary-loss unfused --mixed-precision no", "sentence-transformer"),
             "finetune": ("--batch-size 4 --group-size 2 --negatives bm25 --passage-max-length 32",
                          "sentence-transformer"),
             "train-reranker": ("--batch-size 1 --group-size 2 --max-length 32", "reranker")}


@pytest.mark.parametrize("command", TRAININGS)
def test_a_training_whose_summary_fails_to_print_has_saved_its_model(command, inputs, tmp_path, capsys):
    small, saved = TRAININGS[command]
    words = [*CASES[(command, "output")].split(), *small.split(), "--save-every", "0"]
    output = tmp_path / NOT_ASCII
    with contextlib.redirect_stdout(FullAtSummary()):
        assert main([str(output) if word == "OUT" else str(inputs.get(word, word)) for word in words]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if line.startswith("retromae: error:")] == [
        "retromae: error: standard output: No space left on device; what the command printed there is lost"]
    assert (output / saved / "config.json").is_file()


@pytest.mark.parametrize("text, said", [("caf\udcc3\udca9", LOCALE),
                                        ("caf\udcff", "holds the byte 0xFF, which is not UTF-8, at character 4")])
def test_a_value_the_locale_misread_is_said_to_be_utf8(text, said, monkeypatch):
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "ascii")
    monkeypatch.setattr(options.locale, "setlocale", lambda category: "C")
    assert options.text_problem(text).startswith(said)
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "utf-8")
    assert options.text_problem(text).startswith("holds the byte 0xC3" if "\udcc3" in text else said)


@pytest.mark.parametrize("option", ["--query", "--index"])
def test_under_the_c_locale_a_utf8_argument_is_refused_naming_the_locale(option, tmp_path):
    argv = ["search", "--index", str(tmp_path), "--query", "cat"]
    argv[argv.index(option) + 1] = str(tmp_path / "café")
    done = subprocess.run([sys.executable, "-m", "retromae", *argv], capture_output=True, timeout=60,
                          env={**{name: value for name, value in os.environ.items() if name != "PYTHONIOENCODING"},
                               "LC_ALL": "C", "PYTHONUTF8": "0"})
    assert (done.returncode, done.stdout, done.stderr.decode()) == (2, b"", f"retromae: error: {option}: {LOCALE}\n")
