"""What a `--model` argument names: the one resolver every command uses before loading a model.

Owns: telling apart the sources a user may pass — a `retromae pretrain`/`finetune`/`train-reranker` output folder
(which stands for its `encoder/` or `reranker/`), our exported encoder folder (`retromae_encoder.json`), a
sentence-transformers folder (the transformer in the folder itself or in a module folder such as `0_Transformer/`),
a plain Hugging Face model folder, or a hub name — and the one-line error naming what a folder holds and what to
pass instead; and the sanity checks of a loaded tokenizer (a vocabulary of special tokens only, ids beyond the
model's embeddings, a corpus read as mostly `[UNK]`), and that a folder's safetensors files are whole
(`check_safetensors`: a truncated one is named before a library fails on it without its name). Does not own
loading weights (`retromae.models.encoder`, `retromae.models.masked_lm`) nor a folder's pooling
(`retromae.models.encoder.describe_folder`).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError, ModelLoadError
from retromae.runtime.lines import read_json_file

# Written beside a random initialisation (never copied into a pre-trained export), so that a run can tell it starts
# from scratch: retromae+contrastive asks for an explicit --contrastive-weight there.
RANDOM_INIT_MARKER = "random-init.json"

ENCODER_FILE = "retromae_encoder.json"
RUN_MARKER = "retromae-run.json"
HEAD_FILE = "pretrain_head.safetensors"  # the pre-training head a `retromae pretrain` run leaves beside encoder/
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
RUN_MODELS = ("encoder", "reranker")  # the model folder a run leaves, in the order looked for
MAX_UNKNOWN_SHARE = 0.5  # a corpus read as more [UNK] than this is another language or a missing vocabulary
# A Hugging Face Hub model id: `name` or `owner/name`, each part letters, digits, '-', '_' and '.', at most 96 long,
# not starting or ending with '-' or '.', without '--' or '..' (the hub's own rules).
HUB_ID = re.compile(r"(?!.*(--|\.\.))((?![-.])[\w.-]{1,96}(?<![-.])/)?(?![-.])[\w.-]{1,96}(?<![-.])", re.ASCII)
PASS = ("pass a finished `retromae pretrain`/`finetune` output folder, its encoder/, a sentence-transformers "
        "folder, a Hugging Face model folder (config.json with its weights and tokenizer) or a hub name")


@dataclass(frozen=True)
class ModelSource:
    """A resolved `--model`: the folder (or hub name) to load, the transformer's subfolder in it, and its kind."""

    given: str
    folder: str
    subfolder: str = ""
    kind: str = "hub"  # run, encoder, sentence-transformers, hugging-face, hub

    @property
    def transformer(self) -> str:
        """The folder holding the transformer's config and weights (the hub name for a hub model)."""
        return str(Path(self.folder) / self.subfolder) if self.subfolder else self.folder


def looks_local(name: str) -> bool:
    """Whether `name` means a folder on this machine rather than a hub model id.

    A folder: a path that exists; anything that is not a valid hub id (`name` or `owner/name`: absolute paths,
    ./ ../ ~, deeper paths, a trailing slash, spaces, a backslash); and `owner/name` whose `owner` is a folder here
    (`runs/typo` when runs/ exists). Only the rest goes to the hub, so a mistyped folder fails at once, not after
    half a minute of retries."""
    if os.path.exists(name) or not HUB_ID.fullmatch(name):
        return True
    owner, _, rest = name.partition("/")
    return bool(rest) and os.path.isdir(owner)


def resolve_model(name: str | Path, option: str = "--model") -> ModelSource:
    """Say what `name` is, or raise ModelLoadError naming what was found there and what to pass."""
    given = str(name)
    path = os.path.expanduser(given)
    if not looks_local(path):
        return ModelSource(given, path)
    folder = Path(path)
    if not folder.is_dir():
        raise ModelLoadError(f"{option} {given}: no such folder; {PASS}")
    inner = next((folder / sub for sub in RUN_MODELS if (folder / sub / "config.json").is_file()), None)
    if inner is not None:
        return _model_folder(given, inner, option, kind="run")
    return _model_folder(given, folder, option)


def resolve_tokenizer(name: str | Path, option: str = "--tokenizer") -> ModelSource:
    """Like `resolve_model`, but a folder holding only a tokenizer (tokenizer.json, tokenizer_config.json) is one."""
    folder = Path(os.path.expanduser(str(name)))
    if any((folder / file).is_file() for file in TOKENIZER_FILES) and not (folder / "config.json").is_file():
        return ModelSource(str(name), str(folder), "", "tokenizer")
    return resolve_model(name, option)


def _model_folder(given: str, folder: Path, option: str, kind: str | None = None) -> ModelSource:
    if (folder / ENCODER_FILE).is_file():
        return ModelSource(given, str(folder), "", kind or "encoder")
    modules = read_json(folder / "modules.json")
    if isinstance(modules, list):
        return ModelSource(given, str(folder), _transformer_path(modules, folder), kind or "sentence-transformers")
    config = read_json(folder / "config.json")
    if isinstance(config, dict) and "model_type" in config:
        return ModelSource(given, str(folder), "", kind or "hugging-face")
    raise ModelLoadError(f"{option} {given}: not a model: {_found(folder)}; {PASS}")


