"""Failures of the operating system and of files, and what one run's identity covers (issue 34, items 3, 4, 8, 9).

Each test reproduces one class of the audit: an input edited without changing its size or time (item 3); two
processes writing one output, a run killed mid-record (item 4); a read-only or full file system, a file where a
folder should be and the reverse, truncated .gz and safetensors files, an unusable cache, SIGTERM (item 8); one
very long document (item 9). Full disks and read-only file systems are real ones where the tests run as root (a
small or read-only tmpfs mounted for the test), else a folder without write permission; the full disk is skipped
without root.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sentences, run_metrics, tiny_beir, tiny_pretrain_config

import retromae.pretraining.run
import retromae.training.checkpoints
import retromae.training.loop
from retromae.cli import main
from retromae.data import corpus as corpus_module
from retromae.data import token_store as token_store_module
from retromae.data.corpus import iter_corpus, iter_corpus_pieces
from retromae.data.retrieval_sets import load_qrels
from retromae.data.token_store import TokenStore, cache_key
from retromae.pretraining.run import pretrain
from retromae.runtime.errors import DataError, FileSystemError, ModelLoadError
from retromae.runtime.io import append_line, writing
from retromae.runtime.lines import appended_records
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import LOCK_FILE, file_fingerprint, input_fingerprint

ROOT = Path(__file__).resolve().parents[1]
HOLD = ("import sys; from pathlib import Path; from retromae.runtime.run_folder import hold; "
        "error = hold(Path(sys.argv[1]), Path(sys.argv[2])); print(error or 'held', flush=True); sys.stdin.read()")


def cli(*args) -> list[str]:
    return [str(arg) for arg in args]


def one_line(capsys) -> str:
    """The command's one line of error on stderr (beside its progress bars), checked to come without a traceback."""
    err = capsys.readouterr().err
    lines = [line[line.index("retromae: "):].strip() for line in err.splitlines() if "retromae: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def pretrain_options(model: Path, corpus: Path, output: Path, tmp_path: Path, steps: int = 2) -> list[str]:
    return cli("pretrain", "--model", model, "--corpus", corpus, "--output", output, "--max-length", 32,
               "--batch-size", 4, "--log-every", 1, "--save-every", 2, "--max-steps", steps, "--cache-dir",
               tmp_path / "cache")


@contextlib.contextmanager
def held_by_another_process(output: Path, lock: Path):
    """A second Python process holding the lock of `output` (as a running command does) until the block ends; it
    is then killed with SIGKILL, as a crashed run would be."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(output), str(lock)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout.readline().strip() == "held"
        yield process.pid
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    """A tmpfs mounted at `folder` with `options` (root only; the test is skipped where it cannot be mounted)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {result.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture()
def read_only(tmp_path):
    """A read-only folder: a tmpfs remounted read-only as root (root ignores permissions), else mode 0555."""
    folder = tmp_path / "read-only"
    if os.geteuid() != 0:
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    with tmpfs(folder, "size=1m"):
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder


# Item 3: a run's identity and the token store's key cover every byte of their inputs.

def edit_in_place(path: Path, offset: int) -> None:
    """Change one byte at `offset`, keeping the size and the modification time."""
    before = path.stat()
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(b"x" if byte != b"x" else b"y")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


def test_an_edit_in_the_middle_keeping_size_and_time_is_another_input(tmp_path):
    corpus = tmp_path / "big.txt"
    corpus.write_text("\n".join(make_sentences(40_000, seed=1)) + "\n")  # about 4 MB: head and tail MiB miss it
    before = file_fingerprint(corpus)
    edit_in_place(corpus, corpus.stat().st_size // 2)
    assert file_fingerprint(corpus) != before  # before: the same (only the first and last MiB were read)


def test_a_resume_on_a_corpus_edited_in_place_is_refused(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "run"
    pretrain(tiny_pretrain_config(tiny_model_dir, tiny_corpus, output, max_steps=2, save_every=2))
    edit_in_place(tiny_corpus, tiny_corpus.stat().st_size // 2)
    with pytest.raises(ConfigError, match="corpus content"):
        pretrain(tiny_pretrain_config(tiny_model_dir, tiny_corpus, output, max_steps=3, save_every=2, resume=True))


def test_the_token_store_of_a_corpus_edited_in_place_is_rebuilt(tmp_path, tiny_tokenizer, tiny_corpus):
    first = TokenStore.build_or_load([tiny_corpus], tiny_tokenizer, 16, cache_dir=tmp_path, show_progress=False)
    text = tiny_corpus.read_text()
    word = text.split('"text": "')[1].split()[0]
    other = next(w for w in ("the", "gene", "cell") if len(w) == len(word) and w != word) if len(word) in (3, 4) \
        else word[::-1]
    stat = tiny_corpus.stat()
    tiny_corpus.write_text(text.replace(word, other, 1))  # same size
    os.utime(tiny_corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tiny_corpus.stat().st_size == stat.st_size and tiny_corpus.stat().st_mtime_ns == stat.st_mtime_ns
    second = TokenStore.build_or_load([tiny_corpus], tiny_tokenizer, 16, cache_dir=tmp_path, show_progress=False)
    assert second.path != first.path  # before: the old store (its key was path, size and time)
    assert not np.array_equal(second.first_ids(20), first.first_ids(20))


def test_one_hash_per_file_and_process_serves_the_identity_and_the_store_key(tmp_path, tiny_tokenizer, tiny_corpus,
                                                                              monkeypatch):
    import hashlib

    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *data: calls.append(data) or real(*data))
    input_fingerprint(tiny_corpus)  # the run's identity
    cache_key([tiny_corpus], tiny_tokenizer, 16)  # the token store's key
    assert calls.count(()) == 1  # one hash of the file's bytes; the others hash short strings


# Item 4: one process writes an output at a time; metrics.jsonl survives a torn last record.

def test_a_second_run_and_a_resume_into_a_folder_in_use_are_refused(tiny_model_dir, tiny_corpus, tmp_path,
                                                                    capsys):
    output = tmp_path / "run"
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path)) == 0
    capsys.readouterr()
    with held_by_another_process(output, output / LOCK_FILE) as pid:
        assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path, steps=3) + ["--resume"]) == 2
        error = one_line(capsys)
        assert str(output) in error and f"in use by another retromae process (pid {pid})" in error
        assert main(pretrain_options(tiny_model_dir, tiny_corpus, tmp_path / "fresh", tmp_path)) == 0  # others: free
    # the holder was killed (SIGKILL): the system released its lock, the resume goes on
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path, steps=3) + ["--resume"]) == 0
    assert [record["step"] for record in run_metrics(output)] == [1, 2, 3]


