"""The files retromae writes for itself in an output place and reads back (the audit of round six, sections 1-3).

An output's lock (`.retromae.lock` in a folder, `.NAME.lock` beside a file), the shared lock a reader takes in an
index or embeddings folder, a run marker (`retromae-run.json`) and a training checkpoint's files are only ever regular
files retromae made. Anything else there was put there: a symbolic link made a lock truncate the file it pointed at
to our pid (or create one elsewhere), a FIFO hung the command. The rule has one home, `runtime.lines.check_own_file`
(and `open_own_file` for the locks: never through a link, never waiting); each case here is refused in one line
naming the path and what is there, exit code 2, the thing and a link's target left as they were, nothing created.
Generated over what is there (a link to a file, a dangling link, a FIFO, a folder) and over the commands that reach
each path: every output claim of every command, every reader of an index or embeddings folder, `pretrain --resume`.
Then the step a checkpoint records (section 2): its folder's, its schedule's, and at most --max-steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import command_inputs
from test_output_paths import CASES

from retromae.cli import main
from retromae.runtime.errors import DataError
from retromae.runtime.run_folder import LOCK_FILE, MARKER
from retromae.training.checkpoint_state import read_model_tensors

KINDS = {"link to a file": "a symbolic link", "dangling link": "a symbolic link", "fifo": "a named pipe (FIFO)",
         "folder": "a folder"}
PRECIOUS = "a file of the user's, elsewhere\n"
# Each output claim: every output option of every command (`test_output_paths.CASES`, checked there to be all of
# them) and evaluate's report folder, which it claims as a folder, not as a file.
CLAIMS = {"-".join(case): line for case, line in CASES.items()}
CLAIMS["evaluate-folder"] = "evaluate --model M --data B --bm25 --output OUT"
# The claims of a folder, each leaving a run marker in it.
MARKED = [name for name, line in CLAIMS.items() if " OUT " in f"{line} "]
# Every reader of an index or embeddings folder (`retrieval.index.reading`), with the letter of the folder it reads.
READERS = {"search --index": ("search --index I --queries R --output OUT.trec", "I"),
           "search --queries": ("search --index I --queries R --output OUT.trec", "R"),
           "index --embeddings": ("index --embeddings E --output OUT", "E"),
           "index --recall-queries": ("index --embeddings E --recall-queries R --factory binary --output OUT", "R")}
CHECKPOINT_FILES = ("state.json", "rng-0.json", "model.safetensors", "optimizer.safetensors", MARKER)
PRETRAIN = "pretrain --model M --corpus C --max-steps 2 --batch-size 4 --max-length 32 --save-every 1 " \
           "--keep-checkpoints 2 --log-every 1 --cache-dir CACHE --output RUN"


@pytest.fixture(scope="module")
def inputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A model folder, a BEIR folder, its encoding and index, its queries' encoding (R), a training file, and a
    2-step pre-training run with a checkpoint at each step (RUN)."""
    base = tmp_path_factory.mktemp("own")
    found = command_inputs(base, tiny_model_dir)
    found["CACHE"], found["RUN"], found["R"] = base / "cache", base / "run", base / "query-emb"
    assert main(command(PRETRAIN, found)) == 0
    assert main(command("encode --model M --queries Q --output R --no-progress", found)) == 0
    return found


