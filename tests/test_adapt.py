"""`retromae adapt`: the base's pooling and similarity kept, the guard, `--resume`, and the inputs it refuses."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from conftest import WORDS, kill_after_checkpoint
from safetensors.torch import load_file

from retromae.adapt.config import AdaptConfig
from retromae.adapt.data import MIN_HELD_OUT, pseudo_query, split_corpus
from retromae.adapt.guard import Candidate, averaged
from retromae.adapt.run import adapt, pseudo_query_caution
from retromae.config import ConfigError
from retromae.data.corpus import Document
from retromae.errors import DataError


def topical_corpus(path: Path, count: int = 220, seed: int = 0) -> Path:
    """`count` documents of three sentences each, every document drawing its words from five of its own: a held-out
    sentence shares its document's words, so even a random encoder finds some documents from their sentences."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        topic = rng.sample(WORDS, 5)
        sentences = [" ".join(rng.choice(topic) for _ in range(rng.randint(6, 10))) + "." for _ in range(3)]
        lines.append(json.dumps({"id": str(i), "text": " ".join(sentences)}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def declared_base(tmp_path, tiny_model_dir) -> Path:
    """The tiny model with our metadata declaring mean pooling and normalised vectors (cosine)."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    return base


def tiny_adapt(base: Path, corpus: Path, output: Path, **overrides) -> AdaptConfig:
    values = dict(model=str(base), corpus=[str(corpus)], output=str(output), max_steps=4, batch_size=4,
                  max_length=32, checkpoints=2, validation_queries=20, validation_documents=80, log_every=1,
                  learning_rate=1e-3, cache_dir=str(output.parent / "cache"))
    return AdaptConfig(**{**values, **overrides})


def base_state(base: Path) -> dict[str, torch.Tensor]:
    return {name.removeprefix("bert."): tensor for name, tensor in load_file(str(base / "model.safetensors")).items()
            if name.startswith("bert.")}


def test_pooling_and_similarity_come_from_the_base(tmp_path, declared_base):
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out"))
    for folder in ("encoder", "training/encoder"):  # the winner, and the training stage's last step
        exported = json.loads((output / folder / "retromae_encoder.json").read_text())
        assert (exported["pooling"], exported["normalize"]) == ("mean", True)
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["pooling"], stage["normalize"]) == ("cropping", "mean", True)
    assert stage["freeze_encoder_steps"] == 0 and stage["save_every"] == 2  # cropping has no fresh head to warm
    checkpoints = sorted(path.name for path in (output / "training" / "checkpoints").iterdir())
    assert checkpoints == ["step-0000004"]  # the guard weighs the last one only, so the earlier one is not kept
    modules = json.loads((output / "sentence-transformer" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    guard = json.loads((output / "guard.json").read_text())
    assert [c["name"] for c in guard["candidates"]] == ["base", "step 4, averaged with the base at 0.5"]
    assert all(0 <= c["ndcg@10"] <= 1 for c in guard["candidates"])
    assert guard["chosen"] == max(guard["candidates"], key=lambda c: c["ndcg@10"])["name"]


def test_a_harmful_run_exports_the_base_unchanged_and_says_so(tmp_path, declared_base, capfd):
    # A learning rate of 50 without clipping wrecks the encoder at its first step; no average is offered.
    config = tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", learning_rate=50.0,
                        head_learning_rate=50.0, max_grad_norm=0.0, warmup_ratio=0.0, mix=[1.0])
    output = adapt(config)
    guard = json.loads((output / "guard.json").read_text())
    scores = {c["name"]: c["ndcg@10"] for c in guard["candidates"]}
    assert guard["chosen"] == "base" and max(scores.values()) == scores["base"]
    assert "no candidate beat the base" in capfd.readouterr().err
    exported = load_file(str(output / "encoder" / "model.safetensors"))
    for name, tensor in base_state(declared_base).items():
        torch.testing.assert_close(exported[name], tensor, rtol=0, atol=0)


def test_resume_continues_the_same_trajectory(tmp_path, declared_base, monkeypatch):
    corpus = topical_corpus(tmp_path / "c.jsonl")
    whole = adapt(tiny_adapt(declared_base, corpus, tmp_path / "whole"))
    kill_after_checkpoint(monkeypatch, 2, lambda: adapt(tiny_adapt(declared_base, corpus, tmp_path / "cut")))
    resumed = adapt(tiny_adapt(declared_base, corpus, tmp_path / "cut", resume=True))
    first, second = (json.loads((run / "guard.json").read_text()) for run in (whole, resumed))
    assert first["candidates"] == second["candidates"]
    weights = [load_file(str(run / "encoder" / "model.safetensors")) for run in (whole, resumed)]
    for name, tensor in weights[0].items():  # the tiny masked LM has no pooler: AutoModel draws one, unused
        if not name.startswith("pooler."):
            torch.testing.assert_close(weights[1][name], tensor)


def test_adapting_then_fine_tuning_in_one_command(tmp_path, declared_base):
    from conftest import tiny_beir

    tiny_beir(tmp_path / "beir")
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", mix=[1.0],
                              train=str(tmp_path / "beir")))
    tuned = json.loads((output / "finetuned" / "encoder" / "retromae_encoder.json").read_text())
    assert (tuned["pooling"], tuned["normalize"]) == ("mean", True)  # the adapted encoder's, hence the base's
    assert 0 <= json.loads((output / "guard.json").read_text())["finetuned"] <= 1


def test_the_command_with_labelled_validation_trains_on_the_whole_corpus(tmp_path, declared_base, capsys):
    from conftest import tiny_beir

    from retromae.cli import main

    tiny_beir(tmp_path / "beir")
    corpus = topical_corpus(tmp_path / "c.jsonl")
    code = main(["adapt", "--model", str(declared_base), "--corpus", str(corpus), "--output", str(tmp_path / "out"),
                 "--validation", str(tmp_path / "beir"), "--max-steps", "2", "--checkpoints", "1", "--mix", "1",
                 "--batch-size", "4", "--max-length", "32", "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    captured = capsys.readouterr()
    assert "validation ndcg@10:" in captured.err and "wrote" in captured.out
    guard = json.loads((tmp_path / "out" / "guard.json").read_text())
    assert guard["validation"] == str(tmp_path / "beir") and len(guard["candidates"]) == 2
    assert len((tmp_path / "out" / "data" / "train.jsonl").read_text().splitlines()) == 220  # nothing held out
    assert not (tmp_path / "out" / "validation").exists()


def test_a_base_without_pooling_is_one_error_naming_the_option(tmp_path, tiny_model_dir):
    corpus = topical_corpus(tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match=r"declares no pooling.*modules\.json.*--pooling cls or --pooling mean"):
        adapt(tiny_adapt(tiny_model_dir, corpus, tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_corpus_too_small_for_validation_names_the_counts(tmp_path, declared_base):
    corpus = topical_corpus(tmp_path / "c.jsonl", count=60)
    with pytest.raises(DataError, match=rf"too small for a validation split: 60 documents.*at most 6.*{MIN_HELD_OUT}"):
        adapt(tiny_adapt(declared_base, corpus, tmp_path / "out"))


def test_a_corpus_in_another_language_names_the_unknown_share(tmp_path, declared_base):
    corpus = tmp_path / "greek.jsonl"
    lines = [json.dumps({"id": str(i), "text": "Το σύστημα ανάκτησης βρίσκει έγγραφα. Ένα δεύτερο κείμενο εδώ."})
             for i in range(220)]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"reads \d+% of its tokens as \[UNK\]"):
        adapt(tiny_adapt(declared_base, corpus, tmp_path / "out"))


def test_pseudo_queries_leave_their_sentence_out_of_the_document():
    documents = [Document(str(i), f"first sentence of doc {i} here. second one of doc {i} too.") for i in range(300)]
    split = split_corpus(documents, held_out=25, seed=3, where="corpus")
    assert len(split.queries) == 25 and len(split.training) == 275
    for n in range(25):
        query, rest = split.queries[f"q{n}"], split.documents[f"d{n}"]
        assert query not in rest and len(rest.split()) >= 4
    assert pseudo_query("one sentence only, no second", __import__("numpy").random.default_rng(0)) is None


def test_cropping_scores_crops_by_cosine_of_the_bases_pooling(tiny_tokenizer):
    from conftest import tiny_bert_config
    from transformers import BertForMaskedLM

    from retromae.encoder import PoolingConfig, pool
    from retromae.objectives import create_objective
    from retromae.objectives.contrastive import contrastive_loss

    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer))).eval()
    objective = create_objective("cropping", model, tiny_tokenizer).eval()
    objective.pooling = "mean"
    ids = torch.randint(5, 100, (4, 7))
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 6 + [0], [1] * 7])
    losses = objective({"input_ids": ids, "attention_mask": mask}, torch.Generator())
    hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    expected = contrastive_loss(pool(hidden, mask, PoolingConfig("mean", True)), 0.05)
    torch.testing.assert_close(losses["loss"], expected)


def test_the_defaults_are_the_recipe_measured_on_scifact():
    config = AdaptConfig(model="m", corpus=["c.jsonl"], output="o")
    assert (config.objective, config.batch_size, config.learning_rate, config.passes) == ("cropping", 64, 3e-5, 1.0)
    assert (config.candidates, config.mix) == ("last", [0.5])  # the last checkpoint, averaged with the base


def test_with_candidates_all_the_guard_scores_every_checkpoint_at_every_weight(tmp_path, declared_base):
    output = adapt(tiny_adapt(declared_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out",
                              objective="tsdae", candidates="all", mix=[1.0, 0.5]))
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["freeze_encoder_steps"]) == ("tsdae", 0)  # 10% of 4 steps: no warm-up
    guard = json.loads((output / "guard.json").read_text())
    assert [c["name"] for c in guard["candidates"]] == ["base", "step 2", "step 2, averaged with the base at 0.5",
                                                        "step 4", "step 4, averaged with the base at 0.5"]


def test_a_win_on_pseudo_queries_by_an_objective_trained_on_document_pieces_is_flagged(tmp_path):
    def caution(objective: str, step: int = 10, validation: str | None = None) -> str:
        config = AdaptConfig(model="m", corpus=["c.jsonl"], output=str(tmp_path), objective=objective,
                             validation=validation)
        return pseudo_query_caution(config, Candidate(step=step, weight=1.0, score=0.8))

    assert "--validation" in caution("cropping") and "--validation" in caution("retromae+contrastive")
    assert caution("tsdae") == caution("retromae") == ""  # blocks: not the pseudo-queries' kind of pair
    assert caution("cropping", step=0) == ""  # the base kept: nothing to doubt
    assert caution("cropping", validation=str(tmp_path)) == ""  # the user's own queries


def test_averaging_with_the_base_is_linear_and_keeps_integer_buffers():
    base = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([0, 1])}
    adapted = {"w": torch.tensor([4.0, 4.0]), "ids": torch.tensor([5, 5])}
    mixed = averaged(adapted, base, 0.25)
    torch.testing.assert_close(mixed["w"], torch.tensor([1.0, 2.5]))
    assert torch.equal(mixed["ids"], base["ids"])


@pytest.fixture()
def headless_base(tmp_path, tiny_tokenizer) -> Path:
    """A tiny encoder saved without an MLM head (as a sentence-transformers model ships), declaring mean pooling and
    normalised vectors."""
    from conftest import tiny_bert_config
    from transformers import BertModel

    base = tmp_path / "headless"
    torch.manual_seed(0)
    BertModel(tiny_bert_config(len(tiny_tokenizer)), add_pooling_layer=False).save_pretrained(base)
    tiny_tokenizer.save_pretrained(base)
    (base / "retromae_encoder.json").write_text(json.dumps({"pooling": "mean", "normalize": True}))
    return base


@pytest.mark.parametrize("objective,decoding", [("retromae", None), ("retromae", "basic"),
                                                ("retromae+contrastive", None)])
def test_adapting_with_retromae_decodes_from_the_bases_pooling_after_warming_the_fresh_heads(
        tmp_path, headless_base, objective, decoding):
    output = adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out",
                              objective=objective, decoding=decoding, head_warmup=0.5, mix=[1.0],
                              candidates="all"))
    stage = json.loads((output / "training" / "config.json").read_text())
    assert (stage["objective"], stage["pooling"], stage["normalize"]) == (objective, "mean", True)
    assert stage["decoding"] == decoding  # unless given, None: RetroMAE's own default (enhanced)
    assert stage["freeze_encoder_steps"] == 2 and stage["save_every"] == 2  # half of 4 steps warms the heads
    head = load_file(str(output / "training" / "pretrain_head.safetensors"))
    assert any(name.startswith("decoder.0.") for name in head)  # RetroMAE's fresh decoder ...
    assert any(name.startswith("encoder.cls.predictions.transform.") for name in head)  # ... and the fresh MLM head
    base = load_file(str(headless_base / "model.safetensors"))
    warmed = load_file(str(output / "training" / "checkpoints" / "step-0000002" / "model.safetensors"))
    for name, tensor in base.items():  # after the warm-up, the encoder has not moved
        torch.testing.assert_close(warmed[f"encoder.bert.{name}"], tensor, rtol=0, atol=0)
    guard = json.loads((output / "guard.json").read_text())
    scores = {c["name"]: c["ndcg@10"] for c in guard["candidates"]}
    assert list(scores) == ["base", "step 2", "step 4"] and scores["step 2"] == scores["base"]
    assert guard["chosen"] == max(guard["candidates"], key=lambda c: c["ndcg@10"])["name"]
    for folder in ("encoder", "training/encoder"):  # the winner, and the training stage's last step
        exported = json.loads((output / folder / "retromae_encoder.json").read_text())
        assert (exported["pooling"], exported["normalize"]) == ("mean", True)
    modules = json.loads((output / "sentence-transformer" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]


def test_decoding_is_an_option_of_the_retromae_objectives_only(tmp_path, declared_base):
    with pytest.raises(ConfigError, match="decoding.*only with --objective retromae or retromae\\+contrastive"):
        tiny_adapt(declared_base, tmp_path / "c.jsonl", tmp_path / "out", decoding="basic")


def test_no_note_of_a_missing_mlm_head_for_an_objective_that_never_uses_one(tmp_path, headless_base, caplog):
    adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "out", max_steps=2))
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("retromae")]
    assert not [note for note in notes if "masked-LM head" in note]  # cropping trains no MLM head
    adapt(tiny_adapt(headless_base, topical_corpus(tmp_path / "c.jsonl"), tmp_path / "tsdae", max_steps=2,
                     objective="tsdae"))
    notes = [record.getMessage() for record in caplog.records if record.name.startswith("retromae")]
    assert [note for note in notes if "has no masked-LM head" in note]  # tsdae trains a fresh one: said once
