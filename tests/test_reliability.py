"""A run never mixes with, or silently replaces, another run's results (issue 12).

Each test reproduces one failure mode of the issue: a re-used output folder, a resume of another run, pruning
across runs, options beyond the model, files with a byte-order mark / CRLF / control characters, and the same
guarantees for every command that writes an output; and the smaller traps of issue 21 (resuming with the saved
options, Ctrl-C, file permissions, the model an index records).
"""

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sentences, run_metrics, tiny_pretrain_config

import retromae.pretraining.run
import retromae.training.checkpoints
import retromae.training.loop
from retromae.cli import main
from retromae.data.contrastive import iter_pairs
from retromae.data.corpus import iter_corpus
from retromae.data.retrieval_sets import (
    load_corpus,
    load_qrels,
    load_queries,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.data.training_groups import load_training_file
from retromae.models.encoder import Encoder
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.retrieval.encode import SHARDS_DIR, encode_to_dir, load_embeddings
from retromae.runtime.options import ConfigError

TEXTS = make_sentences(12, seed=3)
IDS = [f"d{i}" for i in range(len(TEXTS))]


def run_config(model: Path, corpus: Path, output: Path, **overrides) -> PretrainConfig:
    return tiny_pretrain_config(model, corpus, output, **{"save_every": 2, "keep_checkpoints": 2, **overrides})


def checkpoints(output: Path) -> list[str]:
    return sorted(p.name for p in (output / "checkpoints").iterdir())


# 1. A second, different run into the same folder.

def test_a_second_run_into_a_used_folder_is_refused(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=4))
    before = run_metrics(output)
    with pytest.raises(ConfigError) as error:
        pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=3, seed=7))
    message = str(error.value)
    assert str(output) in message and "--overwrite" in message and "\n" not in message
    assert "(seed differ)" in message and "--resume" not in message  # it would be refused: another run
    assert run_metrics(output) == before and checkpoints(output) == ["step-0000002", "step-0000004"]


def test_overwrite_clears_only_our_files(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=4))
    (output / "notes.txt").write_text("mine")
    (output / "plots").mkdir()
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=3, seed=7, overwrite=True))
    assert [m["step"] for m in run_metrics(output)] == [1, 2, 3]
    assert checkpoints(output) == ["step-0000002", "step-0000003"]
    assert (output / "notes.txt").read_text() == "mine" and (output / "plots").is_dir()


def test_a_folder_of_unrelated_files_is_used(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=2))
    assert (output / "notes.txt").read_text() == "mine" and (output / "encoder").is_dir()


def test_the_cli_refuses_in_one_line(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    args = ["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output",
            str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4", "--max-length", "32",
            "--cache-dir", str(tmp_path / "cache")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "--overwrite" in line]
    assert len(errors) == 1 and "--resume" in errors[0] and str(tmp_path / "run") in errors[0]


# 2. --resume of another run's checkpoint.

def test_resume_of_another_run_lists_the_differing_options(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=4))
    encoder = (output / "encoder" / "model.safetensors").read_bytes()
    with pytest.raises(ConfigError, match="seed.*max_length|max_length.*seed") as error:
        pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=3, seed=7, max_length=24, resume=True))
    assert "max_steps" not in str(error.value)
    assert (output / "encoder" / "model.safetensors").read_bytes() == encoder


def test_resume_of_another_corpus_is_refused(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=2))
    other = tmp_path / "other.jsonl"
    other.write_text(tiny_corpus.read_text().replace("the", "a"))
    with pytest.raises(ConfigError, match="corpus"):
        pretrain(run_config(tiny_model_dir, other, output, max_steps=4, resume=True))