def test_concurrent_encodes_and_file_outputs_are_refused(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                              for i, t in enumerate(make_sentences(8))))
    output = tmp_path / "emb"
    with held_by_another_process(output, output / LOCK_FILE):
        assert main(cli("encode", "--model", tiny_model_dir, "--corpus", corpus, "--output", output)) == 2
        assert str(output) in one_line(capsys)
        assert not (output / "shards").exists()  # before: a FileNotFoundError and a stray shards/
    run = tmp_path / "run.trec"
    with held_by_another_process(run, tmp_path / ".run.trec.lock"):
        assert main(cli("bm25", "--corpus", corpus, "--queries", corpus, "--output", run)) == 2
        assert f"{run}: in use" in one_line(capsys)
    assert main(cli("encode", "--model", tiny_model_dir, "--corpus", corpus, "--output", output)) == 0
    assert main(cli("bm25", "--corpus", corpus, "--queries", corpus, "--output", run)) == 0


@pytest.mark.slow  # two processes of torchrun: about 50 s on 2 shared cores
def test_a_two_process_run_into_a_folder_in_use_is_refused_on_both(tiny_model_dir, tiny_corpus, tmp_path):
    """The main process holds the lock of a distributed run; its refusal reaches the other process, which would
    otherwise wait for it until the launch's timeout."""
    output = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "retromae", *pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path)]
    with held_by_another_process(output, output / LOCK_FILE):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    refusals = [line for line in result.stderr.splitlines() if line.startswith("retromae: error:")]
    assert len(refusals) == 2 and all(f"{output}: in use by another retromae process" in line for line in refusals)
    assert "retromae/" not in result.stderr  # no frame of ours (torchrun's own report of failed children follows)


