"""The one place transformers reads a model folder: configs, tokenizers and weights, loaded whole or not at all.

Owns: every `from_pretrained` call of the package, each with `trust_remote_code=False` (transformers then never asks
on standard input whether to run a folder's code) and `use_safetensors=True` (never a pickle); the refusals, in our
words, of a folder that asks to run its own Python code (`auto_map`), of a folder whose weights are pickles only
(`pytorch_model.bin`), of a `model_type` transformers does not know, of a config.json size or rate no model can be
built from (`CONFIG_NUMBERS`), an activation it does not know or a `pad_token_id` outside the vocabulary, of a JSON
file it reads that is no JSON object, and of a tokenizer whose declared max length is no positive number; a library's
failure while reading (safetensors' SafetensorError, the tokenizers library's plain Exception) as one line; and the
rule that weights load whole: after loading, every weight the checkpoint lacks, every tensor it holds that the model
has no place for and every tensor of another shape is refused, naming a few and the count (transformers would start
them from random weights and go on), but for these, the only legitimate ones:

- a task head the checkpoint lacks, where the caller says it may start fresh (`fresh_head`): the masked-LM head
  of a sentence encoder about to be pre-trained, the classifier of a reranker about to be trained, the pooler of an
  `AutoModel` (our pooling never reads it);
- tensors of a head the model does not have (an MLM head or a next-sentence head when loading the encoder, a pooler
  when loading a masked LM): the checkpoint holds more than this use needs, and nothing starts random.

Weights of the body (the base model's embeddings and layers) must all be there and all be used. Does not own what a
`--model` names (`retromae.models.model_source`) nor pooling and inference (`retromae.models.encoder`), masked-LM
specifics (`retromae.models.masked_lm`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from retromae.models.model_source import (
    check_model_files,
    check_needed_tokens,
    check_safetensors,
    check_tokenizer_file,
    check_tokenizer_reads,
    read_json,
)
from retromae.runtime.console import notice
from retromae.runtime.errors import ModelLoadError, tokenizer_read
from retromae.runtime.lines import quoted
from retromae.runtime.options import PROBABILITY, Domain, between

PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.ckpt.index", "tf_model.h5",
                  "flax_model.msgpack", "pytorch_model.pt", "model.pt")
SHOWN = 3  # names shown of a longer list
# The JSON files of a model folder transformers reads, each an object (tokenizer.json: `check_tokenizer_file`)
TRANSFORMERS_JSON = ("config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                     "generation_config.json", "model.safetensors.index.json")
# The config.json fields naming an activation function (BERT's, ModernBERT's, DistilBERT's, GPT-2's)
ACTIVATION_FIELDS = ("hidden_act", "hidden_activation", "activation", "activation_function")
# What a library raises for a file it cannot read: the tokenizers library raises a plain Exception
LIBRARY_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, AttributeError, SafetensorError)
NO_CODE = "retromae never runs a model folder's own code"
_NOTED_PADDING: set[str] = set()  # files whose left padding was said not to be followed (`read_from_the_start`)
# The sizes and rates of a config.json that transformers builds a model's tensors from, with what each may be: the
# sizes whole numbers (bounded so that a typo cannot ask for all the memory there is), the rates numbers. The one
# table of these bounds: `init-model`'s size options take their domains from it (`pretraining.config`).
CONFIG_NUMBERS = {
    **{name: (int, between(1, 1 << 16)) for name in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                     "head_dim", "embedding_size")},
    "num_hidden_layers": (int, between(1, 1024)), "intermediate_size": (int, between(1, 1 << 18)),
    "vocab_size": (int, between(1, 1 << 24)), "max_position_embeddings": (int, between(1, 1 << 20)),
    "type_vocab_size": (int, between(0, 1 << 16)),
    **{name: (float, Domain(0, 1, low_open=True)) for name in ("layer_norm_eps", "norm_eps", "rms_norm_eps")},
    **{name: (float, PROBABILITY) for name in ("hidden_dropout_prob", "attention_probs_dropout_prob",
                                               "attention_dropout", "mlp_dropout", "embedding_dropout",
                                               "classifier_dropout")},
}


def load_config(folder: str, subfolder: str = "", what: str = "") -> Any:
    """The transformers config of a checked model folder (`check_folder`) or hub name."""
    from transformers import AutoConfig  # transformers: only when a model is read, so the checks before stay light

    check_folder(folder, subfolder, what, weights=False)
    return _guarded(what or folder, AutoConfig.from_pretrained, folder, subfolder=subfolder, trust_remote_code=False)


def load_tokenizer(folder: str, subfolder: str = "", what: str = "", needs: tuple[str, ...] = (),
                   **options: Any) -> Any:
    """The tokenizer of a checked folder or hub name; ModelLoadError when its declared max length is no whole number
    of tokens above its special ones (a tokenizer would truncate every text to nothing, or not at all), it cannot read
    text into ids the folder's model embeds (`check_tokenizer_reads`, against config.json's vocab_size), lacks a pad
    token or a token the caller `needs` (`check_needed_tokens`) or truncates on the left (`read_from_the_start`),
    naming its tokenizer.json (else the folder), which is also what a panic of the tokenizers library names from then
    on (`tokenizer_read`), or the file that sets what is refused. It pads on the right (`read_from_the_start`)."""
    from transformers import AutoTokenizer  # transformers: only when a tokenizer is read

    config = check_folder(folder, subfolder, what, weights=False)
    path = Path(folder) / subfolder
    if path.is_dir():
        check_tokenizer_file(path, config.get("vocab_size"))
    tokenizer = _guarded(what or folder, AutoTokenizer.from_pretrained, folder, subfolder=subfolder,
                         trust_remote_code=False, **options)
    settings = path / "tokenizer_config.json" if path.is_dir() else what or folder
    length, least = tokenizer.model_max_length, tokenizer.num_special_tokens_to_add() + 1
    if isinstance(length, bool) or not isinstance(length, int | float) or not length >= least:
        raise ModelLoadError(f"{settings}: model_max_length {length!r} is no number of tokens that keeps text beside "
                             f"the tokenizer's {least - 1} special tokens; give a whole number from {least} (or remove "
                             "it)")
    where = _tokenizer_source(path, what or folder)
    tokenizer_read(where)
    check_tokenizer_reads(tokenizer, where, config.get("vocab_size"), path if path.is_dir() else None)
    check_needed_tokens(tokenizer, str(settings), needs)
    read_from_the_start(tokenizer, path, where)
    return tokenizer


def read_from_the_start(tokenizer: Any, path: Path, where: str) -> None:
    """The one rule of which side of a text a tokenizer cuts and pads: every reader of retromae keeps a long text's
    first tokens (`retromae.data.long_texts` clips a text to them before the tokenizer truncates it) and pads on the
    right (`Encoder.collate` by hand, the collators and the cross-encoder through the tokenizer). A tokenizer that
    truncates on the left is refused, naming the file that says so (tokenizer_config.json, else the tokenizer at
    `where`): it would keep a text's last tokens, as sentence-transformers does with it, and no vector or score of
    retromae's would be those. One that pads on the left is set to pad on the right, with a note once per file: under
    left padding a BERT-style model's positions, and so a text's vector or a pair's score, depend on the texts batched
    with it, and a classifier reads padding where its [CLS] should be; on the right every text reads as it does alone
    (as sentence-transformers encodes it alone), and what is saved from the tokenizer pads on the right."""
    settings = read_json(path / "tokenizer_config.json", dict) if path.is_dir() else None
    declared = {side: str(path / "tokenizer_config.json") if side in (settings or {}) else where
                for side in ("truncation_side", "padding_side")}
    if tokenizer.truncation_side != "right":
        raise ModelLoadError(f"{declared['truncation_side']}: truncation_side is {quoted(tokenizer.truncation_side)}: "
                             "the tokenizer would keep the last tokens of a long text, and retromae reads the first "
                             "tokens of every text (pre-training, encoding, training, scoring); set truncation_side "
                             "to \"right\" to read the model so")
    if tokenizer.padding_side != "right":
        if declared["padding_side"] not in _NOTED_PADDING:
            _NOTED_PADDING.add(declared["padding_side"])
            notice(f"retromae: note: {declared['padding_side']}: padding_side {quoted(tokenizer.padding_side)} is "
                   "not followed: retromae pads on the right, so that a text's vector or a pair's score does not "
                   "depend on the texts batched with it (each reads as it does alone)")
        tokenizer.padding_side = "right"


def _tokenizer_source(path: Path, name: str) -> str:
    """What an error names a tokenizer by: its folder's tokenizer.json, else the folder, else (a hub name) `name`."""
    if not path.is_dir():
        return name
    return str(path / "tokenizer.json") if (path / "tokenizer.json").is_file() else str(path)


