"""What a training run leaves behind for its users: the encoder in the formats the field loads.

Owns: `OUTPUT/encoder/` (a plain Hugging Face model + tokenizer + `retromae_encoder.json` naming its pooling and
max length, + the sentence-transformers modules of that pooling, so that `SentenceTransformer("OUTPUT/encoder")`
pools and truncates as trained), `OUTPUT/sentence-transformer/` (the same weights with the same pooling and max
length, loadable by `SentenceTransformer`), the same files beside any model folder we write (`write_encoding_files`,
e.g. `init-model`'s),
`OUTPUT/pretrain_head.safetensors` (the objective's MLM head and decoder, so pre-training can continue) and
`OUTPUT/config.json` (the resolved config). Every folder is written atomically. Does not own training.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from retromae.models.encoder import default_max_length, describe_folder
from retromae.models.finite import check_weights
from retromae.models.model_source import HEAD_FILE, check_safetensors, read_json, resolve_model
from retromae.runtime.errors import ModelLoadError
from retromae.runtime.io import atomic_directory, atomic_path, write_text_atomic

ENCODER_METADATA = "retromae_encoder.json"
# What sentence-transformers writes beside the weights (and module folders such as 1_Pooling/): copied into encoder/.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")


def export_encoder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: Path,
                   pooling: str = "cls", normalize: bool = False, max_length: int | None = None,
                   prompts: dict[str, str] | None = None, tower: str = "") -> None:
    """Save the base encoder (no MLM head) with its tokenizer, pooling and max length, loadable by `AutoModel` and,
    pooling and truncating the same way, by `SentenceTransformer`. `max_length` is the source model's declared
    input length (`declared_max_length`); without one, the length `Encoder.load` gives the model. `prompts` (side →
    text, as `Encoder.prompts`) are named in the folder, so that retromae and sentence-transformers' `encode_query`
    / `encode_document` put them (`st_prompts`). `tower`: the side it encodes as a tower of an untied fine-tune
    ("" for both: `write_encoding_files`)."""
    check_weights(model.base_model, f"{path}: not exported")
    with atomic_directory(Path(path)) as staging:
        model.base_model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_encoding_files(staging, pooling, normalize, max_length or default_max_length(model, tokenizer, None),
                             prompts, tower)


def write_encoding_files(folder: Path, pooling: str, normalize: bool, max_length: int,
                         prompts: dict[str, str] | None = None, tower: str = "") -> None:
    """How the model in `folder` turns text into a vector, in every file that a reader of the folder looks at:
    `retromae_encoder.json` (ours, with the side it encodes as a `tower` of an untied fine-tune, which
    `model_source.tower_side` reads), the sentence-transformers modules with `max_seq_length` and the named `prompts`,
    and the tokenizer's `model_max_length` (where sentence-transformers 6 and a plain `AutoTokenizer` read it)."""
    metadata = {"pooling": pooling, "normalize": normalize, "max_length": max_length} | (
        {"tower": tower} if tower else {})
    write_text_atomic(folder / ENCODER_METADATA, json.dumps(metadata, indent=2) + "\n")
    _add_sentence_transformers_modules(folder, pooling, normalize, max_length, prompts)
    _record_max_length(folder, max_length)


def _record_max_length(folder: Path, max_length: int) -> None:
    """`max_length` as sentence_bert_config.json's `max_seq_length` (read by every sentence-transformers version)
    and tokenizer_config.json's `model_max_length`."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        values = read_json(folder / name) or {}
        values[key] = max_length
        write_text_atomic(folder / name, json.dumps(values, indent=2) + "\n")


def _add_sentence_transformers_modules(folder: Path, pooling: str, normalize: bool, max_length: int | None,
                                       prompts: dict[str, str] | None = None) -> None:
    """modules.json and the Pooling (and Normalize) modules beside a model folder's weights, so that
    `SentenceTransformer(folder)` pools as the model was trained rather than by its default mean, unnormalised.
    sentence-transformers' model card is not made: none of it is kept (compiling its template took most of a small
    model's export)."""
    with tempfile.TemporaryDirectory(prefix=".modules.", dir=folder.parent) as scratch:
        _sentence_transformer(folder, pooling, normalize, max_length, prompts).save(scratch, create_model_card=False)
        for entry in Path(scratch).iterdir():
            if entry.is_dir():
                shutil.copytree(entry, folder / entry.name, dirs_exist_ok=True)
            elif entry.name in SENTENCE_TRANSFORMERS_FILES:
                shutil.copy(entry, folder / entry.name)