def test_a_torn_last_metrics_record_is_dropped_on_resume(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    output = tmp_path / "run"
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path, steps=2)) == 0
    with (output / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 3, "loss": 5.1')  # a kill inside the write of step 3's record
    capsys.readouterr()
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path, steps=4) + ["--resume"]) == 0
    assert "metrics.jsonl: line 3 was cut by the stop of the run; dropped" in capsys.readouterr().err
    assert [record["step"] for record in run_metrics(output)] == [1, 2, 3, 4]  # before: JSONDecodeError


def test_a_malformed_metrics_line_that_is_not_the_last_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(DataError, match=f"{path}:2: malformed JSON"):
        appended_records(path)
    path.write_text('{"step": 1}\n{"step": 2}')  # whole, only its line end missing
    assert appended_records(path) == ([{"step": 1}, {"step": 2}], None)


def test_an_append_cut_short_by_a_full_disk_leaves_no_half_record(tmp_path, monkeypatch):
    import retromae.runtime.io

    path = tmp_path / "metrics.jsonl"
    append_line(path, '{"step": 1}')
    real = os.write
    monkeypatch.setattr(retromae.runtime.io.os, "write", lambda fd, data: real(fd, data[:5]))  # a short write
    with pytest.raises(FileSystemError, match=f"{path}: cannot write: No space left on device"):
        append_line(path, '{"step": 2, "loss": 1.5}')
    assert path.read_text() == '{"step": 1}\n'


# Item 8: the operating system's failures, one line naming the path and the cause.

def test_a_read_only_output_is_refused_before_any_work(tiny_model_dir, tiny_corpus, tmp_path, read_only, capsys,
                                                       monkeypatch):
    started = []
    monkeypatch.setattr(retromae.pretraining.run, "pretraining_data", lambda *a, **k: started.append(1))
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, read_only / "run", tmp_path)) == 1
    error = one_line(capsys)
    assert error.startswith(f"retromae: error: {read_only / 'run'}: cannot write here: ")
    assert ("Read-only file system" in error or "Permission denied" in error) and not started
    assert main(cli("encode", "--model", tiny_model_dir, "--queries", tiny_corpus, "--output",
                    read_only / "emb")) == 1
    assert f"{read_only / 'emb'}: cannot write here" in one_line(capsys)
    assert main(cli("bm25", "--corpus", tiny_corpus, "--queries", tiny_corpus, "--output",
                    read_only / "run.trec")) == 1
    assert f"{read_only / 'run.trec'}: cannot write here" in one_line(capsys)


def test_a_checkpoint_that_cannot_fit_is_refused_before_training(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    with tmpfs(tmp_path / "small", "size=64k") as small:
        assert main(pretrain_options(tiny_model_dir, tiny_corpus, small / "run", tmp_path)) == 1
        assert not (small / "run" / "metrics.jsonl").exists()  # no step trained
    error = one_line(capsys)
    assert error.startswith(f"retromae: error: {small / 'run'}: ") and "MB free, a checkpoint" in error


def test_a_full_disk_during_a_checkpoint_names_it(tiny_model_dir, tiny_corpus, tmp_path, capsys, monkeypatch):
    # the disk fills during the run
    monkeypatch.setattr(retromae.training.checkpoints, "check_free_space", lambda *args: None)
    with tmpfs(tmp_path / "small", "size=64k") as small:
        assert main(pretrain_options(tiny_model_dir, tiny_corpus, small / "run", tmp_path)) == 1
        checkpoint = small / "run" / "checkpoints" / "step-0000002"
        assert one_line(capsys) == f"retromae: error: {checkpoint}: cannot write: No space left on device"
        assert not list(checkpoint.parent.glob("*.tmp"))  # the partial checkpoint does not hold on to the space


def test_a_best_probe_export_cut_short_names_it_and_leaves_no_staging(tiny_model_dir, tiny_corpus, tmp_path, capsys,
                                                                       monkeypatch):
    """The disk fills while `--keep-best-probe` writes the best encoder: one line naming best-probe/, and no
    half-written staging folder beside it."""
    import retromae.evaluation.probe

    def full_disk(objective, folder: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "pretrain_head.safetensors"))

    monkeypatch.setattr(retromae.evaluation.probe, "save_head", full_disk)
    run, beir = tmp_path / "run", tmp_path / "beir"
    tiny_beir(beir)
    probing = ["--probe", str(beir), "--probe-every", "2", "--probe-queries", "8", "--probe-documents", "20",
               "--keep-best-probe"]
    assert main([*pretrain_options(tiny_model_dir, tiny_corpus, run, tmp_path), *probing]) == 1
    assert one_line(capsys) == f"retromae: error: {run / 'best-probe'}: cannot write: No space left on device"
    assert sorted(path.name for path in run.glob("*") if "best-probe" in path.name) == []  # (the probe of step 0
    # fails before the first step: the whole folder is handed back, `run_folder.abandon`)


