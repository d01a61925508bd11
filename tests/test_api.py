"""The Python API: `import retromae` stays light; pre-train → fine-tune → encode → evaluate without the command line;
an objective trains under a transformers `Trainer` through `ObjectiveModule` and `TextCollator`."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import make_sentences, tiny_beir, tiny_bert_config

import retromae
from retromae.cli import discover_commands


def test_importing_retromae_loads_no_torch():
    code = "import sys, retromae; retromae.__dir__(); print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
    assert {"pretrain", "finetune", "encode", "evaluate", "PretrainConfig", "EvaluateConfig"} <= set(dir(retromae))
    importlib.import_module("retromae.workflows.quickstart")  # the module that runs it leaves the entry point alone
    for command in discover_commands():  # every command's entry point and config (issue 38: index, search, ...)
        name = command.name.replace("-", "_")
        assert callable(getattr(retromae, name)), name
        assert any(public.lower() == name.replace("_", "") + "config" or (name, public) == ("train_reranker",
                   "RerankerConfig") for public in dir(retromae)), name
    with pytest.raises(AttributeError, match="no attribute 'pretrian'"):
        retromae.pretrian  # noqa: B018


def test_pretrain_finetune_encode_evaluate_without_the_command_line(tmp_path, tiny_model_dir, tiny_corpus):
    import retromae.api
    import retromae.finetuning.run  # the modules that run them, imported first: the entry points stay functions
    import retromae.pretraining.run  # noqa: F401

    assert retromae.pretrain is retromae.api.pretrain and retromae.finetune is retromae.api.finetune
    tiny_beir(tmp_path / "beir")
    pretrained = retromae.pretrain(retromae.PretrainConfig(
        model=str(tiny_model_dir), corpus=[str(tiny_corpus)], output=str(tmp_path / "pretrain"), max_steps=3,
        batch_size=4, max_length=32, save_every=0, cache_dir=str(tmp_path / "cache")))
    tuned = retromae.finetune(model=str(pretrained / "encoder"), data=str(tmp_path / "beir"),
                              output=str(tmp_path / "finetune"), max_steps=3, batch_size=4, save_every=0,
                              passage_max_length=64)
    assert len((tuned / "metrics.jsonl").read_text().splitlines()) == 1
    vectors = retromae.encode(model=str(tuned / "encoder"), corpus=tmp_path / "beir" / "corpus.jsonl",
                              output=tmp_path / "vectors")
    assert np.load(vectors / "embeddings.npy").shape == (48, 32)
    scores = retromae.evaluate(model=str(tuned / "encoder"), data=tmp_path / "beir")
    assert 0 <= scores["ndcg@10"] <= 1 and set(scores) >= {"mrr@10", "recall@100"}
    table = retromae.evaluate(retromae.EvaluateConfig(model=str(tuned / "encoder"), data=[tmp_path / "beir"],
                                                      output=tmp_path / "report"))
    assert table["sets"]["beir"]["finetune"]["ndcg@10"] == scores["ndcg@10"]  # finetune/encoder: named finetune
    assert json.loads((tmp_path / "report" / "results.json").read_text())["average"] == table["average"]


def test_an_objective_trains_under_a_transformers_trainer(tmp_path, tiny_tokenizer):
    from transformers import BertForMaskedLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer)))
    objective = retromae.objectives.create_objective("retromae", model, tiny_tokenizer, decoding="enhanced")
    adapted = retromae.ObjectiveModule(objective, seed=3)
    start = {name: tensor.clone() for name, tensor in adapted.state_dict().items()}
    arguments = TrainingArguments(output_dir=str(tmp_path / "trainer"), max_steps=4, per_device_train_batch_size=4,
                                  learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                                  use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=adapted, args=arguments, train_dataset=make_sentences(32),
                      data_collator=retromae.TextCollator(tiny_tokenizer, max_length=32))
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses) and math.isfinite(result.training_loss)
    assert adapted.calls == 4  # one generator per micro-batch
    changed = [name for name, tensor in adapted.state_dict().items() if not torch.equal(tensor, start[name])]
    assert any(name.startswith("objective.decoder") for name in changed)
    assert any("encoder.bert.encoder" in name for name in changed)


def test_text_collator_builds_the_objectives_batch_and_pairs(tiny_tokenizer):
    collate = retromae.TextCollator(tiny_tokenizer, max_length=12)
    batch = collate(["the encoder learns", "a query " * 20])
    assert set(batch) == {"input_ids", "attention_mask", "special_tokens_mask", "word_starts"}
    assert batch["input_ids"].shape == (2, 12) and batch["special_tokens_mask"][:, 0].all()
    assert collate([("first view", "second view")])["input_ids"].shape[0] == 2
    with pytest.raises(TypeError, match="unknown option"):
        retromae.objectives.create_objective("mlm", None, tiny_tokenizer, encoder_mask=0.2)


def test_retrieval_commands_without_the_command_line(tmp_path, tiny_model_dir, capsys):
    """encode → index → search, BM25, mining and init-model through their entry points, as the commands run them;
    they return what they wrote and print nothing (issue 64: the commands print)."""
    tiny_beir(tmp_path / "beir")
    corpus, queries = tmp_path / "beir" / "corpus.jsonl", tmp_path / "beir" / "queries.jsonl"
    model = {"model": str(tiny_model_dir), "pooling": "mean", "normalize": True}
    vectors = retromae.encode(**model, corpus=corpus, output=tmp_path / "docs")
    index = retromae.index(retromae.IndexConfig(embeddings=vectors, output=tmp_path / "index"))
    dense = retromae.search(index=index, queries=queries, output=tmp_path / "dense.trec", top_k=5)
    bm25 = retromae.bm25(data=tmp_path / "beir", output=tmp_path / "bm25.trec", top_k=5)
    for run in (dense, bm25):
        assert retromae.evaluate(run=run, data=[tmp_path / "beir"])["recall@10"] > 0
    mined = retromae.mine(data=tmp_path / "beir", negatives="bm25", output=tmp_path / "mined.jsonl")
    assert all(row["neg"] for row in map(json.loads, mined.read_text().splitlines()))
    initial = retromae.init_model(corpus=[str(corpus)], output=tmp_path / "init", vocab_size=120, hidden_size=64,
                                  layers=1)
    assert (initial / "config.json").is_file()
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_entry_points_are_as_quiet_as_the_cli(tmp_path, tiny_model_dir, tiny_corpus):
    """No transformers load report (the tiny masked LM lacks BertModel's pooler) or bars and no tokenizers blank lines
    from a Python call (an entry point, or `Encoder.load` and `.save`); `library_output(True)` around it shows them,
    as --verbose does. In a fresh process, as a notebook starts (transformers' log handler keeps the stderr it first
    saw)."""
    tiny_beir(tmp_path / "beir")
    encode = (f"retromae.encode(model={str(tiny_model_dir)!r}, corpus={str(tmp_path / 'beir' / 'corpus.jsonl')!r}, "
              "output={!r}, progress=False)")
    code = "\n".join([
        "import sys, retromae",
        "from retromae.runtime.console import library_output",
        encode.format(str(tmp_path / "a")),
        f"retromae.init_model(corpus=[{str(tiny_corpus)!r}], output={str(tmp_path / 'init')!r}, vocab_size=120, "
        "hidden_size=64, layers=1)",
        f"retromae.Encoder.load({str(tiny_model_dir)!r}).save({str(tmp_path / 'saved')!r})",
        "print('VERBOSE', file=sys.stderr)",
        "with library_output(True):",
        "    " + encode.format(str(tmp_path / "b"))])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    quiet, verbose = done.stderr.split("VERBOSE\n")
    assert "LOAD REPORT" not in quiet and "Loading weights" not in quiet
    assert "" not in (done.stdout + quiet).splitlines()  # no blank lines
    assert "LOAD REPORT" in verbose and "Loading weights" in verbose
