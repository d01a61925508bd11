"""Round ten: the precision a run records is the one that ran (`runtime.precision`).

`auto` (--mixed-precision, --dtype) resolves per machine (bf16 on a CPU with AMX). The records held "auto", or
nothing: a run resumed where `auto` resolved otherwise mixed precisions without a word, and a finished `encode`
asked for another --dtype said "encoded N texts" over the file it kept. Now `run_identity` records the resolved
precision (training markers and checkpoints, adapt, evaluate's report folder), encode.json and its manifest record
the dtype that ran (`Encoder.precision`), a differing one is refused in one line saying what ran, a recorded "auto"
(made before) is taken with a note, and `encode` says what it encoded now and what an earlier run had.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import bare_config, error_line, tiny_beir

from retromae.adaptation.config import AdaptConfig
from retromae.cli import main
from retromae.evaluation.config import EvaluateConfig
from retromae.finetuning.config import FinetuneConfig
from retromae.models.encoder import Encoder
from retromae.pretraining.config import PretrainConfig
from retromae.reranking.config import RerankerConfig
from retromae.retrieval.encode import load_embeddings
from retromae.retrieval.vector_files import check_encoding_record
from retromae.runtime import cpu_features
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError
from retromae.runtime.run_folder import MARKER, claim_folder, differences, mark_started, release, run_identity

TRAINING_CONFIGS = (PretrainConfig, FinetuneConfig, RerankerConfig, AdaptConfig)
REFUSED_DTYPE = ("belongs to another run (dtype differ: the run computed in 'bfloat16' and this one would in "
                 "'float32'; --dtype auto resolves per machine, --dtype 'bfloat16' continues as it ran); give the "
                 "same options, or use --overwrite to replace it, or another --output")


@pytest.fixture()
def machine(monkeypatch):
    """`machine(amx)`: this CPU as one with AMX (auto is bf16) or without (float32), $RETROMAE_CPU_BF16 unset."""
    monkeypatch.delenv(cpu_features.AUTO_BF16_VARIABLE, raising=False)

    def set_machine(amx: bool) -> None:
        monkeypatch.setattr(cpu_features, "vector_extensions", lambda: ["avx512f", *(["amx_bf16"] if amx else [])])

    return set_machine


def digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("config_cls", TRAINING_CONFIGS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(("amx", "requested", "recorded"), [(True, "auto", "bf16"), (False, "auto", "no"),
                                                            (False, "bf16", "bf16"), (True, "no", "no")])
def test_a_training_identity_records_the_precision_that_runs(machine, config_cls, amx, requested, recorded):
    machine(amx)
    config = bare_config(config_cls, output="out", mixed_precision=requested)
    assert run_identity(config)["mixed_precision"] == recorded


@pytest.mark.parametrize(("amx", "dtype", "backend", "recorded"), [
    (True, "auto", None, "bfloat16"), (False, "auto", None, "float32"), (False, "float16", None, "float16"),
    (True, "auto", "onnx", "float32")])  # the other backends compute in float32 whatever --dtype says
def test_evaluate_identity_records_the_dtype_that_runs(machine, amx, dtype, backend, recorded):
    machine(amx)
    config = bare_config(EvaluateConfig, output="out", dtype=dtype, backend=backend)
    assert run_identity(config)["dtype"] == recorded


def test_a_precision_recorded_as_auto_matches_any_and_a_resolved_one_only_itself():
    assert differences({"mixed_precision": "auto"}, {"mixed_precision": "bf16"}) == []
    assert differences({"dtype": "auto"}, {"dtype": "float32"}) == []
    assert differences({"mixed_precision": "no"}, {"mixed_precision": "bf16"}) == ["mixed_precision"]
    assert differences({"seed": "auto"}, {"seed": 1}) == ["seed"]  # only a precision field


@pytest.fixture()
def claimed(tmp_path):
    """A started run's folder whose marker records `identity` (`claimed(identity)`), released for the next claim."""
    folder = tmp_path / "run"

    def claim(identity: dict) -> Path:
        claim_folder(folder, "pretrain", identity, ("out.txt",))
        (folder / "out.txt").write_text("x")
        mark_started(folder)
        release()
        return folder

    yield claim
    release()


def test_a_resume_in_another_precision_is_refused_saying_what_ran(claimed):
    folder = claimed({"mixed_precision": "bf16", "seed": 1})
    marker = (folder / MARKER).read_text()
    with pytest.raises(ConfigError) as refused:
        claim_folder(folder, "pretrain", {"mixed_precision": "no", "seed": 1}, ("out.txt",), resume=True)
    assert str(refused.value) == (
        f"{folder}: belongs to another run (mixed_precision differ: the run computed in 'bf16' and this one would in "
        "'no'; --mixed-precision auto resolves per machine, --mixed-precision 'bf16' continues as it ran); give the "
        "same options, or use --overwrite to replace it, or another --output")
    assert (folder / MARKER).read_text() == marker


def test_a_run_recorded_as_auto_continues_with_a_note(claimed, capsys):
    folder = claimed({"dtype": "auto", "seed": 1})
    capsys.readouterr()
    claim_folder(folder, "pretrain", {"dtype": "float32", "seed": 1}, ("out.txt",), resume=True)
    assert capsys.readouterr().err == (f"retromae: note: {folder}: its run recorded dtype auto, before records said "
                                       "what auto computed in; it continues in 'float32', what auto is on this "
                                       "machine\n")
    assert json.loads((folder / MARKER).read_text())["identity"]["dtype"] == "float32"  # said once