def corpus_of(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": "a passage"}) + "\n" for i in range(count)))
    return path


def test_an_encode_that_cannot_fit_is_refused_before_encoding(tiny_model_dir, tmp_path, capsys):
    corpus = corpus_of(tmp_path / "corpus.jsonl", 2000)  # 2000 x 32 float32: 256 kB of shards, 256 kB merged
    with tmpfs(tmp_path / "small", "size=256k") as small:
        assert main(cli("encode", "--model", tiny_model_dir, "--corpus", corpus, "--output", small / "emb")) == 1
    assert one_line(capsys) == (f"retromae: error: {small / 'emb'}: 0.3 MB free, encoding 2,000 texts needs about "
                                "0.5 MB; free some space or choose another output")


@pytest.mark.parametrize(("size", "failing"), [("64k", "shards/shard-00000.npy"), ("384k", "embeddings.npy")])
def test_a_full_disk_during_an_encode_names_the_file(tiny_model_dir, tmp_path, capsys, monkeypatch, size, failing):
    """The disk fills while encoding: at a shard, or at the merge, which writes through a memory map (before: a
    SIGBUS killed the process there, no message)."""
    import retromae.retrieval.encode

    monkeypatch.setattr(retromae.retrieval.encode, "check_free_space", lambda *args: None)
    corpus = corpus_of(tmp_path / "corpus.jsonl", 2000)
    with tmpfs(tmp_path / "small", f"size={size}") as small:
        assert main(cli("encode", "--model", tiny_model_dir, "--corpus", corpus, "--output", small / "emb")) == 1
        assert one_line(capsys) == f"retromae: error: {small / 'emb' / failing}: cannot write: No space left on device"
        assert not [p for p in (small / "emb").rglob("*.tmp")]  # no temporary file left


def test_a_library_quoting_the_system_error_is_named(tmp_path):
    target = tmp_path / "checkpoints" / "step-0000002"
    safetensors_error = type("SafetensorError", (Exception,), {})  # its message, as safetensors words it
    with pytest.raises(FileSystemError, match=f"{target}: cannot write: No space left on device"):
        with writing(target):
            raise safetensors_error("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("failure", [RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos"),
                                     OSError("524288 requested and 131056 written")])
def test_a_writer_failing_in_its_own_words_on_a_full_disk_is_named(tmp_path, monkeypatch, failure):
    import retromae.runtime.io

    target = tmp_path / "checkpoints" / "step-0000002"
    monkeypatch.setattr(retromae.runtime.io, "_nearly_full", lambda path: True)
    with pytest.raises(FileSystemError, match=f"{target}: cannot write: No space left on device"):
        with writing(target):
            raise failure
    monkeypatch.setattr(retromae.runtime.io, "_nearly_full", lambda path: False)  # room left: not the disk's fault
    with pytest.raises(type(failure)):
        with writing(target):
            raise failure


def test_a_file_where_a_folder_belongs_and_the_reverse(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for output in (a_file, a_file / "run"):
        assert main(pretrain_options(tiny_model_dir, tiny_corpus, output, tmp_path)) == 1
        assert one_line(capsys) == f"retromae: error: {a_file}: is a file, not a folder"
    assert main(cli("init-model", "--tokenizer", tiny_model_dir, "--output", a_file)) == 1
    assert one_line(capsys) == f"retromae: error: {a_file}: is a file, not a folder"
    assert a_file.read_text() == "mine"
    folder = tmp_path / "runs"
    folder.mkdir()
    assert main(cli("bm25", "--corpus", tiny_corpus, "--queries", tiny_corpus, "--output", folder,
                    "--overwrite")) == 1
    assert one_line(capsys) == f"retromae: error: {folder}: is a folder; --output takes a file name"
    assert main(cli("encode", "--model", tiny_model_dir, "--corpus", folder, "--output", tmp_path / "e")) != 0
    assert str(folder) in one_line(capsys)


def test_truncated_gzip_files_are_named(tmp_path, capsys):
    qrels = tmp_path / "qrels.tsv.gz"
    rows = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(5000))
    qrels.write_bytes(gzip.compress(rows.encode())[:-200])
    with pytest.raises(DataError, match=f"{qrels}: truncated or damaged gzip file after line"):
        load_qrels(qrels)
    qrels.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DataError, match=f"{qrels}: truncated or damaged gzip file"):
        load_qrels(qrels)