def load_model(auto_class: Any, folder: str, subfolder: str = "", what: str = "", fresh_head: bool = False,
               **options: Any) -> tuple[Any, list[str]]:
    """`auto_class.from_pretrained` on a checked folder, refused unless its weights load whole (module docstring);
    returns the model and the names of the head weights that start fresh (only with `fresh_head`)."""
    check_folder(folder, subfolder, what)
    model, info = _guarded(what or folder, auto_class.from_pretrained, folder, subfolder=subfolder,
                           trust_remote_code=False, use_safetensors=True, output_loading_info=True,
                           ignore_mismatched_sizes=True, **options)
    fresh = check_loaded(model, info, what or folder, fresh_head)
    return model, fresh


def check_loaded(model: Any, info: dict[str, Any], what: str, fresh_head: bool) -> list[str]:
    """ModelLoadError unless the loading report `info` of `model` shows whole weights (module docstring); the
    missing head weights otherwise (allowed by `fresh_head`)."""
    missing, unexpected = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    body = set(_body_parts(model))
    missing_body = [key for key in missing if _part(model, key) in body]
    head = [key for key in missing if key not in missing_body]
    problems = []
    if missing_body or (head and not fresh_head):
        lacking = missing_body + ([] if fresh_head else head)
        problems.append(f"{len(lacking)} weights of the model are not in it ({_few(lacking)})")
    extra = [key for key in unexpected if _part(model, key) in body]
    if extra or (missing_body and unexpected):
        shown = extra or unexpected
        problems.append(f"{len(shown)} of its tensors match no weight of the model ({_few(shown)})")
    mismatched = sorted(info.get("mismatched_keys", ()))
    if mismatched:
        named = [f"{key} {tuple(saved)} vs {tuple(wanted)}" for key, saved, wanted in mismatched]
        problems.append(f"{len(named)} tensors have other shapes than its config.json says ({_few(named)})")
    if problems:
        raise ModelLoadError(f"{what}: its weights do not fit the model: {'; '.join(problems)}; it would run with "
                             "random weights in their place: pass the folder the model was saved to as it was saved "
                             "(config.json and model.safetensors together)")
    return head