def _transformer_path(modules: list[Any], folder: Path) -> str:
    """The folder of a sentence-transformers model's Transformer module ("" when it is the model folder itself)."""
    for module in modules:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer"):
            return str(module.get("path", ""))
    raise ModelLoadError(f"{folder / 'modules.json'}: no Transformer module; not a sentence-transformers text model")


def read_json(path: Path) -> Any:
    """The JSON value of a model folder's file, or None when there is no such file; ModelLoadError when invalid or
    when it holds NaN or an infinity (a config's `layer_norm_eps: NaN` would make every vector NaN)."""
    if not path.is_file():
        return None
    try:
        return read_json_file(path, object)
    except DataError as error:
        raise ModelLoadError(str(error)) from None


def unfinished_run(folder: Path) -> str | None:
    """"the output folder of an unfinished `retromae pretrain` run (...: finish it with `retromae pretrain --output
    FOLDER --resume`)" when `folder` is one, else None."""
    marker = read_json(folder / RUN_MARKER)
    if not (isinstance(marker, dict) and marker.get("command") in ("pretrain", "finetune", "train-reranker")):
        return None
    where = "checkpoints/ only, " if (folder / "checkpoints").is_dir() else ""
    return (f"the output folder of an unfinished `retromae {marker['command']}` run ({where}no encoder/ yet: "
            f"finish it with `retromae {marker['command']} --output {folder} --resume`)")


def _found(folder: Path) -> str:
    """What a folder that is not a model holds, in a few words."""
    unfinished = unfinished_run(folder)
    if unfinished is not None:
        return unfinished
    if (folder / "config.json").is_file():
        return "its config.json names no model_type (a run's options, not a model's configuration)"
    names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in folder.iterdir())
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return f"it holds {shown or 'nothing'} (no config.json, modules.json or encoder/)"


def check_tokenizer(tokenizer: Any, source: str, vocab_size: int | None = None) -> None:
    """ModelLoadError when a tokenizer knows only its special tokens (the folder had no vocabulary: every word
    would become [UNK]) or yields ids beyond the model's `vocab_size` embeddings."""
    special = set(tokenizer.all_special_ids)
    if len(tokenizer) <= len(special):
        raise ModelLoadError(f"{source}: its tokenizer knows only its {len(tokenizer)} special tokens, so every word "
                             "would be read as [UNK]: the folder holds no vocabulary (tokenizer.json or vocab.txt); "
                             "copy in the tokenizer files of the model it was made from, or pass a folder or hub "
                             "name that has them (`retromae init-model --tokenizer NAME` makes a model folder with "
                             "both)")
    if vocab_size is not None and len(tokenizer) > vocab_size:
        raise ModelLoadError(f"{source}: the tokenizer has {len(tokenizer)} tokens but the model embeds only "
                             f"{vocab_size}; use the tokenizer the model was made with")


def unknown_share(tokenizer: Any, ids: Iterable[int]) -> float:
    """The share of the ordinary (non-special) token ids in `ids` that are the tokenizer's unknown token."""
    special, unknown = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}, tokenizer.unk_token_id
    ordinary = [token for token in ids if token not in special]
    return sum(token == unknown for token in ordinary) / max(1, len(ordinary))


def check_unknown_share(tokenizer: Any, ids: Sequence[int], source: str, data: str) -> None:
    """DataError when the tokenizer of `source` reads `ids` (a sample of `data`) as mostly [UNK]."""
    if tokenizer.unk_token_id is None:
        return
    share = unknown_share(tokenizer, ids)
    if share > MAX_UNKNOWN_SHARE:
        raise DataError(f"{data}: the tokenizer of {source} reads {share:.0%} of its tokens as "
                        f"{tokenizer.unk_token}; training on them would learn nothing: use a tokenizer made for "
                        "this text (`retromae init-model --tokenizer NAME`, or a model folder with its own vocabulary)")


def check_safetensors(location: str | Path) -> None:
    """ModelLoadError naming the first `*.safetensors` file of a folder (or the file itself) that is truncated or
    not a safetensors file: its size must be 8 bytes of header length, the JSON header, and the tensors' bytes the
    header lists. Reads only the headers; a hub name (nothing on disk) passes."""
    location = Path(location)
    files = sorted(location.glob("*.safetensors")) if location.is_dir() else [location] if location.is_file() else []
    for path in files:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            try:
                header = json.loads(handle.read(length)) if 0 <= length <= size - 8 else None
            except (ValueError, UnicodeDecodeError):
                header = None
        if not isinstance(header, dict):
            raise ModelLoadError(f"{path}: not a safetensors file, or truncated inside its header ({size} bytes)")
        ends = [entry.get("data_offsets", [0, 0])[1] for key, entry in header.items()
                if key != "__metadata__" and isinstance(entry, dict)]
        expected = 8 + length + max(ends, default=0)
        if size != expected:
            raise ModelLoadError(f"{path}: truncated or damaged safetensors file: {size} bytes, its header "
                                 f"describes {expected}")


def is_random_init(model: str | Path) -> bool:
    """Whether `model` is a folder written by `save_random_model` (a random initialisation, not pre-trained)."""
    return (Path(model) / RANDOM_INIT_MARKER).is_file()
