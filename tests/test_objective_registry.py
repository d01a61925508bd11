"""Adding an objective is its class, its options and one registration: a toy objective, defined here, shows in
`pretrain --help`, trains, resumes, exports, continues with --init-from and is described in a report; config files
nest an objective's options under its name; every objective says what it is on its class."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

import pytest
from conftest import run_metrics, tiny_bert_config, tiny_pretrain_config
from safetensors.torch import load_file
from torch import nn
from transformers import BertForMaskedLM

from retromae.cli import main
from retromae.evaluation.experiments import write_report
from retromae.objectives import OBJECTIVES, create_objective, register_objective
from retromae.objectives.base import PretrainingObjective
from retromae.objectives.options import DecoderOptions
from retromae.objectives.summary import describe_pretraining
from retromae.pretraining.config import PretrainConfig
from retromae.pretraining.run import describe, pretrain
from retromae.runtime.options import ConfigError, build_config, option


@dataclass(kw_only=True)
class ToyOptions(DecoderOptions):
    """The toy's head depth: two layers unless --decoder-layers says otherwise."""

    decoder_layers: int = option(2, "toy head layers")


class Toy(PretrainingObjective):
    """Encoder MLM plus a head of linear layers whose squared output on [CLS] is pulled towards 0."""

    title = "Toy objective"
    options = ToyOptions
    head = ("toy_head",)

    def __init__(self, encoder, masking, layers: int = 2):
        super().__init__(encoder, masking)
        width = encoder.config.hidden_size
        self.toy_head = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))

    @classmethod
    def from_config(cls, encoder, masking, options: ToyOptions) -> Toy:
        return cls(encoder, masking, layers=options.decoder_layers)

    def forward(self, batch, generator):
        hidden, encoder_loss = self.encode_masked(batch, generator)
        toy_loss = self.toy_head(hidden[:, 0]).float().pow(2).mean()
        return {"loss": encoder_loss + toy_loss, "encoder_mlm": encoder_loss.detach(), "toy": toy_loss.detach()}


@pytest.fixture()
def toy():
    register_objective("toy", Toy, ToyOptions)
    yield "toy"
    OBJECTIVES.unregister("toy")


