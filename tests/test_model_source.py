"""The one model resolver: run folders, encoder folders, sentence-transformers folders in both layouts and config-only
folders, through the commands a newcomer runs (issue 21, items 1, 2 and the SentenceTransformer pooling trap)."""

import json
import logging
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
from conftest import make_sentences, tiny_beir, tiny_pretrain_config

from retromae.cli import main
from retromae.models.model_source import looks_local, resolve_model
from retromae.runtime.errors import ModelLoadError


def cli(*args) -> int:
    return main([str(arg) for arg in args])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir):
    """A finished 2-step pre-training of the tiny model: its output folder (encoder/, sentence-transformer/, ...)."""
    from retromae.pretraining.run import pretrain

    folder = tmp_path_factory.mktemp("run")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in make_sentences(60, seed=3)))
    return pretrain(tiny_pretrain_config(tiny_model_dir, corpus, folder / "out", max_steps=2, save_every=0))


@pytest.fixture(scope="module")
def beir_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beir") / "set"
    tiny_beir(folder)
    return folder


def config_only_folder(tiny_model_dir, folder):
    """A folder holding only a model's config.json, as the guide's from-scratch path suggests making one."""
    folder.mkdir()
    shutil.copy(tiny_model_dir / "config.json", folder / "config.json")
    return folder