def test_a_longer_resumed_run_continues_the_same_data_and_masks(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    """Steps 1-4 are kept as they were; steps 5-6 see the batches and masks an uninterrupted 6-step run sees
    (the learning rate of steps 5-6 follows the 6-step schedule: see docs/reliability.md)."""
    seen: list[tuple[int, tuple]] = []
    original_step = retromae.training.loop.Trainer._optimizer_step

    def record_batches(self, batches):
        def recorded():
            for batch in batches:
                seen.append((self.state.micro_batches, tuple(batch["input_ids"].flatten().tolist())))
                yield batch
        return original_step(self, recorded())

    monkeypatch.setattr(retromae.training.loop.Trainer, "_optimizer_step", record_batches)
    straight = tmp_path / "straight"
    pretrain(run_config(tiny_model_dir, tiny_corpus, straight, max_steps=6))
    reference, seen[:] = list(seen), []
    longer = tmp_path / "longer"
    pretrain(run_config(tiny_model_dir, tiny_corpus, longer, max_steps=4))
    first = run_metrics(longer)
    pretrain(run_config(tiny_model_dir, tiny_corpus, longer, max_steps=6, resume=True))
    assert seen == reference
    assert run_metrics(longer)[:4] == first and [m["step"] for m in run_metrics(longer)] == list(range(1, 7))
    for ours, theirs in zip(run_metrics(longer)[4:], run_metrics(straight)[4:], strict=True):
        assert ours["lr"] == pytest.approx(theirs["lr"])


def documented_rate(step: int, max_steps: int, learning_rate: float, warmup_ratio: float = 0.1) -> float:
    """docs/reliability.md, "Training longer": the rate after step `step` (the one step `step` + 1 runs at) of a
    run of `max_steps` steps, resumed or not: linear warm-up over int(warmup_ratio × max_steps) steps, then linear
    decay to 0 at `max_steps`."""
    warmup = int(warmup_ratio * max_steps)
    if step < warmup:
        return learning_rate * step / warmup
    return learning_rate * max(0.0, (max_steps - step) / (max_steps - warmup))


def test_a_finished_run_resumed_longer_follows_the_longer_schedule(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch,
                                                                  capsys):
    """Issue 38: a finished 10-step run (rate 0 at step 10) resumed with --max-steps 20. Every step after the resume
    runs at the 20-step schedule's rate, the first one included (before: at the checkpoint's 0), and the rates logged
    at steps 11-20 are the documented rule's."""
    used: dict[int, float] = {}
    original_step = retromae.training.loop.Trainer._optimizer_step

    def record_rate(self, batches):
        used[self.state.step + 1] = self.optimizer.param_groups[0]["lr"]
        return original_step(self, batches)

    monkeypatch.setattr(retromae.training.loop.Trainer, "_optimizer_step", record_rate)
    output = tmp_path / "run"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=10, save_every=5))
    assert run_metrics(output)[-1]["lr"] == 0.0
    assert [used[step] for step in range(1, 11)] == pytest.approx(
        [documented_rate(step - 1, 10, 1e-3) for step in range(1, 11)], abs=1e-12)
    capsys.readouterr()
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=20, save_every=5, resume=True))
    assert "follows the schedule of 20 steps from step 10 on" in capsys.readouterr().out
    for step in range(11, 21):
        assert used[step] == pytest.approx(documented_rate(step - 1, 20, 1e-3), abs=1e-12)
    logged = {record["step"]: record["lr"] for record in run_metrics(output)}
    assert [logged[step] for step in range(11, 21)] == pytest.approx(
        [documented_rate(step, 20, 1e-3) for step in range(11, 21)], abs=1e-12)
    assert used[11] == pytest.approx(1e-3 * 10 / 18) and logged[15] == pytest.approx(1e-3 * 5 / 18)


def test_resume_with_other_logging_and_saving_is_accepted(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=4))
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=6, log_every=2, save_every=3,
                        keep_checkpoints=1, num_workers=0, resume=True))
    assert checkpoints(output) == ["step-0000006"]