def command(line: str, places: dict[str, Path]) -> list[str]:
    return [str(places.get(word, word)) for word in line.split()]


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    """A folder outside every output place, holding a file of the user's that a link may point at."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "precious.txt").write_text(PRECIOUS)
    return folder


def plant(kind: str, path: Path, elsewhere: Path) -> None:
    """Put a `kind` of thing that is no regular file at `path` (its links point into `elsewhere`)."""
    if os.path.lexists(path):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(elsewhere / ("precious.txt" if kind == "link to a file" else "created.lock"))


def left_alone(kind: str, path: Path, elsewhere: Path) -> bool:
    """Whether what `plant` put at `path` is there as it was, and nothing in `elsewhere` changed or was created."""
    mode = os.lstat(path).st_mode
    kept = {"fifo": stat.S_ISFIFO(mode), "folder": stat.S_ISDIR(mode) and not any(path.iterdir()),
            "link to a file": stat.S_ISLNK(mode), "dangling link": stat.S_ISLNK(mode)}[kind]
    return kept and sorted(os.listdir(elsewhere)) == ["precious.txt"] and \
        (elsewhere / "precious.txt").read_text() == PRECIOUS


@contextlib.contextmanager
def deadline(planted: Path, seconds: float = 30) -> Iterator[None]:
    """Fail, not hang, a command that blocks on the FIFO `planted`: past `seconds` a helper process opens its other
    end again and again, so that a blocked open returns (and reads nothing), and the test fails on the time. A
    SIGALRM (tests/test_vector_files.py) would not reach an open blocked inside safetensors, which retries it."""
    helper = None
    if stat.S_ISFIFO(os.lstat(planted).st_mode):
        helper = subprocess.Popen(["sh", "-c", 'sleep "$1"; while :; do : <>"$0"; sleep 0.2; done', str(planted),
                                   str(seconds)], start_new_session=True)
    started = time.monotonic()
    try:
        yield
    finally:
        if helper is not None:
            os.killpg(helper.pid, signal.SIGKILL)
            helper.wait()
    assert time.monotonic() - started < seconds, f"the command ran past {seconds} s (blocked on {planted}?)"


def described(kind: str, path: Path) -> str:
    """How a refusal names what `plant` put at `path`: a link with its target."""
    return f"{KINDS[kind]} (to {os.readlink(path)})" if path.is_symlink() else KINDS[kind]


def refused(args: list[str], path: Path, kind: str, capsys) -> None:
    """`retromae ARGS` exits 2 with one line naming `path` and what is there, no traceback."""
    with deadline(path):
        code = main(args)
    error = capsys.readouterr().err
    assert code == 2, error
    assert error.startswith(f"retromae: error: {path}: is {described(kind, path)}, not a regular file; ") and \
        error.count("\n") == 1, error


def output_place(line: str, tmp_path: Path) -> tuple[str, Path, Path]:
    """(the word naming the output in a claim's command line, the output, the lock it takes) in tmp_path/place; a
    folder output made, empty."""
    word = next(word for word in line.split() if word.startswith("OUT"))
    output = tmp_path / "place" / f"out{word[3:]}"
    output.parent.mkdir()
    if word != "OUT":
        return word, output, output.with_name(f".{output.name}.lock")
    output.mkdir()
    return word, output, output / LOCK_FILE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("claim", CLAIMS)
def test_every_output_claim_refuses_a_lock_that_is_not_a_regular_file(claim, kind, inputs, tmp_path, elsewhere,
                                                                      capsys):
    word, output, lock = output_place(CLAIMS[claim], tmp_path)
    plant(kind, lock, elsewhere)
    refused(command(CLAIMS[claim], {**inputs, word: output}), lock, kind, capsys)
    assert left_alone(kind, lock, elsewhere)
    assert sorted(os.listdir(lock.parent)) == [lock.name]  # no output, no temporary beside it


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("claim", MARKED)
def test_every_folder_claim_refuses_a_run_marker_that_is_not_a_regular_file(claim, kind, inputs, tmp_path,
                                                                           elsewhere, capsys):
    _, output, _ = output_place(CLAIMS[claim], tmp_path)
    plant(kind, output / MARKER, elsewhere)
    refused(command(CLAIMS[claim], {**inputs, "OUT": output}), output / MARKER, kind, capsys)
    assert left_alone(kind, output / MARKER, elsewhere)
    assert sorted(os.listdir(output)) == [MARKER]  # its lock taken back, nothing written


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_of_an_index_or_embeddings_folder_refuses_a_lock_that_is_not_a_regular_file(
        reader, kind, inputs, tmp_path, elsewhere, capsys):
    line, letter = READERS[reader]
    places = {**inputs, "OUT": tmp_path / "out", "OUT.trec": tmp_path / "out.trec"}
    places[letter] = tmp_path / "read"
    shutil.copytree(inputs[letter], places[letter])
    plant(kind, places[letter] / LOCK_FILE, elsewhere)
    refused(command(line, places), places[letter] / LOCK_FILE, kind, capsys)
    assert left_alone(kind, places[letter] / LOCK_FILE, elsewhere)
    assert not {"out", "out.trec", ".out.trec.lock"} & set(os.listdir(tmp_path))


@pytest.fixture()
def run(inputs, tmp_path) -> Path:
    """A copy of the 2-step pre-training run, to be resumed."""
    shutil.copytree(inputs["RUN"], tmp_path / "run")
    return tmp_path / "run"


def outputs(run: Path) -> dict[str, bytes]:
    """The run's exports, metrics, marker and config.json by name: a refused resume changes none of them (its
    config.json is written only once the checkpoint is read and checked)."""
    return {str(path.relative_to(run)): path.read_bytes() for path in sorted(run.rglob("*"))
            if path.is_file() and "checkpoints" not in path.parts}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_resume_refuses_a_checkpoint_file_that_is_not_a_regular_file(name, kind, inputs, run, elsewhere, capsys):
    """The newest checkpoint (step 2) is refused, naming its file; the run is not resumed from step 1 instead."""
    path = run / "checkpoints" / "step-0000002" / name
    plant(kind, path, elsewhere)
    before = outputs(run)
    refused([*command(PRETRAIN, {**inputs, "RUN": run}), "--resume"], path, kind, capsys)
    assert left_alone(kind, path, elsewhere)
    assert outputs(run) == before


@pytest.mark.parametrize("kind", KINDS)
def test_adapts_guard_reads_a_checkpoints_weights_as_a_resume_does(kind, inputs, run, elsewhere):
    path = run / "checkpoints" / "step-0000002" / "model.safetensors"
    plant(kind, path, elsewhere)
    with deadline(path), pytest.raises(DataError, match=f"^{re.escape(f'{path}: is {described(kind, path)}')}, "):
        read_model_tensors(path)
    assert left_alone(kind, path, elsewhere)


def edit_state(path: Path, counters_step: int | None = None, last_epoch: int | None = None) -> None:
    state = json.loads(path.read_text())
    if counters_step is not None:
        state["counters"]["step"] = counters_step
    if last_epoch is not None:
        state["scheduler"]["last_epoch"] = last_epoch
    path.write_text(json.dumps(state))


STEPS = {  # (state.json's counters.step, its schedule's last_epoch) in the step-2 checkpoint; None: left as it is
    "a step beyond the run's end": (99, None),
    "a step short of its name": (1, None),
    "a schedule at another step": (None, 5),
    "both beyond, agreeing": (99, 99),
}


@pytest.mark.parametrize("case", STEPS)
def test_resume_refuses_a_recorded_step_that_is_not_its_checkpoints(case, inputs, run, capsys):
    """Before, a step of 99 in a 2-step run resumed into a run with nothing left to do: the step-2 weights were
    exported as the finished model and a checkpoint step-0000099 written, exit 0."""
    recorded, scheduled = STEPS[case]
    state = run / "checkpoints" / "step-0000002" / "state.json"
    edit_state(state, recorded, scheduled)
    before = outputs(run)
    assert main([*command(PRETRAIN, {**inputs, "RUN": run}), "--resume"]) == 2
    error = capsys.readouterr().err
    assert error == (f"retromae: error: {state}: records step {recorded or 2} (its schedule step {scheduled or 2}), "
                     f"but it is the checkpoint of step 2; {state.parent} is damaged (delete it to resume from "
                     "another)\n")
    assert outputs(run) == before
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["step-0000001", "step-0000002"]


def test_resume_refuses_a_checkpoint_beyond_max_steps(inputs, run, capsys):
    """A finished 2-step run resumed with --max-steps 1: it cannot be trained back; before, its weights were
    exported again as a 1-step run's."""
    before = outputs(run)
    assert main([*command(PRETRAIN.replace("--max-steps 2", "--max-steps 1"), {**inputs, "RUN": run}), "--resume"]) == 2
    state = run / "checkpoints" / "step-0000002" / "state.json"
    assert capsys.readouterr().err == (f"retromae: error: {state}: the checkpoint of step 2, beyond --max-steps 1; "
                                       "give --max-steps 2 or more to resume it\n")
    assert outputs(run) == before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json"])
def test_resume_refuses_a_run_record_that_is_not_a_regular_file(name, kind, inputs, run, elsewhere, capsys):
    """The run's own records (round eight): metrics.jsonl was appended through a link to a file (the target grew
    the run's records) and config.json written through one (the target replaced by the run's options)."""
    path = run / name
    plant(kind, path, elsewhere)
    refused([*command(PRETRAIN, {**inputs, "RUN": run}), "--resume"], path, kind, capsys)
    assert left_alone(kind, path, elsewhere)
