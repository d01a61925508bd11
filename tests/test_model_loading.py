"""Models load whole or not at all (issue 50, items 1, 3 and 8's model cases).

Every damaged folder is tried through each of the three loaders every command goes through (`Encoder.load`:
evaluate, encode, search's query encoder, adapt, finetune; `load_masked_lm`: pretrain; the cross-encoder loader:
score, train-reranker), and must be refused in one line naming the folder, never loaded with random weights. The
legitimate mismatches (a pooler or an MLM head a use does not need) still load. And no module but
`retromae.models.pretrained` calls transformers' `from_pretrained`.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_beir
from safetensors.torch import load_file, save_file

from retromae.cli import main
from retromae.models.encoder import Encoder
from retromae.models.masked_lm import load_masked_lm
from retromae.reranking.run import _load_classifier
from retromae.runtime.errors import ModelLoadError

SOURCE = Path(__file__).resolve().parents[1] / "src" / "retromae"


def rewrite_weights(folder: Path, change) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    save_file(change(tensors), str(folder / "model.safetensors"), metadata={"format": "pt"})


def edit_json(path: Path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))


def prefixed(folder: Path) -> None:
    rewrite_weights(folder, lambda tensors: {f"model.{key}": value for key, value in tensors.items()})


def layer_missing(folder: Path) -> None:
    rewrite_weights(folder, lambda tensors: {key: value for key, value in tensors.items() if ".layer.1." not in key})


def layer_extra(folder: Path) -> None:
    edit_json(folder / "config.json", num_hidden_layers=1)


def other_shapes(folder: Path) -> None:
    edit_json(folder / "config.json", intermediate_size=48)


def remote_code(folder: Path) -> None:
    edit_json(folder / "config.json", model_type="planted", auto_map={"AutoConfig": "planted.PlantedConfig",
                                                                      "AutoModel": "planted.PlantedModel"})
    (folder / "planted.py").write_text(f"open({str(folder / 'RAN')!r}, 'w').write('ran')\n")


def unknown_type(folder: Path) -> None:
    edit_json(folder / "config.json", model_type="planted")


def pickle_only(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    torch.save({}, folder / "pytorch_model.bin")


def negative_length(folder: Path) -> None:
    edit_json(folder / "tokenizer_config.json", model_max_length=-5)


DAMAGES = {
    "prefixed keys": (prefixed, r"\d\d weights of the model are not in it .*42 of its tensors .*\(model\.bert\."),
    "a layer missing": (layer_missing, r"\d+ weights of the model are not in it \(.*layer\.1\."),
    "a layer the config lacks": (layer_extra, r"\d+ of its tensors match no weight of the model \(.*layer\.1\."),
    "other shapes": (other_shapes, r"tensors have other shapes than its config.json says .*\(64"),
    "remote code": (remote_code, r"asks to run the folder's own code \(planted\.Planted"),
    "unknown model type": (unknown_type, r"model_type 'planted', which transformers does not know"),
    "pickle only": (pickle_only, r"only as pytorch_model.bin, a format that can run code"),
    "negative max length": (negative_length, r"model_max_length -5 is no number of tokens"),
}
LOADERS = {
    "encoder": lambda folder: Encoder.load(folder, device="cpu"),
    "masked LM": lambda folder: load_masked_lm(str(folder)),
    "cross-encoder": lambda folder: _load_classifier(str(folder), trained=False),
}


@pytest.fixture()
def damaged(request, tiny_model_dir, tmp_path):
    def make(damage) -> Path:
        folder = tmp_path / "model"
        shutil.copytree(tiny_model_dir, folder)
        damage(folder)
        return folder
    return make


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("damage", DAMAGES)
def test_every_loader_refuses_every_damaged_folder_in_one_line(damage, loader, damaged):
    change, expected = DAMAGES[damage]
    folder = damaged(change)
    with pytest.raises(ModelLoadError) as error:
        LOADERS[loader](folder)
    message = str(error.value)
    assert "\n" not in message and str(folder) in message and re.search(expected, message), message
    assert "trust_remote_code" not in message and "weights_only" not in message
    assert not (folder / "RAN").exists()


def test_the_legitimate_mismatches_load(tiny_model_dir, tmp_path):
    """A masked-LM checkpoint as an encoder (its MLM head unused, no pooler), an encoder as a masked LM (a fresh
    head) and as a cross-encoder to train (a fresh classifier): loaded, their body weights those of the file."""
    encoder = Encoder.load(tiny_model_dir, device="cpu")
    saved = load_file(str(tiny_model_dir / "model.safetensors"))
    words, layer = saved["bert.embeddings.word_embeddings.weight"], saved["bert.encoder.layer.1.output.dense.weight"]
    assert torch.equal(encoder.model.embeddings.word_embeddings.weight, words)
    encoder.save(tmp_path / "export")
    model, _ = load_masked_lm(str(tmp_path / "export"))
    assert torch.equal(model.bert.encoder.layer[1].output.dense.weight, layer)
    classifier, _ = _load_classifier(str(tmp_path / "export"), trained=False)
    assert torch.equal(classifier.bert.embeddings.word_embeddings.weight, words)


def test_a_scorer_needs_its_trained_head(tiny_model_dir):
    with pytest.raises(ModelLoadError, match=r"not a trained cross-encoder: it has no classifier head \(classifier\."
                                             r"bias, classifier\.weight would start random"):
        _load_classifier(str(tiny_model_dir), trained=True)


def test_only_one_module_calls_from_pretrained():
    """By construction: every config, tokenizer and model transformers reads goes through `retromae.models.pretrained`
    (trust_remote_code=False, safetensors only, whole weights)."""
    callers = sorted(str(path.relative_to(SOURCE)) for path in SOURCE.rglob("*.py")
                     if ".from_pretrained(" in path.read_text() and path.name != "pretrained.py")
    assert callers == []
    text = (SOURCE / "models" / "pretrained.py").read_text()
    assert len(re.findall(r"trust_remote_code=False[,)]", text)) == 3 and text.count(".from_pretrained,") == 3


def test_cli_commands_refuse_a_prefixed_model(damaged, tmp_path, capsys, tiny_corpus):
    """The audit's commands: evaluate, encode and pretrain exited 0 with random weights."""
    folder = damaged(prefixed)
    beir = tmp_path / "beir"
    tiny_beir(beir)
    runs = [["evaluate", "--model", str(folder), "--data", str(beir)],
            ["encode", "--model", str(folder), "--corpus", str(beir / "corpus.jsonl"), "--output", str(tmp_path / "e")],
            ["pretrain", "--model", str(folder), "--corpus", str(tiny_corpus), "--output", str(tmp_path / "p"),
             "--max-steps", "1", "--batch-size", "2", "--max-length", "32"]]
    for args in runs:
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "its weights do not fit the model" in lines[0] and str(folder) in lines[0]


def test_remote_code_is_refused_even_when_stdin_says_yes(damaged, tmp_path):
    folder = damaged(remote_code)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a text"}\n')
    done = subprocess.run([sys.executable, "-m", "retromae", "encode", "--model", str(folder), "--corpus", str(corpus),
                           "--output", str(tmp_path / "out")], input="y\ny\n", capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and not (folder / "RAN").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "never runs a model folder's own code" in lines[0] and "[y/N]" not in done.stdout