def st_folder_in_module_layout(finished_run, folder):
    """The exported sentence-transformer/ rewritten in the older layout: the transformer in 0_Transformer/."""
    shutil.copytree(finished_run / "sentence-transformer", folder)
    inner = folder / "0_Transformer"
    inner.mkdir()
    for entry in list(folder.iterdir()):
        if entry.is_file() and entry.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            entry.rename(inner / entry.name)
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def test_a_config_only_folder_is_refused_before_training_on_unk(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    folder = config_only_folder(tiny_model_dir, tmp_path / "cfg")
    assert cli("pretrain", "--model", folder, "--from-config", "--corpus", tiny_corpus, "--output", tmp_path / "out",
               "--max-steps", 1, "--batch-size", 2, "--max-length", 32, "--cache-dir", tmp_path / "cache") == 2
    assert "its tokenizer knows only its 5 special tokens" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # before: 118,267 tokens all [UNK], exit 0
    assert cli("init-model", "--tokenizer", folder, "--output", tmp_path / "init", "--hidden-size", 64,
               "--layers", 1) == 2
    assert "no vocabulary" in capsys.readouterr().err


def test_a_corpus_read_as_mostly_unknown_tokens_is_refused(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "greek.txt"
    corpus.write_text("".join(" ".join(["αβγ δεζ ηθι κλμ"] * 5) + "\n" for _ in range(40)), encoding="utf-8")
    assert cli("pretrain", "--model", tiny_model_dir, "--corpus", corpus, "--output", tmp_path / "out",
               "--max-steps", 1, "--batch-size", 2, "--max-length", 32, "--cache-dir", tmp_path / "cache") == 2
    assert "reads 100% of its tokens as [UNK]" in capsys.readouterr().err


def test_every_kind_of_model_folder_resolves(finished_run, tmp_path):
    assert resolve_model(finished_run).folder == str(finished_run / "encoder")
    assert resolve_model(finished_run).kind == "run"
    assert resolve_model(finished_run / "encoder").kind == "encoder"
    root_layout = resolve_model(finished_run / "sentence-transformer")
    assert (root_layout.kind, root_layout.subfolder) == ("sentence-transformers", "")
    module_layout = resolve_model(st_folder_in_module_layout(finished_run, tmp_path / "st"))
    assert (module_layout.kind, module_layout.subfolder) == ("sentence-transformers", "0_Transformer")
    assert resolve_model("owner/name").kind == "hub"


def test_what_is_not_a_model_is_named_with_what_to_pass(tmp_path, tiny_model_dir, tiny_corpus):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(ModelLoadError, match=r"--model .*notes: not a model: it holds a.txt \(no config.json"):
        resolve_model(tmp_path / "notes")
    with pytest.raises(ModelLoadError, match="no such folder; pass a finished `retromae pretrain`"):
        resolve_model(tmp_path / "absent")
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "retromae-run.json").write_text(json.dumps({"command": "pretrain", "identity": {}}))
    (tmp_path / "unfinished" / "config.json").write_text("{}")
    unfinished = r"unfinished `retromae pretrain` run .*with `retromae pretrain --output .*unfinished --resume`"
    with pytest.raises(ModelLoadError, match=unfinished):
        resolve_model(tmp_path / "unfinished")


def test_commands_accept_a_run_folder(finished_run, beir_folder, tmp_path, tiny_corpus, caplog):
    assert cli("mine", "--model", finished_run, "--data", beir_folder, "--output", tmp_path / "mined.jsonl") == 0
    assert cli("evaluate", "--model", finished_run, "--data", beir_folder, "--output", tmp_path / "e.json") == 0
    assert json.loads((tmp_path / "e.json").read_text())["ndcg@10"] >= 0
    assert cli("init-model", "--tokenizer", finished_run, "--output", tmp_path / "init", "--hidden-size", 64,
               "--layers", 1) == 0
    with caplog.at_level(logging.WARNING, logger="retromae"):
        assert cli("pretrain", "--model", finished_run, "--corpus", tiny_corpus, "--output", tmp_path / "again",
                   "--max-steps", 1, "--batch-size", 2, "--max-length", 32, "--save-every", 0,
                   "--cache-dir", tmp_path / "cache") == 0
    assert any("--init-from" in record.getMessage() for record in caplog.records)  # how to keep the head


def test_pretrain_accepts_a_sentence_transformers_folder_in_the_module_layout(finished_run, tiny_corpus, tmp_path):
    folder = st_folder_in_module_layout(finished_run, tmp_path / "st")
    assert cli("pretrain", "--model", folder, "--corpus", tiny_corpus, "--output", tmp_path / "out",
               "--max-steps", 1, "--batch-size", 2, "--max-length", 32, "--save-every", 0,
               "--cache-dir", tmp_path / "cache") == 0
    assert (tmp_path / "out" / "encoder" / "model.safetensors").is_file()


def test_sentence_transformer_on_the_encoder_folder_pools_as_trained(finished_run):
    from sentence_transformers import SentenceTransformer

    texts = make_sentences(4, seed=5)
    encoder = SentenceTransformer(str(finished_run / "encoder"), device="cpu")
    exported = SentenceTransformer(str(finished_run / "sentence-transformer"), device="cpu")
    assert encoder[1].get_config_dict()["pooling_mode"] == "cls"  # before: mean pooling, as for a plain folder
    np.testing.assert_allclose(encoder.encode(texts), exported.encode(texts), atol=1e-5)


def test_init_from_says_nothing_of_a_fresh_head(finished_run, tiny_corpus, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="retromae"):
        assert cli("pretrain", "--init-from", finished_run, "--corpus", tiny_corpus, "--output", tmp_path / "two",
                   "--max-steps", 1, "--batch-size", 2, "--max-length", 32, "--save-every", 0,
                   "--cache-dir", tmp_path / "cache") == 0
    assert not any("masked-LM head" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(("name", "local"), [
    ("bert-base-uncased", False), ("sentence-transformers/all-MiniLM-L6-v2", False), ("BAAI/bge-small-en-v1.5", False),
    ("runs/typo", True),  # runs/ is a folder here
    ("my-bert/", True), ("./model", True), ("../model", True), ("/abs/model", True), ("~/model", True),
    ("a/b/c", True), ("with space", True), ("a--b/c", True), ("a..b", True), ("-x", True), ("a\\b", True),
])
def test_what_looks_local(name, local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert looks_local(name) is local


def test_a_mistyped_local_path_fails_at_once_without_the_network(tmp_path, monkeypatch, capsys):
    """`--model runs/nonexistent` beside a runs/ folder: one line naming it, no hub lookup (before: 14 lines of
    hub retries and 36 s before the error)."""
    lookups = []

    def no_network(*args, **kwargs):
        lookups.append(args)
        raise OSError("the network is not to be used")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "a line of text"}) + "\n")
    for command in (["encode", "--corpus", "corpus.jsonl", "--output", "vectors"],
                    ["pretrain", "--corpus", "corpus.jsonl", "--output", "out"]):
        assert cli(*command, "--model", "runs/nonexistent") == 2
        err = capsys.readouterr().err
        assert err.startswith("retromae: error: --model runs/nonexistent: no such folder;") and err.count("\n") == 1
    assert lookups == []


def test_hub_retries_are_quiet_unless_verbose():
    """huggingface_hub sets its logger's level on first import; a quiet block must still silence its retries."""
    code = ("import logging; from retromae.runtime.console import library_output\n"
            "with library_output(False): print(logging.getLogger('huggingface_hub.utils._http').isEnabledFor(30))\n"
            "with library_output(True): print(logging.getLogger('huggingface_hub.utils._http').isEnabledFor(30))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
