"""Shared test fixtures: tiny tokenizers and models built in code, never downloaded; and a session sandbox.

The sandbox: before any test module is imported, every cache and temporary folder that the tests, the libraries
they load and the processes they start would write to (Hugging Face, matplotlib, torch and its inductor, our
token stores, $TMPDIR for torch.distributed.run's `torchelastic_*` folders) points into one folder, removed when
the session ends, so the suite leaves nothing outside its temporary folders. The model libraries are imported
inside the fixtures for that reason: Hugging Face reads its cache location when first imported. The session also
fixes `auto` precision to float32 on every CPU (`FIXED_VARIABLES`), so no figure depends on the test machine's AMX,
and lets torch's threads wait between parallel regions as a `retromae` command's do (`runtime.threads`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from transformers import BertConfig, PreTrainedTokenizerFast

    from retromae.pretraining.config import PretrainConfig

SANDBOX_VARIABLES = {"HF_HOME": "huggingface", "HF_HUB_CACHE": "huggingface/hub",
                     "HF_DATASETS_CACHE": "huggingface/datasets", "XDG_CACHE_HOME": "cache",
                     "MPLCONFIGDIR": "matplotlib", "TORCH_HOME": "torch", "RETROMAE_CACHE": "retromae",
                     "TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TMPDIR": "tmp"}
# Float32 under `auto` precision on every CPU (bf16 autocast is its default where the CPU has AMX), so a test's
# figures do not depend on the machine it runs on; tests of the bf16 default set the variable themselves.
# Passive waiting, which the CLI sets for every command it starts: torch imported in this process (the tests, the API)
# would otherwise spin its threads between parallel regions, against each other and every other process on the
# cores (on a busy 2-core machine test_objectives.py took 82 CPU seconds so, 8 passive). Set before torch is imported.
FIXED_VARIABLES = {"RETROMAE_CPU_BF16": "0", "OMP_WAIT_POLICY": "PASSIVE"}
SANDBOX = pytest.StashKey[tuple[Path, dict[str, str | None]]]()  # the folder, and the variables' previous values


def pytest_configure(config: pytest.Config) -> None:
    sandbox = Path(tempfile.mkdtemp(prefix="retromae-tests-"))
    config.stash[SANDBOX] = (sandbox, {name: os.environ.get(name) for name in [*SANDBOX_VARIABLES, *FIXED_VARIABLES]})
    for name, relative in SANDBOX_VARIABLES.items():
        (sandbox / relative).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(sandbox / relative)
    os.environ.update(FIXED_VARIABLES)


def pytest_unconfigure(config: pytest.Config) -> None:
    sandbox, previous = config.stash[SANDBOX]
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(sandbox, ignore_errors=True)

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"

WORDS = (
    "the a of retrieval dense encoder decoder masked token sentence embedding query passage document "
    "corpus search index vector model training loss gradient batch layer attention neural network learns "
    "represents meaning text science claim evidence study result protein cell gene patients treatment "
    "running runner runs jumped jumping happily quickly unbelievable reconstruction pretraining"
).split()


def make_sentences(count: int, seed: int = 0) -> list[str]:
    """Deterministic pseudo-English sentences over a small vocabulary."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + "." for _ in range(count)]


def build_wordpiece_tokenizer(vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """A BERT-style uncased WordPiece tokenizer trained on `make_sentences`."""
    from retromae.models.tokenizer_training import train_tokenizer

    return train_tokenizer(make_sentences(500), "wordpiece", vocab_size)


def tiny_bert_config(vocab_size: int) -> BertConfig:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
    )