@pytest.mark.parametrize("value", ["auto", "float64", 16, None])
def test_encode_json_dtype_is_one_that_runs(value):
    with pytest.raises(DataError, match=r"^encode.json: field 'dtype' is .*, not one of float32, float16, bfloat16$"):
        check_encoding_record({"dtype": value}, "encode.json")
    assert check_encoding_record({"dtype": "bfloat16"}, "encode.json") == {"dtype": "bfloat16"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("precision10")
    tiny_beir(folder)
    return folder / "corpus.jsonl"


def encode(model: Path, corpus: Path, output: Path, *flags: str) -> int:
    return main(["encode", "--model", str(model), "--corpus", str(corpus), "--output", str(output), "--no-progress",
                 "--shard-size", "16", *flags])


def test_a_finished_encoding_in_another_precision_is_refused(machine, tiny_model_dir, corpus, tmp_path, capsys):
    machine(True)
    assert encode(tiny_model_dir, corpus, tmp_path / "emb") == 0
    assert capsys.readouterr().out.startswith("encoded 48 texts in ")
    assert json.loads((tmp_path / "emb" / "encode.json").read_text())["dtype"] == "bfloat16"
    before = digests(tmp_path / "emb")
    machine(False)
    for flags in ((), ("--dtype", "float32")):
        assert encode(tiny_model_dir, corpus, tmp_path / "emb", *flags) == 2
        assert error_line(capsys) == f"retromae: error: {tmp_path / 'emb'}: {REFUSED_DTYPE}"
    assert digests(tmp_path / "emb") == before
    assert encode(tiny_model_dir, corpus, tmp_path / "emb", "--dtype", "bfloat16") == 0  # as it ran
    assert capsys.readouterr().out == (f"nothing to encode: {tmp_path / 'emb'} holds the vectors of these 48 texts "
                                       "from an earlier run (32 dimensions, at most 128 tokens, pooling cls, "
                                       "normalize False, dtype bfloat16)\n")
    assert digests(tmp_path / "emb") == before
    assert main(["index", "--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "idx")]) == 0
    assert json.loads((tmp_path / "idx" / "index.json").read_text())["encoder"]["dtype"] == "bfloat16"


def test_an_interrupted_encoding_resumes_only_in_its_precision(machine, tiny_model_dir, corpus, tmp_path, capsys,
                                                                  monkeypatch):
    machine(True)
    calls, encode_texts = [], Encoder.encode

    def killed_at_second_shard(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return encode_texts(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "encode", killed_at_second_shard)
    assert encode(tiny_model_dir, corpus, tmp_path / "emb") == 130
    monkeypatch.setattr(Encoder, "encode", encode_texts)
    shards = digests(tmp_path / "emb")
    machine(False)
    capsys.readouterr()
    assert encode(tiny_model_dir, corpus, tmp_path / "emb") == 2
    assert error_line(capsys) == f"retromae: error: {tmp_path / 'emb'}: {REFUSED_DTYPE}"
    assert digests(tmp_path / "emb") == shards
    assert encode(tiny_model_dir, corpus, tmp_path / "emb", "--dtype", "bfloat16") == 0
    said = capsys.readouterr().out
    assert said.startswith("encoded 32 of 48 texts in ") and said.endswith(
        "(16 read from an earlier run's finished shards; 32 dimensions, at most 128 tokens, pooling cls, normalize "
        "False, dtype bfloat16)\n"), said
    _, vectors, _ = load_embeddings(tmp_path / "emb")
    whole = Encoder.load(tiny_model_dir, dtype="bfloat16").encode(
        [json.loads(line)["text"] for line in corpus.read_text().splitlines()], show_progress=False)
    np.testing.assert_array_equal(vectors, whole)  # one precision, the whole file


def pretrain(model: Path, corpus: Path, output: Path, steps: int, *flags: str) -> int:
    return main(["pretrain", "--model", str(model), "--corpus", str(corpus), "--output", str(output), "--max-steps",
                 str(steps), "--batch-size", "2", "--max-length", "16", "--save-every", "1", "--log-every", "1",
                 "--vocabulary-loss", "unfused", *flags])


def test_a_training_resumed_where_auto_resolves_otherwise(machine, tiny_model_dir, corpus, tmp_path, capsys):
    output = tmp_path / "run"
    machine(True)
    assert pretrain(tiny_model_dir, corpus, output, 1) == 0
    markers = [output / MARKER, *sorted(output.glob(f"checkpoints/*/{MARKER}"))]
    assert {json.loads(path.read_text())["identity"]["mixed_precision"] for path in markers} == {"bf16"}
    before = digests(output)
    machine(False)
    capsys.readouterr()
    assert pretrain(tiny_model_dir, corpus, output, 2, "--resume") == 2
    assert error_line(capsys) == (
        f"retromae: error: {output}: belongs to another run (mixed_precision differ: the run computed in 'bf16' and "
        "this one would in 'no'; --mixed-precision auto resolves per machine, --mixed-precision 'bf16' continues as "
        "it ran); give the same options, or use --overwrite to replace it, or another --output")
    assert digests(output) == before
    for path in markers:  # as a run made before the precision was resolved recorded it
        path.write_text(path.read_text().replace('"mixed_precision": "bf16"', '"mixed_precision": "auto"'))
    assert pretrain(tiny_model_dir, corpus, output, 2, "--resume") == 0
    assert (f"retromae: note: {output}: its run recorded mixed_precision auto, before records said what auto computed "
            "in; it continues in 'no', what auto is on this machine\n") in capsys.readouterr().err
    assert json.loads((output / "checkpoints" / "step-0000002" / MARKER).read_text())["identity"][
        "mixed_precision"] == "no"