def check_folder(folder: str, subfolder: str = "", what: str = "", weights: bool = True) -> dict[str, Any]:
    """Refuse, before transformers reads it, a local folder that asks to run its own code, names a model type
    transformers does not know, or (`weights`) holds its weights only as pickles or truncated safetensors; returns
    its config.json (empty without one). A hub name is checked by transformers itself, under
    `trust_remote_code=False` and `use_safetensors=True`."""
    path = Path(folder) / subfolder
    if not path.is_dir():
        return {}
    what = what or str(path)
    check_model_files(path)
    found = {name: read_json(path / name, dict) for name in TRANSFORMERS_JSON}  # each read once, an object or None
    for name in ("config.json", "tokenizer_config.json"):
        code = _auto_map(found[name])
        if code:
            raise ModelLoadError(f"{what}: its {name} asks to run the folder's own code ({', '.join(code)}); "
                                 f"{NO_CODE}: use a model of a family transformers knows (BERT, RoBERTa, ...)")
    config = found["config.json"] or {}
    _check_model_type(config, what)
    _check_config_numbers(config, path / "config.json")
    _check_config_choices(config, path / "config.json")
    if weights:
        _check_weight_files(path, what)
    return config


def _auto_map(config: Any) -> list[str]:
    """The code a config's `auto_map` names ("evil.EvilModel" for evil.py), empty when it names none."""
    mapping = config.get("auto_map") if isinstance(config, dict) else None
    if not mapping:
        return []
    values = mapping.values() if isinstance(mapping, dict) else mapping
    flat = [item for value in values for item in (value if isinstance(value, list) else [value]) if item]
    return sorted({str(item) for item in flat}) or ["auto_map"]


def _check_model_type(config: dict[str, Any], what: str) -> None:
    from transformers import CONFIG_MAPPING  # transformers: only when a folder's model type is checked

    kind = config.get("model_type")
    if kind is not None and kind not in CONFIG_MAPPING:
        raise ModelLoadError(f"{what}: its config.json names model_type {kind!r}, which transformers does not know; "
                             "use a model of a family it knows (BERT, RoBERTa, ModernBERT, DeBERTa-v2, ...)")