@pytest.fixture(scope="session")
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    return build_wordpiece_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """A folder holding a tiny BertForMaskedLM and its tokenizer, loadable like a hub checkpoint."""
    from transformers import BertForMaskedLM

    path = tmp_path_factory.mktemp("tiny-bert")
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer)))
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def tiny_corpus(tmp_path) -> Path:
    """A small JSON-lines corpus of 60 documents."""
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"id": str(i), "text": " ".join(make_sentences(4, seed=i))}) for i in range(60)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_beir(folder: Path, seed: int = 7) -> None:
    """A 48-document BEIR folder whose queries are their document's first four words (36 train, 12 test)."""
    (folder / "qrels").mkdir(parents=True)
    documents = make_sentences(48, seed=seed)
    with (folder / "corpus.jsonl").open("w") as corpus, (folder / "queries.jsonl").open("w") as queries:
        for i, text in enumerate(documents):
            corpus.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
            queries.write(json.dumps({"_id": f"q{i}", "text": " ".join(text.split()[:4])}) + "\n")
    for split, ids in (("train", range(0, 36)), ("test", range(36, 48))):
        rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in ids]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def error_line(capsys) -> str:
    """The one line a refused command wrote to standard error (no traceback), as the refusal tests read it."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def command_inputs(folder: Path, tiny_model: Path) -> dict[str, Path]:
    """In `folder`: a model folder, a BEIR folder, its encoding, its index and a training file, keyed as the commands'
    case tables name them (M, B, E, I, T, C: the corpus, Q: the queries)."""
    from retromae.cli import main

    model, beir = folder / "model", folder / "beir"
    shutil.copytree(tiny_model, model)
    tiny_beir(beir)
    assert main(["encode", "--model", str(model), "--corpus", str(beir / "corpus.jsonl"), "--output",
                 str(folder / "emb"), "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(folder / "emb"), "--output", str(folder / "idx")]) == 0
    (folder / "train.jsonl").write_text(json.dumps({"query": "a cat", "pos": ["the cat sat"], "neg": ["a dog"]})
                                        + "\n")
    return {"M": model, "B": beir, "E": folder / "emb", "I": folder / "idx", "T": folder / "train.jsonl",
            "C": beir / "corpus.jsonl", "Q": beir / "queries.jsonl"}


def shared_data(relative: str) -> Path:
    """A path under ../shared/data, or skip the test with the reason when it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"real data not present: {path}")
    return path


def kill_after_checkpoint(monkeypatch: pytest.MonkeyPatch, step: int, run) -> None:
    """Call `run()` with every Trainer killed (a KeyboardInterrupt) right after writing its step-`step` checkpoint."""
    from retromae.training.loop import Trainer

    original_save = Trainer.save_checkpoint

    def save_then_die(self):
        original_save(self)
        if self.state.step == step:
            raise KeyboardInterrupt(f"simulated kill after the step-{step} checkpoint")

    monkeypatch.setattr(Trainer, "save_checkpoint", save_then_die)
    try:
        killed = run() == 130  # the CLI turns the interrupt into one line and exit code 130
    except KeyboardInterrupt:  # the library lets it through
        killed = True
    assert killed
    monkeypatch.setattr(Trainer, "save_checkpoint", original_save)


def tiny_pretrain_config(model: Path, corpus: Path, output: Path, /, **overrides) -> PretrainConfig:
    """A few-step pre-training of the tiny model on the tiny corpus; `overrides` change any option (`corpus`
    too)."""
    from retromae.pretraining.config import PretrainConfig

    values = dict(model=str(model), corpus=[str(corpus)], output=str(output), max_steps=6, batch_size=4,
                  max_length=32, log_every=1, save_every=3, learning_rate=1e-3, cache_dir=str(output.parent / "cache"))
    return PretrainConfig(**{**values, **overrides})


def run_metrics(output: Path) -> list[dict]:
    """The records of the metrics.jsonl in a run folder."""
    from retromae.evaluation.experiments import read_metrics

    return read_metrics(output / "metrics.jsonl")


def run_two_processes(script: str) -> str:
    """Run tests/`script` under torch.distributed.run with 2 CPU (gloo) processes; its stdout, once it exited 0."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root / 'tests'}", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(root / "tests" / script)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def bare_config(config_cls: type, **values) -> Any:
    """An instance of `config_cls` holding `values` and every other field's default (None where it has none), built
    without its checks: what a check that reads only the fields is given, whichever way a config was built."""
    config = object.__new__(config_cls)
    for field in dataclasses.fields(config_cls):
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else None)
        object.__setattr__(config, field.name, values.get(field.name, default))
    return config


def quick_onnx_export(model: Any, path: Path) -> None:
    """`retromae.models.backends.export_onnx` by torch's TorchScript exporter: the same graph in about 0.7 s, where the
    dynamo exporter the product uses takes 3 s. For tests of how exports are found, kept, probed and served, not of
    how they are made (`tests/test_backends.py: test_each_backend_gives_torchs_vectors` runs the real exporter)."""
    import warnings

    import torch

    from retromae.models.backends import INPUTS, _HiddenStates

    ids = torch.arange(16).reshape(2, 8)  # (2, 8)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_HiddenStates(model.eval()), (ids, torch.ones_like(ids)), str(path), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamo=False, dynamic_axes=axes)


@pytest.fixture(scope="module")
def init_model_folder(tiny_model_dir, tmp_path_factory) -> Path:
    """A folder of today's `retromae init-model` (hidden size 128, one layer, 64 positions; MiniLM's tokenizer)."""
    from retromae.cli import main

    folder = tmp_path_factory.mktemp("init-model") / "model"
    assert main(["init-model", "--tokenizer", str(tiny_model_dir), "--output", str(folder), "--hidden-size", "128",
                 "--layers", "1", "--max-positions", "64"]) == 0
    return folder
