"""A backbone family is its adapter module and one entry in the family table (`retromae.backbones.families`): a toy
family registered here, DistilBERT (an architecture no adapter in the package knows), is found by the registry,
trains under an objective, is built by `init-model` with the table's tokenizer kind and length, pre-trains, and is
offered by the options of `init-model`, `quickstart` and `pretrain` without importing torch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_metrics, tiny_pretrain_config
from test_objectives import generator, make_batch, settings
from torch import nn
from transformers import AutoTokenizer, DistilBertConfig, DistilBertForMaskedLM, PretrainedConfig, PreTrainedModel

from retromae.backbones import families
from retromae.backbones.base import BackboneAdapter
from retromae.backbones.families import BackboneFamily
from retromae.backbones.registry import (
    ARCHITECTURES,
    adapter_for,
    architecture_adapter,
    family_adapter,
    supported_families,
)
from retromae.models.tokenizer_training import KINDS
from retromae.objectives import build_objective

SRC = Path(__file__).resolve().parents[1] / "src"


class DistilBertAdapter(BackboneAdapter):
    """DistilBERT: BERT's absolute position table, an MLM head of four modules beside the base model."""

    positions = "absolute"
    boolean_padding_mask = False  # it builds its attention mask from the 2D one

    def head_modules(self, model: PreTrainedModel) -> list[nn.Module]:
        return [model.vocab_transform, model.activation, model.vocab_layer_norm, model.vocab_projector]

    def mlm_head(self, model: PreTrainedModel) -> nn.Module:
        return nn.Sequential(*self.head_modules(model))

    def vocabulary_projection(self, model: PreTrainedModel) -> tuple[nn.Module, nn.Linear]:
        return nn.Sequential(*self.head_modules(model)[:-1]), model.vocab_projector

    def scratch_config(self, architecture: str, vocab_size: int, special_ids: dict[str, int], *, hidden_size: int,
                       layers: int, max_positions: int) -> PretrainedConfig:
        return distilbert_config(vocab_size, hidden_size, layers, max_position_embeddings=max_positions,
                                 pad_token_id=special_ids["pad"])


def distilbert_config(vocab_size: int, hidden_size: int, layers: int, **options) -> DistilBertConfig:
    """A DistilBERT config (heads of 64, FFN 4x the width) that also states its FFN width under BERT's name
    `intermediate_size`: the objectives' decoders read it from the backbone's config (DistilBERT calls it
    `hidden_dim` and maps only the hidden size, heads and layers to BERT's names)."""
    return DistilBertConfig(vocab_size=vocab_size, dim=hidden_size, n_layers=layers, n_heads=hidden_size // 64,
                            hidden_dim=4 * hidden_size, intermediate_size=4 * hidden_size, **options)


# The toy's table entry, as it would stand in `families.FAMILIES`; its adapter is the class above.
TOY = dict(title="DistilBERT", adapter=f"{__name__}:DistilBertAdapter", model_types=("distilbert",),
           architectures={"distilbert": "wordpiece"}, max_positions=256)


@pytest.fixture
def toy_family(monkeypatch) -> BackboneFamily:
    entry = BackboneFamily(**TOY)
    monkeypatch.setitem(families.FAMILIES, "distilbert", entry)
    return entry


def test_every_entry_names_an_adapter_class_a_tokenizer_kind_and_model_types_no_other_entry_reads():
    seen_types: list[str] = []
    for entry in families.FAMILIES.values():
        adapter = family_adapter(entry)
        assert isinstance(adapter, BackboneAdapter) and adapter.entry is entry and adapter.positions
        assert set(entry.architectures.values()) <= set(KINDS), entry.title
        assert entry.max_positions >= 8
        seen_types += entry.model_types
    assert len(seen_types) == len(set(seen_types))
    assert len(families.architecture_names()) == len(set(families.architecture_names()))


def test_the_registry_finds_a_family_from_its_table_entry(toy_family, tiny_tokenizer):
    assert isinstance(architecture_adapter("distilbert"), DistilBertAdapter)
    assert "distilbert" in ARCHITECTURES and list(ARCHITECTURES)[-1] == "distilbert"
    assert ARCHITECTURES["distilbert"].architectures == {"distilbert": "wordpiece"}
    assert "DistilBERT (distilbert)" in supported_families()
    model = DistilBertForMaskedLM(distilbert_config(len(tiny_tokenizer), 64, 1))
    adapter = adapter_for(model)
    assert isinstance(adapter, DistilBertAdapter) and adapter.entry is toy_family and adapter.family == "DistilBERT"
    objective = build_objective("retromae", model, tiny_tokenizer, settings())  # the same model no adapter knew
    losses = objective(make_batch(tiny_tokenizer), generator(0))
    assert math.isfinite(losses["loss"].item()) and losses["decoder"].item() > 0
    losses["loss"].backward()
    assert model.vocab_projector.weight.grad.abs().sum() > 0
    assert model.distilbert.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_an_unregistered_family_is_unknown_to_the_registry():
    assert "distilbert" not in ARCHITECTURES
    with pytest.raises(OSError, match="unknown architecture 'distilbert'; choose from bert, roberta"):
        architecture_adapter("distilbert")


def test_init_model_builds_the_family_with_its_tokenizer_kind_and_length_then_it_pretrains(toy_family, tiny_corpus,
                                                                                         tmp_path):
    from retromae.api import init_model
    from retromae.models.masked_lm import position_limit
    from retromae.pretraining.run import pretrain

    folder = init_model(architecture="distilbert", corpus=[str(tiny_corpus)], vocab_size=150, hidden_size=64,
                        layers=1, output=tmp_path / "init")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "distilbert" and config["vocab_size"] == len(tokenizer)
    assert json.loads(tokenizer.backend_tokenizer.to_str())["model"]["type"] == "WordPiece"
    assert tokenizer.model_max_length == 256 == config["max_position_embeddings"]
    assert position_limit(DistilBertConfig.from_pretrained(folder)) == 256
    run = pretrain(tiny_pretrain_config(folder, tiny_corpus, tmp_path / "run", objective="retromae", max_steps=2))
    losses = [record["loss"] for record in run_metrics(run) if "loss" in record]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert json.loads((run / "encoder" / "config.json").read_text())["model_type"] == "distilbert"


def test_the_options_offer_a_registered_family_without_importing_torch():
    """The entry is in the table before the options are declared, as an entry in families.py is: `init-model`,
    `quickstart` and `pretrain` help list it, and reading them imports no torch (nor the adapter)."""
    script = f"""
import contextlib, io, json, sys
from retromae.backbones import families
families.FAMILIES["distilbert"] = families.BackboneFamily(**{TOY!r})
from retromae.cli import main
texts = {{}}
for command in ("init-model", "quickstart", "pretrain"):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([command, "--help"])
    texts[command] = " ".join(out.getvalue().split())
print(json.dumps({{"help": texts, "torch": "torch" in sys.modules}}))
"""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "1000"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    init_help, quickstart_help = found["help"]["init-model"], found["help"]["quickstart"]
    assert "--architecture {bert,roberta,xlm-roberta,modernbert,deberta-v2,distilbert}" in init_help
    assert "(bert, distilbert: wordpiece;" in init_help and "(bert, distilbert: wordpiece;" in quickstart_help
    assert "longest input (default 512; 8192 for modernbert; 256 for distilbert)" in init_help
    assert "{bert,roberta,xlm-roberta,modernbert,deberta-v2,distilbert}" in quickstart_help
    assert "DeBERTa-v2/v3, DistilBERT)" in found["help"]["pretrain"]
    assert found["torch"] is False