def _check_config_numbers(config: dict[str, Any], path: Path) -> None:
    """ModelLoadError naming config.json (`path`, read as `config`) and the first of its sizes and rates
    (`CONFIG_NUMBERS`) that is not a number of the kind and range the model's tensors can be built from (transformers
    checks none: `hidden_size: 0` builds an empty model, `1e12` asks for more memory than any machine has, `"64"`
    fails deep inside torch)."""
    problem = config_number_problem(config)
    if problem:
        raise ModelLoadError(f"{path}: {problem} (no model can be built from it)")


def config_number_problem(config: dict[str, Any]) -> str | None:
    """What is wrong with the first size or rate of `config` outside `CONFIG_NUMBERS` ("max_position_embeddings is
    2000000; it must lie in [1, 1048576] and be a whole number"), None when all hold: the reader's rule, which
    `init-model` also applies to the config it is about to build (`pretraining.scratch.save_random_model`)."""
    for name, (kind, domain) in CONFIG_NUMBERS.items():
        value = config.get(name)
        if value is None:
            continue
        whole = isinstance(value, int) or (isinstance(value, float) and kind is float)
        if isinstance(value, bool) or not whole or not domain.holds(value):
            said = "a whole number" if kind is int else "a number"
            return f"{name} is {value!r}; it {domain.describe()} and be {said}"
    return None


def _check_config_choices(config: dict[str, Any], path: Path) -> None:
    """ModelLoadError naming config.json (`path`, read as `config`) and the field when an activation function is one
    transformers does not know (it fails building the model, naming only the value) or `pad_token_id` is no token of
    `vocab_size` (an assertion deep inside torch's embedding)."""
    from transformers.activations import ACT2FN  # transformers: only when a folder's config is checked

    for name in ACTIVATION_FIELDS:
        value = config.get(name)
        if value is not None and not (isinstance(value, str) and value in ACT2FN):
            raise ModelLoadError(f"{path}: {name} is {value!r}, an activation function transformers does not know "
                                 f"(it knows {len(ACT2FN)}, such as gelu, relu, silu)")
    pad, vocab = config.get("pad_token_id"), config.get("vocab_size")
    if pad is not None and (type(pad) is not int or (type(vocab) is int and not -vocab <= pad < vocab)):
        raise ModelLoadError(f"{path}: pad_token_id is {pad!r}; it must be the id of a token of the vocabulary "
                             f"(vocab_size {vocab}) or null")


def _check_weight_files(path: Path, what: str) -> None:
    """Pickle-only weights refused in our words; truncated safetensors named (`check_safetensors`)."""
    if not any(path.glob("*.safetensors")):
        pickles = [name for name in PICKLE_WEIGHTS if (path / name).exists()] + sorted(
            entry.name for entry in path.glob("pytorch_model-*.bin"))
        if pickles:
            raise ModelLoadError(f"{what}: holds its weights only as {', '.join(pickles)}, a format that can run code "
                                 "when read, which retromae never reads; convert it to model.safetensors where you "
                                 "trust it (`model.save_pretrained(folder)` saves safetensors), or use a folder that "
                                 "has model.safetensors")
        if (path / "config.json").is_file():
            raise ModelLoadError(f"{what}: has a config.json but no weights (model.safetensors)")
    check_safetensors(path)


def _guarded(what: str, load: Any, *args: Any, **options: Any) -> Any:
    """`load(*args, **options)`, its failures turned into one line naming `what`."""
    try:
        return load(*args, **options)
    except ModelLoadError:
        raise
    except Exception as error:
        if not isinstance(error, LIBRARY_ERRORS) and type(error) is not Exception:
            raise
        text = " ".join(str(error).split())
        if "trust_remote_code" in text:
            text = f"it asks to run its own code; {NO_CODE}"
        raise ModelLoadError(f"cannot load model {what!r}: {text}") from error


def _body_parts(model: Any) -> Iterable[str]:
    """The names of the base model's own parts (embeddings, layers, norms): all but its pooler."""
    base = getattr(model, "base_model", model)
    return [name for name, _ in base.named_children() if name != "pooler"]


def _part(model: Any, key: str) -> str:
    """The part of the base model a weight name (with or without the base model's prefix) belongs to."""
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    if prefix != "." and key.startswith(prefix):
        key = key[len(prefix):]
    elif getattr(model, "base_model", model) is not model:  # a head model: names outside its prefix are heads
        return ""
    return key.split(".", 1)[0]


def _few(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")