def _sentence_transformer(encoder_dir: Path, pooling: str, normalize: bool, max_length: int | None,
                          prompts: dict[str, str] | None = None):
    """A SentenceTransformer over the model in `encoder_dir`: its transformer, the pooling, optionally Normalize, the
    named `prompts` (`st_prompts`). Built in the middle of a training (a best-probe export), it leaves the global RNG
    as it found it."""
    # sentence-transformers: only when a sentence-transformers folder is written
    from sentence_transformers import SentenceTransformer
    try:  # the same, where sentence-transformers 6 keeps them
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    with torch.random.fork_rng(devices=[]):  # weights it initialises (a pooler) must not draw from a training's RNG
        transformer = Transformer(str(encoder_dir), max_seq_length=max_length)
    modules: list[nn.Module] = [transformer, Pooling(transformer.auto_model.config.hidden_size, pooling)]
    if normalize:
        modules.append(Normalize())
    return SentenceTransformer(modules=modules, device="cpu", similarity_fn_name="cosine" if normalize else "dot",
                               prompts=st_prompts(prompts or {}))


def st_prompts(sides: dict[str, str]) -> dict[str, str]:
    """Named prompts by side ("query", "passage": `Encoder.prompts`) as sentence-transformers names them ("query",
    "document": what `encode_query` and `encode_document` put), which retromae reads back (`named_prompts`); a side
    whose prompt is '' is named none."""
    names = {"query": "query", "passage": "document"}
    return {names[side]: prompt for side, prompt in sides.items() if prompt}


def declared_max_length(source: str | Path) -> int | None:
    """The input length a model folder declares (`max_seq_length` of sentence-transformers, or our metadata's
    `max_length`; e.g. 256 for all-MiniLM-L6-v2), or None when it declares none or cannot be read."""
    try:
        return describe_folder(resolve_model(source).folder).max_length
    except ModelLoadError:
        return None


def export_sentence_transformer(encoder_dir: Path, path: Path, pooling: str | None = None,
                                normalize: bool = False) -> None:
    """Wrap an exported encoder folder as a sentence-transformers model with the given pooling (default: the one
    its metadata declares) and the `max_length` its metadata declares as `max_seq_length`. Its similarity is the
    score the model was trained and is searched with: the dot product of unnormalised vectors (cosine when they are
    normalised), so that sentence-transformers and mteb rank as `retromae evaluate` does. Its model card (README.md)
    is the run's (`models.model_card`), not the one sentence-transformers would make."""
    described = describe_folder(str(encoder_dir))
    pooling, max_length = pooling or described.pooling.pooling, described.max_length
    model = _sentence_transformer(encoder_dir, pooling, normalize, max_length, described.prompts)
    with atomic_directory(Path(path)) as staging:
        model.save(str(staging), create_model_card=False)
        if max_length is not None:
            _record_max_length(staging, max_length)


def save_head(objective: nn.Module, output: Path) -> None:
    """The objective's tensors outside the base encoder (MLM head, decoder), for continuing pre-training."""
    tensors = {name: t.detach().contiguous().cpu() for name, t in objective.head_state_dict().items()}
    with atomic_path(Path(output) / HEAD_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})


class HeadMismatchError(ModelLoadError):
    """A saved pre-training head that lacks tensors the objective needs (or holds tensors it has no place for)."""


def load_head(objective: nn.Module, output: Path, allow_unused: bool = False,
              allow_missing: bool = False) -> tuple[list[str], list[str]]:
    """Load `save_head`'s tensors into an objective of the same kind; names must match exactly. Returns the names
    skipped (unused) and the names left as the objective was built (missing).

    With `allow_unused`, tensors the objective has no place for (e.g. a decoder when continuing with plain MLM)
    are skipped; with `allow_missing`, tensors the objective needs and the file lacks (e.g. a decoder after plain
    MLM) keep the objective's own, freshly initialised, weights. Otherwise either is a `HeadMismatchError`.
    """
    path = Path(output) / HEAD_FILE
    if not path.exists():
        raise ModelLoadError(f"{path}: no pre-training head to continue from (only `retromae pretrain` leaves one); "
                             f"--model {Path(output)} starts a fresh head from its encoder")
    check_safetensors(path)
    tensors = load_file(str(path))
    expected = set(objective.head_state_dict())
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if (missing and not allow_missing) or (unexpected and not allow_unused):
        raise HeadMismatchError(f"{path}: head does not match this objective (missing {missing[:5]}, "
                                f"unexpected {unexpected[:5]})")
    objective.load_state_dict({name: tensors[name] for name in expected - set(missing)}, strict=False)
    return unexpected, missing