def test_kill_minus_nine_then_resume_reproduces_the_losses(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    reference = run_metrics(pretrain(run_config(tiny_model_dir, tiny_corpus, tmp_path / "straight")))
    original = retromae.training.loop.Trainer._optimizer_step

    def dies_in_step_five(self, batches):
        if self.state.step == 4:
            raise KeyboardInterrupt("killed between checkpoints")
        return original(self, batches)

    monkeypatch.setattr(retromae.training.loop.Trainer, "_optimizer_step", dies_in_step_five)
    with pytest.raises(KeyboardInterrupt):
        pretrain(run_config(tiny_model_dir, tiny_corpus, tmp_path / "killed"))
    monkeypatch.setattr(retromae.training.loop.Trainer, "_optimizer_step", original)
    resumed = run_metrics(pretrain(run_config(tiny_model_dir, tiny_corpus, tmp_path / "killed", resume=True)))
    assert [m["loss"] for m in resumed] == pytest.approx([m["loss"] for m in reference], rel=1e-5)


# 3. Pruning only removes this run's checkpoints, in numeric step order.

def test_pruning_keeps_the_newest_steps_by_number(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "run"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=2, save_every=1))
    folder = output / "checkpoints"
    mine = folder / "step-0000002"
    for name in ("step-0000001", "step-9999999", "step-10000000"):
        (folder / name).mkdir(exist_ok=True)
        for file in mine.iterdir():
            if file.is_file():
                (folder / name / file.name).write_bytes(file.read_bytes())
    foreign = folder / "step-20000000"
    foreign.mkdir()
    retromae.training.checkpoints.prune_checkpoints(output, keep=1,
                                                    identity=retromae.training.checkpoints.checkpoint_identity(mine))
    assert checkpoints(output) == ["step-10000000", "step-20000000"]


# 4. Options checked against the model before any work.

def test_max_length_beyond_the_position_embeddings_is_refused(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "run"
    with pytest.raises(ConfigError, match="--max-length.*128"):
        pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_length=100_000))
    assert not output.exists()


def test_finetune_lengths_beyond_the_model_are_refused(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"query": t[:20], "pos": [t], "neg": [TEXTS[i - 1]]}) + "\n"
                            for i, t in enumerate(TEXTS)))
    args = ["finetune", "--model", str(tiny_model_dir), "--data", str(data), "--output", str(tmp_path / "ft"),
            "--passage-max-length", "4096", "--max-steps", "1", "--batch-size", "2"]
    assert main(args) == 2
    assert "--passage-max-length" in capsys.readouterr().err and not (tmp_path / "ft").exists()


# 5. Byte-order marks, CRLF line ends, NUL and other control characters.

BOM = "\ufeff"