def test_truncated_safetensors_files_are_named(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    for file in tiny_model_dir.iterdir():
        (model / file.name).write_bytes(file.read_bytes())
    weights = model / "model.safetensors"
    for size in (weights.stat().st_size // 2, 5):
        os.truncate(weights, size)
        assert main(cli("encode", "--model", model, "--queries", tiny_corpus, "--output", tmp_path / "e")) == 2
        assert one_line(capsys).startswith(f"retromae: error: {weights}: ")
    output = tmp_path / "run"
    pretrain(tiny_pretrain_config(tiny_model_dir, tiny_corpus, output, max_steps=1, save_every=0))
    head = output / "pretrain_head.safetensors"
    os.truncate(head, head.stat().st_size - 10)
    with pytest.raises(ModelLoadError, match=f"{head}: truncated or damaged safetensors file"):
        pretrain(tiny_pretrain_config(None, tiny_corpus, tmp_path / "next", max_steps=1, init_from=str(output),
                                      model=None))


def test_an_unusable_cache_is_named_before_tokenising(tiny_model_dir, tiny_corpus, tmp_path, read_only, capsys,
                                                      monkeypatch):
    not_a_folder = tmp_path / "cache-file"
    not_a_folder.write_text("")
    options = pretrain_options(tiny_model_dir, tiny_corpus, tmp_path / "run", tmp_path)
    without_cache = options[:options.index("--cache-dir")]
    monkeypatch.setattr(token_store_module, "_build", lambda *a, **k: pytest.fail("tokenised"))
    monkeypatch.setenv("RETROMAE_CACHE", str(not_a_folder))
    assert main(without_cache) == 1
    assert one_line(capsys) == (f"retromae: error: $RETROMAE_CACHE: {not_a_folder}: is a file, not a folder; "
                                "choose another folder")  # before the output is claimed (round eight)
    monkeypatch.setenv("RETROMAE_CACHE", str(read_only))
    assert main(without_cache + ["--overwrite"]) == 1
    error = one_line(capsys)
    assert error.startswith(f"retromae: error: $RETROMAE_CACHE: {read_only}: cannot be written: ")  # round nine


def test_sigterm_stops_like_ctrl_c(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch, capsys):
    def terminated(config):
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop; the handler raises at the next bytecode
        time.sleep(5)
        pytest.fail("SIGTERM did not stop the command")

    monkeypatch.setattr(retromae.pretraining.run, "pretrain", terminated)
    assert main(pretrain_options(tiny_model_dir, tiny_corpus, tmp_path / "run", tmp_path)) == 143
    error = one_line(capsys)
    assert error.startswith("retromae: stopped by SIGTERM; finished checkpoints") and "--resume" in error
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back after the command


# Item 9: memory does not grow with the length of one document.

def test_a_long_document_is_tokenised_in_pieces_into_the_same_blocks(tmp_path, tiny_tokenizer, monkeypatch):
    long_text = " ".join(make_sentences(400, seed=5)) + " protéine " * 50  # about 40,000 characters on one line
    corpus = tmp_path / "long.txt"
    corpus.write_text("\n".join([long_text, "a short one here.", "x"]) + "\n")
    whole = TokenStore.build_or_load([corpus], tiny_tokenizer, 32, cache_dir=tmp_path / "whole",
                                     show_progress=False)
    longest = []
    real = token_store_module.piece_batches
    monkeypatch.setattr(token_store_module, "PIECE_CHARACTERS", 997)
    monkeypatch.setattr(corpus_module, "LINE_PIECE_BYTES", 1000)  # the line read 1000 bytes at a time
    monkeypatch.setattr(token_store_module, "piece_batches", lambda documents: (
        longest.append(max(len(text) for text, _ in batch)) or batch for batch in real(documents)))
    pieces = TokenStore.build_or_load([corpus], tiny_tokenizer, 32, cache_dir=tmp_path / "pieces",
                                      show_progress=False)
    assert max(longest) <= 997  # no call of the tokenizer saw more than one piece of the long line
    assert pieces.meta["num_documents"] == whole.meta["num_documents"] == 2
    assert pieces.meta["dropped_tokens"] == whole.meta["dropped_tokens"]
    for name, _ in token_store_module.FILES.values():
        assert (pieces.path / name).read_bytes() == (whole.path / name).read_bytes(), name


def test_a_txt_corpus_read_in_pieces_gives_the_documents_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "LINE_PIECE_BYTES", 7)  # every character boundary and line end met mid-read
    lines = tmp_path / "lines.txt"
    lines.write_bytes("\r\n".join(["\ufeff  héllo wörld ünïcode  ", "x" * 50 + " end\t", "日本語の テキスト",
                                    "tab\tand\x00nul", "last line", "", "   "]).encode())  # BOM, CRLF, no final end
    paragraphs = tmp_path / "paragraphs.txt"
    paragraphs.write_text("first one\nstill first\n\n" + "y" * 30 + "\n")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"text": "z " * 40}) + "\n")
    for path in (lines, paragraphs, records):
        texts, current = [], ""
        for text, ends in iter_corpus_pieces([path], 5, " \n\t"):
            assert len(text) <= 5
            current += text
            if ends:
                texts, current = [*texts, current], ""
        assert texts == [document.text for document in iter_corpus([path])], path.name
    assert len(texts) == 1 and len([*iter_corpus([lines])]) == 5