def test_a_registered_objective_shows_in_pretrain_help(toy, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    assert re.search(r"--objective \{[^}]*,cropping,toy\}", text)
    sections = re.findall(r"^(--objective [^\n]*):\n  --decoder-layers N .*toy 2", text, flags=re.MULTILINE)
    assert sections and sections[0].endswith(", toy")  # its section names it, with its own default


def test_a_registered_objective_trains_resumes_exports_and_continues(toy, tiny_model_dir, tiny_corpus, tmp_path):
    output = tmp_path / "toy"
    settings = tiny_pretrain_config(tiny_model_dir, tiny_corpus, output, objective="toy", max_steps=3, save_every=3)
    assert describe(settings) == "pre-training Toy objective (3 steps)"
    pretrain(settings)
    resumed = pretrain(dataclasses.replace(settings, max_steps=5, resume=True))
    records = run_metrics(resumed)
    assert [record["step"] for record in records] == [1, 2, 3, 4, 5] and all("toy" in r for r in records)
    head = load_file(output / "pretrain_head.safetensors")
    assert {name for name in head if name.startswith("toy_head.")} == {f"toy_head.{i}.{p}" for i in (0, 1)
                                                                      for p in ("weight", "bias")}
    assert (output / "encoder" / "config.json").is_file() and (output / "sentence-transformer").is_dir()
    saved = json.loads((output / "config.json").read_text())
    assert describe_pretraining(saved) == "toy, enc mask 0.3, 2 dec layers, 5 steps"

    second = tiny_pretrain_config(tiny_model_dir, tiny_corpus, tmp_path / "two", objective="toy", max_steps=1,
                                  save_every=0, model=None, init_from=str(output))
    trained = load_file(output / "pretrain_head.safetensors")["toy_head.1.weight"]
    continued = load_file(pretrain(second) / "pretrain_head.safetensors")["toy_head.1.weight"]
    assert (continued - trained).abs().max() < 0.01  # --init-from loaded the toy head (fresh weights are far off)
    (tmp_path / "variant").mkdir()
    (tmp_path / "variant" / "pretrain").symlink_to(output)
    table = write_report([tmp_path / "variant"], tmp_path / "report", "Toy")
    assert "| variant | toy, enc mask 0.3, 2 dec layers, 5 steps |" in table


def test_an_option_the_objective_does_not_read_is_refused(toy, tiny_corpus, tmp_path):
    values = dict(model="m", corpus=[str(tiny_corpus)], output=str(tmp_path), objective="toy")
    with pytest.raises(ConfigError, match="--temperature: the toy objective does not read it"):
        PretrainConfig(**values, temperature=0.1)
    assert PretrainConfig(**values, decoder_layers=3).decoder_layers == 3


def test_config_files_take_an_objective_s_options_nested_or_flat(tiny_corpus, tmp_path):
    nested = tmp_path / "nested.yaml"  # `seed: 7` is --seed; a mapping under an objective's name is its options
    nested.write_text(f"model: m\ncorpus: [{tiny_corpus}]\noutput: o\nobjective: dupmae\nseed: 7\n"
                      "dupmae:\n  bow-weight: 0.5\n  decoder_mask_ratio: 0.25\n")
    config = build_config(PretrainConfig, {"config": nested})
    assert (config.bow_weight, config.decoder_mask_ratio, config.seed) == (0.5, 0.25, 7)
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"model": "m", "corpus": [str(tiny_corpus)], "output": "o", "objective": "dupmae",
                                "bow_weight": 0.5}))
    assert build_config(PretrainConfig, {"config": flat}).bow_weight == 0.5
    several = tmp_path / "several.yaml"  # the chosen objective's section applies; another's is checked, unused
    several.write_text(f"model: m\ncorpus: [{tiny_corpus}]\noutput: o\nobjective: seed\nseed: 3\n"
                       "retromae: {decoding: basic}\n")
    assert build_config(PretrainConfig, {"config": several}).decoding is None  # unread by seed: "the objective's"
    assert build_config(PretrainConfig, {"config": several, "objective": "retromae"}).decoding == "basic"
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(f"model: m\ncorpus: [{tiny_corpus}]\noutput: o\nretromae: {{bow_weight: 1}}\n")
    with pytest.raises(ConfigError, match=r"wrong.yaml: retromae: unknown option\(s\) bow_weight"):
        build_config(PretrainConfig, {"config": wrong})
    clash = tmp_path / "clash.yaml"
    clash.write_text(f"model: m\ncorpus: [{tiny_corpus}]\noutput: o\ndecoding: basic\nretromae: {{decoding: "
                     "enhanced}\n")
    with pytest.raises(ConfigError, match="decoding given twice"):
        build_config(PretrainConfig, {"config": clash})


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_every_objective_says_what_it_is(name, tiny_tokenizer):
    objective = OBJECTIVES[name]
    model = BertForMaskedLM(tiny_bert_config(len(tiny_tokenizer)))
    built = create_objective(name, model, tiny_tokenizer, **({"queue_size": 4} if name == "contriever" else {}))
    saved = {tensor.split(".")[0] for tensor in built.head_state_dict()}  # the pre-training head's modules
    assert saved == set(objective.head) | {"encoder"}  # "encoder": its MLM head
    assert objective.title and objective.options is OBJECTIVES.entry(name).options
    assert set(objective.masks) <= {"encoder", "decoder"}
    assert objective.pooling in ("cls", "mean")
    if "decoder" in objective.masks:  # the share it hides from the decoder is its option
        assert "decoder_mask_ratio" in {field.name for field in dataclasses.fields(objective.options)}
    assert objective.trains_a_head() == (name not in ("contrastive", "contriever", "cropping"))

