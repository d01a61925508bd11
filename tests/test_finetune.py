"""Fine-tuning on tiny models: losses by hand, gradient caching, cross-device gathering, batches, mining,
training-file errors, and the finetune / mine / train-reranker / score commands end to end."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import kill_after_checkpoint, make_sentences, tiny_bert_config
from transformers import BertModel

from retromae.cli import main
from retromae.data.batch_sampler import MAX_PASSES_PER_STEP
from retromae.data.training_groups import TrainingExample, TrainingSet, load_training_data, load_training_file
from retromae.finetuning.batches import GroupBatchSampler, GroupCollator
from retromae.finetuning.config import FinetuneConfig
from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.finetuning.plan import covering_length, resolve_steps
from retromae.losses.losses import distillation_kl
from retromae.models.encoder import Encoder, PoolingConfig, pool
from retromae.retrieval.mining import MiningOptions, bm25_rankings, choose_negatives, dense_rankings
from retromae.runtime.errors import DataError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def tiny_beir(tmp_path) -> Path:
    """A BEIR folder: 48 documents; 24 train queries (queries 0 and 1 share document 0), 6 test queries."""
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"title {i}", "text": " ".join(make_sentences(2, seed=i))} for i in range(48)]
    queries = [{"_id": f"q{i}", "text": make_sentences(1, seed=i)[0][:40]} for i in range(30)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    train = ["query-id\tcorpus-id\tscore", "q0\td0\t1", "q1\td0\t1", "q1\td40\t1"]
    train += [f"q{i}\td{i}\t1" for i in range(2, 24)]
    test = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(24, 30)]
    (folder / "qrels" / "train.tsv").write_text("\n".join(train) + "\n")
    (folder / "qrels" / "test.tsv").write_text("\n".join(test) + "\n")
    return folder


def tiny_bert(tokenizer, dropout: float = 0.0, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    config = tiny_bert_config(len(tokenizer))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    return BertModel(config, add_pooling_layer=False)


def tiny_batch(tokenizer, groups: int, group_size: int) -> dict[str, torch.Tensor]:
    texts = make_sentences(groups * (group_size + 1), seed=7)
    collate = GroupCollator(tokenizer, 16, 24)
    resolved = [(texts[i], texts[groups + i * group_size:groups + (i + 1) * group_size], None) for i in range(groups)]
    return collate(resolved)


# ---- losses -------------------------------------------------------------------------------------------------


def test_dual_encoder_loss_matches_hand_computation(tiny_tokenizer):
    batch = tiny_batch(tiny_tokenizer, groups=3, group_size=2)
    model = tiny_bert(tiny_tokenizer).eval()
    pooling = PoolingConfig("cls", normalize=True)
    losses = DualEncoder(model, None, pooling, LossOptions(temperature=0.5, group_size=2))(batch)
    with torch.no_grad():
        q = pool(model(input_ids=batch["query_input_ids"], attention_mask=batch["query_attention_mask"])
                 .last_hidden_state, batch["query_attention_mask"], pooling).tolist()
        p = pool(model(input_ids=batch["passage_input_ids"], attention_mask=batch["passage_attention_mask"])
                 .last_hidden_state, batch["passage_attention_mask"], pooling).tolist()
    expected = 0.0
    for i, query in enumerate(q):
        scores = [sum(a * b for a, b in zip(query, passage, strict=True)) / 0.5 for passage in p]
        expected += -scores[2 * i] + math.log(sum(math.exp(s) for s in scores))
    assert losses["loss"].item() == pytest.approx(expected / 3, rel=1e-5)
    assert losses["contrastive"].item() == pytest.approx(expected / 3, rel=1e-5)


def test_distillation_kl_matches_hand_computation():
    student = [[2.0, 1.0, -1.0], [0.5, 0.0, 3.0]]
    teacher = [[4.0, 0.0, float("-inf")], [1.0, 2.0, 1.0]]
    temperature = 2.0
    expected = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        s_norm = sum(math.exp(s / temperature) for s in s_row)
        t_norm = sum(math.exp(t / temperature) for t in t_row)
        for s, t in zip(s_row, t_row, strict=True):
            pt, ps = math.exp(t / temperature) / t_norm, math.exp(s / temperature) / s_norm
            expected += pt * math.log(pt / ps) if pt > 0 else 0.0
    student_tensor = torch.tensor(student, requires_grad=True)
    loss = distillation_kl(student_tensor, torch.tensor(teacher), temperature)
    assert loss.item() == pytest.approx(expected / 2, rel=1e-6)
    loss.backward()
    assert torch.isfinite(student_tensor.grad).all()
    assert distillation_kl(torch.tensor(teacher[1:]), torch.tensor(teacher[1:])).item() == pytest.approx(0, abs=1e-7)


# ---- gradient caching ---------------------------------------------------------------------------------------


def _gradients(model: DualEncoder, batch: dict[str, torch.Tensor], seed: int = 3) -> tuple[float, dict]:
    torch.manual_seed(seed)
    loss = model(batch)["loss"]
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


@pytest.mark.parametrize("untie", [False, True])
def test_gradient_caching_gives_the_plain_gradients(tiny_tokenizer, untie):
    batch = tiny_batch(tiny_tokenizer, groups=5, group_size=3)
    towers = (tiny_bert(tiny_tokenizer), tiny_bert(tiny_tokenizer, seed=1) if untie else None)
    pooling = PoolingConfig("mean", normalize=True)
    plain = DualEncoder(*towers, pooling, LossOptions(temperature=0.1, group_size=3)).train()
    cached = DualEncoder(*towers, pooling, LossOptions(temperature=0.1, group_size=3, chunk_size=2)).train()
    loss, expected = _gradients(plain, batch)
    cached_loss, found = _gradients(cached, batch)
    assert cached_loss == pytest.approx(loss, rel=1e-6)
    assert expected.keys() == found.keys() and len(found) == len(list(plain.parameters()))
    for name, grad in expected.items():  # atol 1e-5: token_type_embeddings' gradient sums every token, in another
        torch.testing.assert_close(found[name], grad, rtol=1e-4, atol=1e-5, msg=name)  # order per chunk and thread


def test_gradient_caching_replays_dropout(tiny_tokenizer):
    """With one chunk per tower the cached path draws the same dropout masks and re-encodes under them."""
    batch = tiny_batch(tiny_tokenizer, groups=4, group_size=2)
    bert = tiny_bert(tiny_tokenizer, dropout=0.3)
    pooling = PoolingConfig("cls", normalize=True)
    plain = DualEncoder(bert, None, pooling, LossOptions(temperature=0.1, group_size=2)).train()
    cached = DualEncoder(bert, None, pooling, LossOptions(temperature=0.1, group_size=2, chunk_size=64)).train()
    loss, expected = _gradients(plain, batch)
    cached_loss, found = _gradients(cached, batch)
    assert cached_loss == pytest.approx(loss, rel=1e-6)
    for name, grad in expected.items():
        torch.testing.assert_close(found[name], grad, rtol=1e-4, atol=1e-6, msg=name)


# ---- cross-device negatives ---------------------------------------------------------------------------------

DDP_SCRIPT = r'''
import json, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import BertModel
from retromae.models.encoder import PoolingConfig
from retromae.finetuning.config import FinetuneConfig
from retromae.finetuning.model import DualEncoder, LossOptions
from retromae.finetuning.plan import covering_length, resolve_steps

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
batch = torch.load(sys.argv[1])
groups, group_size = batch["query_input_ids"].shape[0], int(sys.argv[3])
per = groups // world
rows = {"query": slice(rank * per, (rank + 1) * per),
        "passage": slice(rank * per * group_size, (rank + 1) * per * group_size)}
local = {key: value[rows[key.split("_")[0]]] for key, value in batch.items()}
result = {}
for chunk in (0, 2):
    bert = BertModel.from_pretrained(sys.argv[2], add_pooling_layer=False)
    model = DistributedDataParallel(DualEncoder(bert, None, PoolingConfig("mean", True),
                                                LossOptions(temperature=0.1, group_size=group_size, chunk_size=chunk)))
    loss = model(local)["loss"]
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    result[chunk] = {"loss": total.item() / world,
                     "grads": {n: p.grad.flatten()[:50].tolist() for n, p in model.module.named_parameters()}}
    del model  # release this DDP reducer before the next one is built
    dist.barrier()
if rank == 0:
    json.dump(result, open(sys.argv[4], "w"))
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.slow  # 6 s: two processes; test_losses' two-process gather stays in the default run
def test_cross_device_negatives_match_one_process_with_the_whole_batch(tiny_tokenizer, tmp_path):
    batch = tiny_batch(tiny_tokenizer, groups=4, group_size=2)
    torch.save(batch, tmp_path / "batch.pt")
    tiny_bert(tiny_tokenizer).save_pretrained(tmp_path / "bert")
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29541",
               str(tmp_path / "ddp.py"), str(tmp_path / "batch.pt"), str(tmp_path / "bert"), "2",
               str(tmp_path / "out.json")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    distributed = json.loads((tmp_path / "out.json").read_text())
    bert = BertModel.from_pretrained(tmp_path / "bert", add_pooling_layer=False)
    whole = DualEncoder(bert, None, PoolingConfig("mean", True), LossOptions(temperature=0.1, group_size=2))
    loss, grads = _gradients(whole, batch)
    for chunk in ("0", "2"):
        assert distributed[chunk]["loss"] == pytest.approx(loss, rel=1e-5)
        for name, grad in grads.items():
            torch.testing.assert_close(torch.tensor(distributed[chunk]["grads"][name]), grad.flatten()[:50],
                                       rtol=1e-3, atol=1e-6, msg=name)


# ---- batches ------------------------------------------------------------------------------------------------


def _set_with_shared_passages() -> TrainingSet:
    """30 queries over 40 passages; positives overlap (query i: i // 2 and 20 + i % 7), negatives overlap too."""
    examples = [TrainingExample(f"query {i}", [i // 2, 20 + i % 7], [(i + k) % 40 for k in range(1, 9)])
                for i in range(30)]
    for example in examples:
        example.negatives = [row for row in example.negatives if row not in example.positives]
    return TrainingSet([f"passage {row}" for row in range(40)], [str(row) for row in range(40)], examples, "toy")


def test_batches_never_hold_a_passage_twice_nor_another_querys_positive():
    data = _set_with_shared_passages()
    sampler = GroupBatchSampler(data, batch_size=4, group_size=3, seed=0)
    stream = iter(sampler)
    for _ in range(3 * sampler.batches_per_epoch):
        groups = next(stream)
        passages = [row for group in groups for row in group.passages]
        assert len(passages) == len(set(passages)) == 12
        positives = set().union(*(data.examples[g.example].positives for g in groups))
        for group in groups:
            assert group.passages[0] in data.examples[group.example].positives
            assert not set(group.passages[1:]) & positives


def test_sampler_resumes_anywhere_and_splits_by_process():
    data = _set_with_shared_passages()
    whole = iter(GroupBatchSampler(data, batch_size=4, group_size=2, seed=5))
    batches = [next(whole) for _ in range(9)]
    resumed = iter(GroupBatchSampler(data, batch_size=4, group_size=2, seed=5, start=6))
    assert [next(resumed) for _ in range(3)] == batches[6:]
    halves = [iter(GroupBatchSampler(data, batch_size=2, group_size=2, seed=5, rank=r, world_size=2)) for r in (0, 1)]
    for batch in batches[:4]:
        assert next(halves[0]) + next(halves[1]) == batch


def test_an_optimiser_step_of_group_batches_may_wrap_round_the_data_but_not_without_end():
    """Round six: finetune's sampler weighs --gradient-accumulation-steps against its batches as the loop's does."""
    data = _set_with_shared_passages()
    batches = GroupBatchSampler(data, batch_size=4, group_size=2, seed=0).batches_per_epoch
    limit = MAX_PASSES_PER_STEP * batches
    GroupBatchSampler(data, batch_size=4, group_size=2, seed=0, accumulation=limit)
    with pytest.raises(DataError, match=rf"^toy: its 30 queries make {batches} global batches; "
                                        rf"--gradient-accumulation-steps {limit + 1} reads"):
        GroupBatchSampler(data, batch_size=4, group_size=2, seed=0, accumulation=limit + 1)


# ---- data and mining ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "message"), [
    ({"pos": ["p"], "neg": []}, "missing field 'query'"),
    ({"query": "q", "neg": ["n"]}, "missing field 'pos'"),
    ({"query": "q", "pos": [], "neg": ["n"]}, "'pos' is empty"),
    ({"query": "q", "pos": "p"}, "'pos' must be a list of strings"),
    ({"query": "q", "pos": ["p"], "neg": ["n"], "pos_scores": [1.0], "neg_scores": []}, "'neg_scores' holds 0"),
])
def test_training_file_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "train.jsonl"
    good = json.dumps({"query": "fine", "pos": ["a"], "neg": ["b"]})
    path.write_text(f"{good}\n{good}\n{json.dumps(line)}\n")
    with pytest.raises(DataError, match=rf"train.jsonl:3: .*{message}"):
        load_training_file(path)


def test_a_qrels_file_given_as_data_is_named_with_what_data_takes(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """Issue 38: `finetune --data qrels/train.tsv` said only "malformed JSON"; the error now says what the file looks
    like, what --data takes, and the BEIR folder and split to give instead. A line of other bad JSON gets the
    format too."""
    qrels = tiny_beir / "qrels" / "train.tsv"
    output = tmp_path / "ft"
    assert main(["finetune", "--model", str(tiny_model_dir), "--data", str(qrels), "--output", str(output)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"retromae: error: {qrels}:1: malformed JSON") and "\n" not in error
    assert "3 tab-separated columns, as a qrels or MS MARCO .tsv file does" in error
    assert '--data takes a training file of JSON lines, one query a line ({"query": str, "pos": [str, ...]' in error
    assert error.endswith(f"or a BEIR / MS MARCO folder and --split (here: --data {tiny_beir} --split train)")
    broken = tmp_path / "train.jsonl"
    broken.write_text('["query", "passage"]\n')
    with pytest.raises(DataError, match=r"train.jsonl:1: expected a JSON object; --data takes a training file"):
        load_training_file(broken)


def test_training_file_shares_passages_by_text(tmp_path):
    path = tmp_path / "train.jsonl"
    records = [{"query": "q1", "pos": ["a"], "neg": ["b", "c", "b"], "pos_scores": [3], "neg_scores": [1, 0, 1]},
               {"query": "q2", "pos": ["b"], "neg": ["c"], "pos_scores": [2], "neg_scores": [0.5]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = load_training_file(path)
    assert data.texts == ["a", "b", "c"]
    assert data.examples[0].negatives == [1, 2] and data.examples[1].positives == [1]
    assert data.has_scores and data.examples[1].scores == {1: 2.0, 2: 0.5}


def test_mining_never_returns_a_positive_or_the_query_itself(tiny_beir, tiny_model_dir):
    data = load_training_data(tiny_beir, "train")
    data.texts[5] = data.examples[3].query  # a passage that is query 3's own text
    options = MiningOptions(rank_start=1, rank_end=30, negatives_per_query=10)
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    bm25 = bm25_rankings(data, 30, show_progress=False)
    assert sum(example.positives[0] in ranking[:3] for example, ranking in zip(data.examples, bm25, strict=True)) > 20
    for rankings in (bm25, dense_rankings(encoder, data, 30, show_progress=False)):
        mined = choose_negatives(data, rankings, options, seed=0)
        for n, (example, negatives, ranking) in enumerate(zip(data.examples, mined, rankings, strict=True)):
            window = [row for row in ranking if row not in example.positives and not (n == 3 and row == 5)]
            assert not set(negatives) & set(example.positives)
            assert set(negatives) <= set(window) and len(negatives) == min(10, len(window))
            assert negatives == sorted(negatives, key=ranking.index)


# ---- commands end to end ------------------------------------------------------------------------------------


def _finetune_args(model, data, output, *extra) -> list[str]:
    return ["finetune", "--model", str(model), "--data", str(data), "--output", str(output), "--batch-size", "4",
            "--query-max-length", "16", "--passage-max-length", "32", "--log-every", "1", "--learning-rate", "1e-3",
            "--warmup-ratio", "0", *extra]


def _metrics(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_finetune_from_a_beir_folder_with_bm25_negatives_and_evaluate(tiny_beir, tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "run"
    assert main(_finetune_args(tiny_model_dir, tiny_beir, output, "--negatives", "bm25", "--group-size", "3",
                               "--max-steps", "4", "--pooling", "mean", "--normalize")) == 0
    assert [m["step"] for m in _metrics(output)] == [1, 2, 3, 4]
    assert all(math.isfinite(m["contrastive"]) for m in _metrics(output))
    assert json.loads((output / "encoder" / "retromae_encoder.json").read_text())["pooling"] == "mean"
    assert (output / "negatives" / "step-0000000.json").is_file()
    for folder in ("encoder", "sentence-transformer"):  # issue 38: the card named no base model and no training
        card = (output / folder / "README.md").read_text()
        assert f"- **Base model:** {tiny_model_dir}\n" in card and "Unknown" not in card
        assert "- **Training:** dense-retrieval fine-tuning with bm25 negatives (4 steps)\n" in card
        assert f"- **Training data:** {tiny_beir} (split train)\n" in card and "- **Steps:** 4 steps of " in card
        assert "mean pooling, normalised" in card and "scored by cosine" in card
    printed = capsys.readouterr().out
    assert f"negatives             {output / 'negatives'}" in printed.split("wrote:")[1]
    assert main(["evaluate", "--model", str(output / "sentence-transformer"), "--data", str(tiny_beir),
                 "--output", str(tmp_path / "eval.json")]) == 0
    assert 0 <= json.loads((tmp_path / "eval.json").read_text())["ndcg@10"] <= 1
    again = tmp_path / "again"  # a fine-tuning (or pre-training) output folder is a valid starting model
    assert main(_finetune_args(output, tiny_beir, again, "--max-steps", "1", "--untie")) == 0
    assert (again / "query-encoder" / "config.json").is_file()


def test_finetune_defaults_scale_to_the_data_and_the_plan_is_printed(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """With no --epochs, --max-steps, --batch-size or max lengths: 2 epochs, batches of half the 24 train queries
    (fewer than 32), lengths covering the data rounded to 16, and the plan with its expected duration printed first."""
    output = tmp_path / "run"
    assert main(["finetune", "--model", str(tiny_model_dir), "--data", str(tiny_beir), "--output", str(output),
                 "--save-every", "0"]) == 0
    config = json.loads((output / "config.json").read_text())
    data = load_training_data(tiny_beir, "train")
    steps = 2 * GroupBatchSampler(data, 12, 1, seed=42).batches_per_epoch
    assert (config["epochs"], config["batch_size"], config["max_steps"]) == (2.0, 12, steps)
    tokenizer = Encoder.load(tiny_model_dir).tokenizer
    lengths = sorted(len(ids) for ids in tokenizer(data.texts)["input_ids"])  # 48 passages: the 46th covers 95%
    assert config["passage_max_length"] % 16 == 0 and lengths[45] <= config["passage_max_length"] < lengths[45] + 16
    assert config["query_max_length"] % 16 == 0 and config["query_max_length"] <= 64
    printed = capsys.readouterr().out
    assert f"{steps} steps (2 epochs of 24 queries) of 12 queries x 1 passage" in printed
    assert re.search(r"about [\d.]+ s \([\d.e-]+ s a step, from a timed forward pass over the first batch\)", printed)


def test_covering_length_is_the_95th_percentile_rounded_up_and_capped(tiny_tokenizer):
    texts = [" ".join(["model"] * n) for n in range(1, 101)]  # 1..100 words, each one token, plus [CLS] and [SEP]
    assert covering_length(tiny_tokenizer, texts, cap=256, seed=0) == 112  # 95 + 2 tokens, rounded up to 16
    assert covering_length(tiny_tokenizer, texts, cap=64, seed=0) == 64


@pytest.mark.parametrize(("epochs", "max_steps", "expected"), [(None, None, 14), (1.5, None, 11), (None, 5, 5),
                                                              (1.0, 5, 7)])
def test_steps_come_from_epochs_unless_only_max_steps_is_given(epochs, max_steps, expected):
    config = FinetuneConfig(model="m", data="d", output="o", epochs=epochs, max_steps=max_steps)
    resolve_steps(config, batches_per_epoch=7)
    assert config.max_steps == expected


def test_ance_refresh_resumes_exactly(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    args = ["--negatives", "model", "--group-size", "2", "--refresh-negatives-every", "2", "--save-every", "3",
            "--rank-start", "1", "--rank-end", "20", "--chunk-size", "3", "--max-steps", "6"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(_finetune_args(tiny_model_dir, tiny_beir, straight, *args)) == 0
    kill_after_checkpoint(monkeypatch, 3, lambda: main(_finetune_args(tiny_model_dir, tiny_beir, resumed, *args)))
    assert main(_finetune_args(tiny_model_dir, tiny_beir, resumed, "--resume", *args)) == 0
    assert [m["loss"] for m in _metrics(resumed)] == pytest.approx([m["loss"] for m in _metrics(straight)], rel=1e-5)
    negatives = [json.loads((straight / "negatives" / f"step-{s:07d}.json").read_text()) for s in (0, 2, 4)]
    assert negatives[0] != negatives[1] != negatives[2]
    assert json.loads((resumed / "negatives" / "step-0000004.json").read_text()) == negatives[2]


def test_mine_train_reranker_score_and_distill(tiny_beir, tiny_model_dir, tmp_path):
    mined = tmp_path / "mined.jsonl"
    assert main(["mine", "--model", str(tiny_model_dir), "--data", str(tiny_beir), "--output", str(mined),
                 "--rank-start", "1", "--rank-end", "20", "--negatives-per-query", "5"]) == 0
    records = [json.loads(line) for line in mined.read_text().splitlines()]
    assert len(records) == 24 and all(len(r["neg"]) == 5 and not set(r["neg"]) & set(r["pos"]) for r in records)
    reranker = tmp_path / "reranker"
    assert main(["train-reranker", "--model", str(tiny_model_dir), "--data", str(mined), "--output", str(reranker),
                 "--max-steps", "2", "--batch-size", "2", "--group-size", "3", "--max-length", "48",
                 "--head-learning-rate", "1e-3", "--log-every", "1"]) == 0
    assert _metrics(reranker)[0]["head_lr"] > _metrics(reranker)[0]["lr"]  # the new classifier has its own rate
    scored = tmp_path / "scored.jsonl"
    assert main(["score", "--model", str(reranker / "reranker"), "--data", str(mined), "--output", str(scored),
                 "--max-length", "48"]) == 0
    scored_records = [json.loads(line) for line in scored.read_text().splitlines()]
    assert all(len(r["pos_scores"]) == len(r["pos"]) and len(r["neg_scores"]) == 5 for r in scored_records)
    assert scored_records[0]["query_id"] == records[0]["query_id"]
    output = tmp_path / "distilled"
    assert main(_finetune_args(tiny_model_dir, scored, output, "--distill", "--group-size", "4",
                               "--max-steps", "2")) == 0
    assert all(math.isfinite(m["distill"]) and m["distill"] >= 0 for m in _metrics(output))


def test_finetune_errors_are_one_line(tiny_beir, tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"query": "q", "pos": []}) + "\n")
    assert main(_finetune_args(tiny_model_dir, path, tmp_path / "out", "--max-steps", "1")) == 2
    assert "bad.jsonl:1: 'pos' is empty" in capsys.readouterr().err
    assert main(_finetune_args(tiny_model_dir, tiny_beir, tmp_path / "out", "--distill")) == 2
    assert "--distill" in capsys.readouterr().err


# ---- finding unused parameters --------------------------------------------------------------------------------


def saved_activation_bytes(run) -> int:
    """The bytes of every tensor autograd saves for the backward pass while `run()` builds its graph: the
    activation memory of a pass, measured on any device."""
    saved = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(saved)


def test_finding_unused_parameters_costs_the_same_memory_for_any_batch(tiny_tokenizer):
    """Gradient caching exists for batches too large to encode at once: finding the pooler unused must not
    encode the whole first batch (it ran out of memory before step 1)."""
    from retromae.finetuning.model import freeze_unused_parameters

    small = tiny_batch(tiny_tokenizer, groups=2, group_size=2)
    costs, frozen = [], []
    for copies in (1, 16):  # 2 and 32 queries, of the same lengths
        torch.manual_seed(0)
        model = DualEncoder(BertModel(tiny_bert_config(len(tiny_tokenizer))), None, PoolingConfig("cls", True),
                            LossOptions(temperature=0.1, group_size=2, chunk_size=2))
        batch = {key: value.repeat(copies, 1) for key, value in small.items()}
        costs.append(saved_activation_bytes(lambda m=model, b=batch: frozen.append(freeze_unused_parameters(m, b))))
    assert costs[0] == costs[1] > 0
    assert frozen[0] == frozen[1] and frozen[0] and all(".pooler." in name for name in frozen[0])