def write_windows(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((BOM + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    return path


def test_every_reader_accepts_a_bom_and_crlf(tmp_path):
    jsonl = write_windows(tmp_path / "c.jsonl", [json.dumps({"_id": "a", "text": "one"}),
                                                  json.dumps({"_id": "b", "text": "two"})])
    assert [d.text for d in iter_corpus([jsonl])] == ["one", "two"]
    txt = write_windows(tmp_path / "c.txt", ["first line", "second line"])
    assert [d.text for d in iter_corpus([txt])] == ["first line", "second line"]
    assert load_corpus(jsonl)["a"].text == "one"
    assert load_corpus(write_windows(tmp_path / "collection.tsv", ["1\tone", "2\ttwo"]))["1"].text == "one"
    assert load_queries(write_windows(tmp_path / "queries.tsv", ["q1\twhat"])) == {"q1": "what"}
    assert load_queries(write_windows(tmp_path / "queries.jsonl", [json.dumps({"_id": "q", "text": "x"})])) == \
        {"q": "x"}
    assert load_qrels(write_windows(tmp_path / "qrels.tsv", ["query-id\tcorpus-id\tscore", "q1\t1\t1"])) == \
        {"q1": {"1": 1}}
    train = write_windows(tmp_path / "train.jsonl", [json.dumps({"query": "q", "pos": ["p"], "neg": ["n"]})])
    assert load_training_file(train).examples[0].query == "q"
    pairs = write_windows(tmp_path / "pairs.jsonl", [json.dumps({"query": "q", "pos": "p"})])
    assert [pair[:2] for pair in iter_pairs(pairs)] == [("q", ["p"])]
    sts = write_windows(tmp_path / "sts.csv", ["g\tf\t2012\t1\t4.5\tA cat.\tA dog."])
    assert load_sts_pairs(sts)[0] == ["A cat."]
    run = write_windows(tmp_path / "run.trec", ["q1 Q0 1 1 2.5 x"])
    assert read_trec_run(run) == {"q1": {"1": 2.5}}


def test_nul_and_control_characters_become_spaces(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "one\x00two\x07three\\u0000four"}\n'
                     b'{"_id": "b", "text": "tab\\there"}\n')
    assert [d.text for d in iter_corpus([path])] == ["one two three four", "tab\there"]
    tsv = tmp_path / "collection.tsv"
    tsv.write_bytes(b"1\tx\x00y\x0bz\rw\n")
    assert load_corpus(tsv)["1"].text == "x y z w"


# 6. Every other command that writes an output.

@pytest.fixture()
def encoder(tiny_model_dir):
    return Encoder.load(tiny_model_dir, pooling="mean", normalize=True, device="cpu")


class Killed(Exception):
    """Stands for the process being killed."""


def test_interrupted_encode_resumes_only_with_the_same_model_and_input(tmp_path, encoder, tiny_model_dir,
                                                                       monkeypatch):
    real = Encoder.encode
    calls = []

    def dies_on_second_shard(self, texts, **kwargs):
        calls.append(len(texts))
        if len(calls) == 2:
            raise Killed
        return real(self, texts, **kwargs)

    monkeypatch.setattr(Encoder, "encode", dies_on_second_shard)
    output = tmp_path / "emb"
    with pytest.raises(Killed):
        encode_to_dir(encoder, IDS, TEXTS, output, model_name=str(tiny_model_dir), shard_size=4,
                      show_progress=False)
    with pytest.raises(ConfigError, match="fingerprint"):
        encode_to_dir(encoder, IDS, TEXTS[::-1], output, model_name=str(tiny_model_dir), shard_size=4,
                      show_progress=False)
    with pytest.raises(ConfigError, match="model"):
        encode_to_dir(encoder, IDS, TEXTS, output, model_name="another-model", shard_size=4, show_progress=False)
    monkeypatch.setattr(Encoder, "encode", real)
    encode_to_dir(encoder, IDS, TEXTS, output, model_name=str(tiny_model_dir), shard_size=4, show_progress=False)
    assert not (output / SHARDS_DIR).exists()


def test_a_finished_encoding_is_not_replaced_by_another(tmp_path, encoder):
    output = tmp_path / "emb"
    encode_to_dir(encoder, IDS, TEXTS, output, model_name="tiny", shard_size=4, show_progress=False)
    before = load_embeddings(output, mmap=False)[1]
    with pytest.raises(ConfigError, match="--overwrite"):
        encode_to_dir(encoder, IDS[:5], TEXTS[:5], output, model_name="tiny", shard_size=4, show_progress=False)
    np.testing.assert_array_equal(load_embeddings(output, mmap=False)[1], before)
    encode_to_dir(encoder, IDS[:5], TEXTS[:5], output, model_name="tiny", shard_size=4, show_progress=False,
                  overwrite=True)
    assert load_embeddings(output)[0] == IDS[:5]


@pytest.fixture()
def beir(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    corpus = [json.dumps({"_id": i, "text": t}) + "\n" for i, t in zip(IDS, TEXTS, strict=True)]
    (folder / "corpus.jsonl").write_text("".join(corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": TEXTS[i][:30]}) + "\n"
                                                  for i in range(4)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                                     for i in range(4)))
    return folder


def test_file_outputs_are_replaced_only_with_overwrite(tmp_path, beir, capsys):
    run = tmp_path / "bm25.trec"
    run.write_text("somebody else's file\n")
    bm25 = ["bm25", "--data", str(beir), "--output", str(run), "--top-k", "5"]
    assert main(bm25) == 2
    err = capsys.readouterr().err
    assert str(run) in err and "--overwrite" in err and run.read_text() == "somebody else's file\n"
    assert main([*bm25, "--overwrite"]) == 0 and "q0" in read_trec_run(run)
    result = tmp_path / "eval.json"
    result.write_text("{}")
    evaluate = ["evaluate", "--run", str(run), "--data", str(beir), "--output", str(result)]
    assert main(evaluate) == 2 and result.read_text() == "{}"
    assert main([*evaluate, "--overwrite"]) == 0 and "ndcg@10" in json.loads(result.read_text())


def test_index_and_report_folders_are_not_replaced_without_overwrite(tmp_path, encoder, capsys):
    embeddings = encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", model_name="tiny", show_progress=False)
    index = ["index", "--embeddings", str(embeddings), "--output", str(tmp_path / "index")]
    assert main(index) == 0
    assert main([*index, "--factory", "Flat", "--metric", "l2"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main([*index, "--metric", "l2", "--overwrite"]) == 0


def test_trec_writer_still_writes_atomically(tmp_path):
    write_trec_run({"q": {"d": 1.0}}, tmp_path / "r.trec")
    assert read_trec_run(tmp_path / "r.trec") == {"q": {"d": 1.0}}


# 7. Lean outputs: --save-every 0 leaves no optimiser checkpoint.

def test_save_every_zero_leaves_no_checkpoint(tiny_model_dir, tiny_corpus, tmp_path):
    output = pretrain(run_config(tiny_model_dir, tiny_corpus, tmp_path / "lean", max_steps=3, save_every=0))
    assert not (output / "checkpoints").exists() and (output / "encoder").is_dir()
    assert [m["step"] for m in run_metrics(output)] == [1, 2, 3]


# 7. The smaller traps a newcomer hit following the docs (issue 21, item 6).

def test_resume_needs_only_the_output_folder(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "run"
    options = ["--model", tiny_model_dir, "--corpus", tiny_corpus, "--max-length", 32, "--batch-size", 4,
               "--log-every", 1, "--save-every", 2, "--cache-dir", tmp_path / "cache", "--seed", 7]
    assert main([str(a) for a in ("pretrain", *options, "--output", output, "--max-steps", 2)]) == 0
    # before: "--model: give exactly one of --model and --init-from" unless every option was repeated
    assert main([str(a) for a in ("pretrain", "--output", output, "--resume", "--max-steps", 3)]) == 0
    assert [record["step"] for record in run_metrics(output)] == [1, 2, 3]
    assert json.loads((output / "config.json").read_text())["seed"] == 7


def test_ctrl_c_prints_one_line(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch, capsys):
    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(retromae.pretraining.run, "pretrain", interrupted)
    assert main(["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output",
                 str(tmp_path / "run")]) == 130
    error = capsys.readouterr().err.strip()
    assert error.startswith("retromae: interrupted") and "\n" not in error and "--resume" in error


def test_atomic_writes_get_the_permissions_of_the_umask(tmp_path):
    from retromae.runtime.io import atomic_directory, write_text_atomic

    previous = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "file.txt", "x")
        with atomic_directory(tmp_path / "folder") as staging:
            (staging / "inner").mkdir(mode=0o700)
            write_text_atomic(staging / "inner" / "weights.bin", "y")
    finally:
        os.umask(previous)
    mode = {path.name: stat.S_IMODE(path.stat().st_mode) for path in tmp_path.rglob("*")}
    assert mode == {"file.txt": 0o644, "folder": 0o755, "inner": 0o755, "weights.bin": 0o644}  # before: 0600, 0700


def test_an_index_of_encode_to_dir_vectors_knows_its_model(tmp_path, tiny_model_dir, beir):
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    encode_to_dir(encoder, IDS, TEXTS, tmp_path / "emb", show_progress=False)  # no model_name given
    assert load_embeddings(tmp_path / "emb")[2]["model"] == str(tiny_model_dir)  # before: ""
    assert main(["index", "--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "index")]) == 0
    assert main(["search", "--index", str(tmp_path / "index"), "--queries", str(beir / "queries.jsonl"),
                 "--output", str(tmp_path / "run.trec")]) == 0  # before: "--model: the index records no model"
    assert set(read_trec_run(tmp_path / "run.trec")) == {"q0", "q1", "q2", "q3"}


def test_resume_accepts_the_same_inputs_named_from_another_directory(tiny_model_dir, tiny_corpus, tmp_path,
                                                                   monkeypatch):
    output = tmp_path / "full"
    pretrain(run_config(tiny_model_dir, tiny_corpus, output, max_steps=2))
    monkeypatch.chdir(tiny_corpus.parent)
    relative_model = os.path.relpath(tiny_model_dir, tiny_corpus.parent)
    pretrain(run_config(Path(relative_model), Path(tiny_corpus.name), output, max_steps=3, resume=True))
    assert [m["step"] for m in run_metrics(output)] == [1, 2, 3]


def _identity_cases() -> list[tuple[str, type, str]]:
    """(command, its config class, one of its free-text options) of every command: each option typed text that
    reads nothing (`path_options`), but the precisions, which the identity records resolved on --device
    (`runtime.precision.resolved_precision`, tests/test_round_ten_precision.py)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_option_domains import commands

    from retromae.runtime.options import _field_specs, path_options
    from retromae.runtime.precision import PRECISION_FIELDS

    return [(command.name, command.config_cls, name) for command in commands()
            for name, spec in _field_specs(command.config_cls).items()
            if spec.scalar is str and name not in (*path_options(command.config_cls), *PRECISION_FIELDS, "device")]


def _unchecked_config(config_cls: type, **values: object) -> object:
    """An instance of `config_cls` at its defaults ("x" where it has none) with `values`, built without its checks:
    the identity alone is under test."""
    import dataclasses

    config = object.__new__(config_cls)
    for field in dataclasses.fields(config_cls):
        default = (field.default if field.default is not dataclasses.MISSING else field.default_factory()
                   if field.default_factory is not dataclasses.MISSING else "x")
        object.__setattr__(config, field.name, values.get(field.name, default))
    return config


@pytest.mark.parametrize(("command", "config_cls", "name"), _identity_cases(),
                         ids=[f"{command}-{name}" for command, _, name in _identity_cases()])
def test_a_text_option_is_never_looked_up_as_a_path_in_the_identity(command, config_cls, name, tmp_path,
                                                                       monkeypatch):
    """`evaluate --query-prefix` or `report --title` of 300 characters ended with "File name too long" (exit 1, the
    value quoted whole, no option named): the run's identity stat()ed every text option as a path. Only the options
    that name paths are looked up; a text is kept as given, even where it names a file of the current directory."""
    from retromae.runtime.run_folder import run_identity

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Results").write_text("")
    for value in ("query: " * 43, "Results"):  # 301 characters; a file's name here
        identity = run_identity(_unchecked_config(config_cls, **{name: value}), neutral=())
        assert identity[name] == value


def test_a_path_option_that_cannot_be_looked_up_is_named(tmp_path):
    """A path option's value the system cannot look up (a part over 255 bytes) is refused in one line naming the
    option, not by the CLI's last resort quoting the value whole."""
    from retromae.retrieval.config import BM25Config
    from retromae.runtime.run_folder import run_identity

    with pytest.raises(ConfigError) as refused:
        run_identity(_unchecked_config(BM25Config, queries="q" * 300), neutral=())
    message = str(refused.value)
    assert message.startswith("--queries: cannot look up 'qqq") and "\n" not in message and len(message) < 200