@pytest.mark.parametrize("piece", [1, 2, 3, 4, 5, 100])
@pytest.mark.parametrize("line", [b"abcdefgh\xffij\n", b"abc\xc3\xa9fgh\xffij\n", b"abcdefgh\xc3"],
                         ids=["ascii", "a character cut by the pieces", "a character begun at the end, no line end"])
def test_a_line_read_in_pieces_names_invalid_utf8_at_its_byte(tmp_path, monkeypatch, piece, line):
    """The byte named is the bad byte's position in the line, wherever the pieces cut it (a character held back
    between pieces, a last line without its line end, whose bad byte was once named one too far)."""
    monkeypatch.setattr(corpus_module, "LINE_PIECE_BYTES", piece)
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\n" + line)
    with pytest.raises(DataError, match=f"{path}:2: invalid UTF-8 at byte 8 of the line"):
        list(iter_corpus_pieces([path], 100, " "))


# Round six (section 9): a current directory deleted under the shell.

GONE = ("retromae: error: the current directory ({}) no longer exists (deleted or moved away): relative paths cannot "
        "be read from it, and torch cannot load there; cd to a folder that exists (and give paths from it, or absolute "
        "ones)")


def test_a_deleted_current_directory_is_one_line_naming_it_for_every_command(tiny_model_dir, tmp_path, capsys,
                                                                             monkeypatch):
    """`cd gone; rmdir ../gone; retromae bm25 --data /abs/beir --output rel.trec` said only "No such file or
    directory"; a torch command died importing torch ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so").
    Now every command, the Python API and a fresh process say it first, relative paths given or not."""
    import retromae

    beir, gone = tmp_path / "beir", tmp_path / "gone"
    tiny_beir(beir)
    gone.mkdir()
    commands = {"bm25": cli("bm25", "--data", beir, "--output", "rel.trec"),
                "evaluate": cli("evaluate", "--run", "rel.trec", "--data", beir),
                "encode": cli("encode", "--model", tiny_model_dir, "--corpus", beir / "corpus.jsonl", "--output",
                              tmp_path / "emb")}
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setenv("PWD", str(gone))
    for command, args in commands.items():
        assert main(args) == 1, command
        assert one_line(capsys) == GONE.format(gone), command
    with pytest.raises(FileSystemError, match="the current directory .* no longer exists"):
        retromae.bm25(data=str(beir), output="rel.trec")
    script = 'cd "$1" && rmdir "$1" && exec "$2" -m retromae "$3" --model "$4" --corpus "$5" --output "$6"'
    gone.mkdir()
    done = subprocess.run(["sh", "-c", script, "sh", gone, sys.executable, "encode", tiny_model_dir,
                           beir / "corpus.jsonl", tmp_path / "emb"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert (done.returncode, done.stderr.strip()) == (1, GONE.format(gone))
    assert not (tmp_path / "emb").exists() and not list(tmp_path.rglob("rel.trec"))
