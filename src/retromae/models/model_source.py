"""What a `--model` argument names: the one resolver every command uses before loading a model.

Owns: telling apart the sources a user may pass — a `retromae pretrain`/`finetune`/`train-reranker` output folder (which
stands for its `encoder/` or `reranker/`; an untied fine-tune's for the tower of the side a caller encodes, its
`query-encoder/` or `encoder/`, each recording its side: `tower_side`, `tower_folder`), our exported encoder folder
(`retromae_encoder.json`), a sentence-transformers folder (the transformer in the folder itself or in a module folder
such as `0_Transformer/`), a plain Hugging Face model folder, or a hub name — and the one-line error naming what a
folder holds and what to pass instead; that a sentence-transformers module's path names a folder inside the model
folder, covered by its fingerprint (`module_path`); and the sanity checks of a loaded tokenizer (a vocabulary of special
tokens only, more tokens than the model embeds, a corpus read as mostly `[UNK]`; at load time, `check_tokenizer_reads`:
ids beyond the model's embeddings (naming the file that brought a token tokenizer.json lacks), a special token that is a
word's id too, a sample text it cannot read, a special token tokenizer.json does not mark special (named in the file
that declares it, `check_special_tokens`), and first a normalizer or pre-tokenizer that would make a text many times
longer, `check_tokenizer_growth`; `check_needed_tokens`: a special token a command needs) and of a tokenizer.json before
the tokenizers library reads it (`check_tokenizer_file`); that every file of a model folder is a regular file
(`check_model_files`: a FIFO would hang its reader); and that a folder's safetensors files are whole and their headers
true (`check_safetensors`: a truncated file, a header whose offsets, shapes or types lie, an integer weight are named
before a library fails on them without their name, or reads them as other numbers). Does not own loading weights
(`retromae.models.encoder`, `retromae.models.masked_lm`) nor a folder's pooling
(`retromae.models.encoder.describe_folder`).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import struct
import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from retromae.runtime.errors import DataError, ModelLoadError, tokenizer_panics
from retromae.runtime.lines import file_kind, loads_finite, numbered_line_pieces, quoted, read_json_file
from retromae.runtime.run_folder import fingerprinted

# Written beside a random initialisation (never copied into a pre-trained export), so that a run can tell it starts
# from scratch: retromae+contrastive asks for an explicit --contrastive-weight there.
RANDOM_INIT_MARKER = "random-init.json"

ENCODER_FILE = "retromae_encoder.json"
RUN_MARKER = "retromae-run.json"
HEAD_FILE = "pretrain_head.safetensors"  # the pre-training head a `retromae pretrain` run leaves beside encoder/
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# What `save_pretrained` of a model and of its tokenizer writes in a folder: the model's files (in shards, with their
# index, above its max_shard_size: a pattern of names, `run_folder.outputs_in`) and a tokenizer's of every common kind
# (`saved_files` adds the names of a tokenizer's own kind).
SAVED_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "model-?????-of-?????.safetensors",
               "generation_config.json", *TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json",
               "chat_template.jinja", "vocab.txt", "vocab.json", "merges.txt", "spm.model", "spiece.model",
               "sentencepiece.bpe.model", "tokenizer.model")
RUN_MODELS = ("encoder", "reranker")  # the model folder a run leaves, in the order looked for
TOWERS = {"query": "query-encoder", "passage": "encoder"}  # an untied fine-tune's towers, by the side each encodes
ANY_SIDE = "any"  # `resolve_model`'s side for a caller that encodes no text (a check of what a folder is)
MAX_UNKNOWN_SHARE = 0.5  # a corpus read as more [UNK] than this is another language or a missing vocabulary
# A Hugging Face Hub model id: `name` or `owner/name`, each part letters, digits, '-', '_' and '.', at most 96 long,
# not starting or ending with '-' or '.', without '--' or '..' (the hub's own rules).
HUB_ID = re.compile(r"(?!.*(--|\.\.))((?![-.])[\w.-]{1,96}(?<![-.])/)?(?![-.])[\w.-]{1,96}(?<![-.])", re.ASCII)
PASS = ("pass a finished `retromae pretrain`/`finetune` output folder, its encoder/, a sentence-transformers "
        "folder, a Hugging Face model folder (config.json with its weights and tokenizer) or a hub name")
# safetensors' tensor types and their sizes in bytes; a model's weights are of the floating-point ones
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
                      "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
FLOATING_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
# The only integer tensors of a model checkpoint: BERT-family buffers (all-MiniLM-L6-v2 saves embeddings.position_ids
# as I64). Any other integer or boolean tensor is a weight whose bytes would be read as other numbers.
INTEGER_BUFFERS = ("position_ids", "token_type_ids")
MAX_HEADER = 100_000_000  # the largest safetensors header the safetensors library reads
TOKEN_IDS = 1 << 32  # the tokenizers library stores a token id as an unsigned 32-bit number
# What a tokenizer.json may be before it is read (audit 7, section 9: 2,000,125 tokens, 40 MB, cost 1.35 GB and 15 s
# before the id check refused them). The largest public vocabularies hold about 250,000-262,000 tokens (XLM-R, BLOOM,
# Gemma) in at most about 35 MB of tokenizer.json; these bounds are twice to four times that, which no real model
# reaches. Against the model's config.json vocab_size, a file may hold `TOKENIZER_FIXED_BYTES` (normalizers, a
# Unigram's character map, added tokens) and `TOKENIZER_BYTES_PER_TOKEN` a token (the entry, its merge, escapes).
MAX_TOKENIZER_BYTES = 64 << 20
MAX_TOKENIZER_ENTRIES = 1 << 20
TOKENIZER_FIXED_BYTES = 8 << 20
TOKENIZER_BYTES_PER_TOKEN = 512
SHOWN_CHARACTERS = 60  # of a value from a hostile file shown in an error
# The vocabulary files a slow or converted tokenizer reads when a folder has no tokenizer.json (WordPiece's vocab.txt,
# byte-level BPE's merges.txt; its vocab.json is JSON), each read as UTF-8 text line by line
TEXT_VOCABULARIES = ("vocab.txt", "merges.txt")
VOCABULARY_PIECE = 1 << 20  # bytes of a vocabulary line checked at a time (a hostile file may be one line)
PROBE = "A sample of text to read."  # what every tokenizer must read into ordinary tokens when it is loaded
# The special tokens a command may need of a tokenizer (`check_needed_tokens`), each with what it is needed for
NEEDED_TOKENS = {"pad": "every command pads a batch of texts of different lengths with",
                 "mask": "pre-training masks tokens with"}
# The special tokens a tokenizer names by role, which commands read by name (`check_special_tokens`)
SPECIAL_ROLES = ("mask", "pad", "cls", "bos", "sep", "eos", "unk")
# The files beside tokenizer.json that may name a tokenizer's tokens, as transformers reads them (`declared_by`)
DECLARING_FILES = ("special_tokens_map.json", "tokenizer_config.json", "added_tokens.json")
SHOWN_SPECIAL = 6  # of a tokenizer's special tokens named in an error
# What a tokenizer's normalizer and pre-tokenizer may make of a text, which the tokenizers library reads whole before it
# cuts it to its tokens (audit 8, section 6: a normalizer's Replace of "e" by 4,000 characters made 50 short documents
# cost 27 s and 2.9 GB). Run on GROWTH_PROBE, real tokenizers make 0.85 (BERT uncased) to 1.47 (byte-level BPE:
# RoBERTa, GPT-2, ModernBERT) times its characters; the strings their normalizers put in place of characters multiply a
# text's length by at most 36 (XLM-R's and DeBERTa-v3's: 18 for the longest replacement of their sentencepiece map,
# NFKC's of U+FDFA, times 2 for a Replace by a space of what a regular expression matches).
MAX_PROBE_GROWTH = 4
MAX_DECLARED_GROWTH = 64
GROWTH_PROBE = ("The quick brown fox jumps over the lazy dog, THE QUICK BROWN FOX. Ünïcödé: café naïve façade "
                "Straße Æsir œuvre İstanbul ﬁnance Ελληνικά κείμενα Русский текст עברית العربية हिन्दी ภาษาไทย "
                "日本語のテキスト 中文文本 한국어 텍스트 ＡＢＣ１２３ ①②③ ㎏ ½ 0123456789 3.14159 -42 1e10 "
                "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ «»—–…¿¡   two  spaces\ttab\nnewline\r\n \u00a0nbsp \u3000 "
                "😀👍🏽 end.")


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


def resolve_model(name: str | Path, option: str = "--model", side: str | None = None) -> ModelSource:
    """Say what `name` is, or raise ModelLoadError naming what was found there and what to pass. `side`: the texts
    the caller encodes with the model, "query" or "passage" (an untied fine-tune's run folder stands for the tower
    of that side, and a tower's own folder may not encode the other side: `_check_side`), None for both (such a run
    folder refused: `_tower`), or `ANY_SIDE` for a caller that encodes nothing (the run folder stands for its
    passage tower)."""
    given = str(name)
    path = os.path.expanduser(given)
    if not looks_local(path):
        return ModelSource(given, path)
    folder = Path(path)
    if not folder.is_dir():
        raise ModelLoadError(f"{option} {given}: no such folder; {PASS}")
    if holds_towers(folder):
        tower = _tower(given, folder, option, side)
        return _model_folder(str(tower), tower, option, kind="run")
    inner = next((folder / sub for sub in RUN_MODELS if os.path.lexists(folder / sub / "config.json")), None)
    if inner is not None:
        return _model_folder(given, inner, option, kind="run")
    _check_side(given, folder, option, side)
    return _model_folder(given, folder, option)


def holds_towers(folder: Path) -> bool:
    """Whether `folder` holds the two towers of an untied fine-tune (`finetune --untie`: a model folder of each name
    of `TOWERS`)."""
    return all(os.path.lexists(folder / name / "config.json") for name in TOWERS.values())


def _tower(given: str, folder: Path, option: str, side: str | None) -> Path:
    """The tower of `side` in the untied fine-tune `folder` holds (its passage tower for `ANY_SIDE`); ModelLoadError
    for None: one model would encode both sides."""
    if side is None:
        raise ModelLoadError(f"{option} {given}: holds the two towers of an untied fine-tune ({TOWERS['query']}/ "
                             f"encodes queries, {TOWERS['passage']}/ passages), and one model is read here for both "
                             "sides; name one tower's folder, or give the run folder where each side is encoded by "
                             "its own tower (evaluate, mine, encode, search)")
    return folder / TOWERS.get(side, TOWERS["passage"])


def _check_side(given: str, folder: Path, option: str, side: str | None) -> None:
    """ModelLoadError where `folder` is the tower of an untied fine-tune that encodes the side other than `side`."""
    own = tower_side(folder) if side in TOWERS else ""
    if own and own != side:
        texts = {"query": "queries", "passage": "passages"}
        raise ModelLoadError(f"{option} {given}: is the {own} tower of an untied fine-tune, which encodes "
                             f"{texts[own]}; its {texts[side]} are encoded by its {side} tower "
                             f"{folder.parent / TOWERS[side]}: name that, or the run folder {folder.parent} (each "
                             "side encoded by its own tower)")


def tower_side(folder: str | Path) -> str:
    """The side ("query" or "passage") that the model folder `folder` encodes as a tower of an untied fine-tune, ""
    for any other model: the `tower` its retromae_encoder.json records (written by `finetune --untie`), else, for a
    run written before that record, the side its name has beside its twin (`holds_towers`); ModelLoadError naming
    the file for a `tower` of another value."""
    path = Path(os.path.expanduser(str(folder)))
    record = read_json(path / ENCODER_FILE, dict) if path.is_dir() else None
    if record is None:
        return ""
    side = record.get("tower")
    if side is None:
        return next((side for side, name in TOWERS.items() if path.name == name and holds_towers(path.parent)), "")
    if side not in TOWERS:
        raise ModelLoadError(f"{path / ENCODER_FILE}: tower is {quoted(side)}; it must be query or passage")
    return side


def tower_folder(name: str | Path, side: str) -> Path | None:
    """The folder of the tower that encodes `side` in the untied fine-tune `name` names (its run folder, or either
    tower's folder, whose twin lies beside it), or None where `name` names no such model."""
    path = Path(os.path.expanduser(str(name)))
    if path.is_dir() and holds_towers(path):
        return path / TOWERS[side]
    own = tower_side(path)
    if not own:
        return None
    return path if own == side else path.parent / TOWERS[side]


def resolve_tokenizer(name: str | Path, option: str = "--tokenizer", side: str = ANY_SIDE) -> ModelSource:
    """Like `resolve_model`, but a folder holding only a tokenizer (tokenizer.json, tokenizer_config.json) is one;
    an untied fine-tune's towers share theirs (`side`: any, a tokenizer encodes no side)."""
    folder = Path(os.path.expanduser(str(name)))
    if folder.is_dir():
        check_model_files(folder)
    if any((folder / file).is_file() for file in TOKENIZER_FILES) and not (folder / "config.json").is_file():
        return ModelSource(str(name), str(folder), "", "tokenizer")
    return resolve_model(name, option, side)


def _model_folder(given: str, folder: Path, option: str, kind: str | None = None) -> ModelSource:
    """The source a model folder is (`_folder_source`), once its files are known to be files (`check_model_files`)."""
    source = _folder_source(given, folder, option, kind)
    check_model_files(folder)
    return source


def _folder_source(given: str, folder: Path, option: str, kind: str | None = None) -> ModelSource:
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
            return module_path(str(folder), module)
    raise ModelLoadError(f"{folder / 'modules.json'}: no Transformer module; not a sentence-transformers text model")


def module_path(source: str, module: dict[str, Any]) -> str:
    """The `path` of a module that the modules.json of `source` (a model folder or hub name) lists: the name of a
    folder inside it ("" for the folder itself) whose files the folder's fingerprint covers
    (`runtime.run_folder.fingerprinted`: what a finished output's model is checked by). ModelLoadError naming
    modules.json and the path when it is absolute, holds `..`, names a hidden folder or one the fingerprint skips
    (checkpoints/, onnx/, openvino/) or leads out of the folder through a symbolic link. Every reader of a module's
    files (its weights, tokenizer and configs) joins the path this returns."""
    path = module.get("path", "")
    named = isinstance(path, str) and "\0" not in path
    root = os.path.realpath(source) if named and os.path.isdir(source) else ""
    real = os.path.realpath(os.path.join(root, path)) if root else ""
    if not named:
        fault = "is no folder name"
    elif os.path.isabs(path):
        fault = "is absolute"
    elif ".." in PurePath(path).parts:
        fault = "holds '..'"
    elif not fingerprinted(PurePath(path)):
        fault = "names a hidden folder or one the model's fingerprint skips"
    elif root and os.path.commonpath([root, real]) != root:
        fault = f"leads out of the model folder through a symbolic link (to {quoted(real)})"
    else:
        return path
    raise ModelLoadError(f"{os.path.join(source, 'modules.json')}: the path {quoted(path)} of module "
                         f"{quoted(module.get('name'))} {fault}; a module's path names a folder inside the model "
                         "folder")


def read_json(path: Path, kind: type = object) -> Any:
    """The JSON value of a model folder's file, or None when there is no such file; ModelLoadError when it is not a
    regular file, is invalid, is not a `kind` (`read_json_file`) or holds NaN or an infinity (a config's
    `layer_norm_eps: NaN` would make every vector NaN)."""
    if file_kind(path) == "missing":
        return None
    try:
        return read_json_file(path, kind)
    except DataError as error:
        raise ModelLoadError(str(error)) from None


def check_model_files(folder: Path, levels: int = 2) -> None:
    """ModelLoadError naming the first entry of a model folder or of its subfolders (`levels`: the folder and its
    sentence-transformers module folders) that is neither a regular file nor a folder. Any file in them may be read,
    by us or by transformers, tokenizers or sentence-transformers (config.json, tokenizer files, safetensors shards
    and their index, retromae_encoder.json, modules.json, 1_Pooling/config.json): a FIFO would block that reader
    forever, a device never end. Checked where a folder is resolved and before transformers reads it
    (`pretrained.check_folder`); our own reads check again (`read_json`, `check_safetensors`)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as error:
        raise ModelLoadError(f"{folder}: cannot list the model folder ({error.strerror})") from None
    for entry in entries:
        kind = file_kind(entry)
        if kind == "a folder" and levels > 1:
            check_model_files(entry, levels - 1)
        elif kind not in (None, "a folder", "missing"):  # missing: a dangling link, which readers find absent
            raise ModelLoadError(f"{entry}: is {kind}, not a regular file; a model folder holds only files and "
                                 "folders")


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
    would become [UNK]) or has more tokens, or a larger id, than the model's `vocab_size` embeddings hold (checked
    here for every source, a hub name's included; a folder's ids were checked against its config.json when the
    tokenizer was loaded: `check_tokenizer_reads`)."""
    special = set(tokenizer.all_special_ids)
    if len(tokenizer) <= len(special):
        raise ModelLoadError(f"{source}: its tokenizer knows only its {len(tokenizer)} special tokens, so every word "
                             "would be read as [UNK]: the folder holds no vocabulary (tokenizer.json or vocab.txt); "
                             "copy in the tokenizer files of the model it was made from, or pass a folder or hub "
                             "name that has them (`retromae init-model --tokenizer NAME` makes a model folder with "
                             "both)")
    largest = max(tokenizer.get_vocab().values(), default=-1)
    if vocab_size is not None and (len(tokenizer) > vocab_size or largest >= vocab_size):
        raise ModelLoadError(f"{source}: the tokenizer has {len(tokenizer)} tokens (ids up to {largest}) but the "
                             f"model embeds only {vocab_size}; use the tokenizer the model was made with")


def _check_token_ids(tokenizer: Any, where: str, vocab_size: int | None, folder: Path | None) -> dict[int, str]:
    """`check_tokenizer_reads`' check of the ids: every id of the vocabulary and added tokens below `vocab_size`
    (naming the file that added a token tokenizer.json lacks), no special token with a word's id; returns the special
    tokens by id."""
    vocab = tokenizer.get_vocab()
    special = dict(zip(tokenizer.all_special_ids, tokenizer.all_special_tokens, strict=True))
    largest, token = max(((index, token) for token, index in vocab.items()), default=(-1, ""))
    if vocab_size is not None and largest >= vocab_size:
        raise ModelLoadError(f"{introduced_by(folder, token, where)}: the token {_shown(token)} has the id {largest}, "
                             f"but the model embeds only {vocab_size} tokens (ids 0 to {vocab_size - 1}); use the "
                             "tokenizer the model was made with")
    names = set(tokenizer.all_special_tokens)
    word = next(((word, index) for word, index in vocab.items() if index in special and word not in names), None)
    if word is not None:
        raise ModelLoadError(f"{where}: its special token {_shown(special[word[1]])} has the id {word[1]} of the word "
                             f"{_shown(word[0])}; the model could not tell the word from the special token: give "
                             "each its own id")
    return special


def check_tokenizer_reads(tokenizer: Any, where: str, vocab_size: int | None, folder: Path | None = None) -> None:
    """ModelLoadError naming `where` (a tokenizer's tokenizer.json, folder or hub name) unless the tokenizer reads
    text into ids a model of `vocab_size` embeddings (None: not known) can look up: its special tokens those its
    tokenizer.json marks so (`check_special_tokens`, where the tokenizer was read from a `folder`); every id of its
    vocabulary and added tokens below `vocab_size` (naming the file that added a token tokenizer.json lacks,
    `declared_by`); no special token with the id of a word (the model could not tell them apart);
    and `PROBE` read as at least one token besides its special ones ([UNK] counts: the text was read), framed by
    special tokens below `vocab_size` only (the post-processor's [CLS] and [SEP]). Each failure loads, but ends
    mid-run (an index beyond the embeddings) or reads every text alike (a normalizer that erases all); a panic while
    reading is one line (`tokenizer_panics`). What its normalizer and pre-tokenizer make of a text is bounded first
    (`check_tokenizer_growth`): the sample is read only then."""
    with tokenizer_panics():
        check_tokenizer_growth(tokenizer, where)
    if folder is not None:
        check_special_tokens(tokenizer, folder, where)
    special = _check_token_ids(tokenizer, where, vocab_size, folder)
    with tokenizer_panics():
        plain = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
        framed = tokenizer(PROBE)["input_ids"]
    if all(index in special and index != tokenizer.unk_token_id for index in plain):
        read = " ".join(tokenizer.convert_ids_to_tokens(plain)) or "nothing"
        raise ModelLoadError(f"{where}: it reads the text {PROBE!r} as {read}: its normalizer or pre-tokenizer "
                             "erases text, so every text would read alike; use the tokenizer the model was made with")
    for index in Counter(framed) - Counter(plain):  # what its post-processor adds around a text
        if vocab_size is not None and index >= vocab_size:
            raise ModelLoadError(f"{where}: its post-processor adds the id {index} around every text, but the model "
                                 f"embeds only {vocab_size} tokens; use the tokenizer the model was made with")
        if index not in special:
            raise ModelLoadError(f"{where}: its post-processor adds the id {index} "
                                 f"({_shown(tokenizer.convert_ids_to_tokens(index))}) around every text, the id of "
                                 "no special token; use the tokenizer the model was made with")


def check_special_tokens(tokenizer: Any, folder: Path, where: str) -> None:
    """The one rule of which tokens may be special: ModelLoadError unless each special token of the tokenizer (those it
    names by role, `SPECIAL_ROLES`: the mask pre-training masks with, the pad, the cls/bos and sep/eos that frame a
    text, the unk; and any other it holds special) is one its `folder`'s tokenizer.json marks special
    (`tokenizer_file_tokens`; their ids are `check_tokenizer_reads`'s). Named is the file that declares it
    (`declared_by`; else `where`): a tokenizer_config.json or special_tokens_map.json naming an ordinary token as a
    special one makes transformers read that word as the special token (pre-training would mask with the word, and
    neither mask nor predict it where a text holds it); naming a token tokenizer.json lacks (or a tokenizer_class
    bringing its own) gives it an id the model was not made with. A folder without tokenizer.json is not checked (a
    vocab.txt marks no token special)."""
    held = tokenizer_file_tokens(folder)
    if held is None:
        return
    tokens, own = held
    for token, index in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids, strict=True):
        if token in own:
            continue
        role = next((f"its {name} token" for name in SPECIAL_ROLES if getattr(tokenizer, f"{name}_token") == token),
                    "a special token")
        source, declaration = declared_by(folder, token) or (where, f"the tokenizer makes {quoted(token)} special")
        if token in tokens:
            marked = [quoted(name) for name in own][:SHOWN_SPECIAL] + ["..."] * (len(own) > SHOWN_SPECIAL)
            raise ModelLoadError(f"{source}: {declaration}, an ordinary token of tokenizer.json (id "
                                 f"{tokens[token]}), not one of the special tokens it marks "
                                 f"({', '.join(marked) or 'none'}): the model would read that token as {role}; name "
                                 "one of those")
        raise ModelLoadError(f"{source}: {declaration}, which tokenizer.json does not hold: transformers adds it as "
                             f"{role} with the id {index}, which the model was not made with; use the tokenizer the "
                             "model was made with")


def tokenizer_file_tokens(folder: Path) -> tuple[dict[str, int], dict[str, int]] | None:
    """The ids of the tokens a folder's tokenizer.json holds (its vocabulary and added tokens) and of those it marks
    special (added tokens with `special`, and its model's unknown token); None without a tokenizer.json (the file was
    checked when the folder was: `check_tokenizer_file`)."""
    data = read_json(folder / "tokenizer.json", dict)
    if data is None:
        return None
    model, vocab = data.get("model") or {}, (data.get("model") or {}).get("vocab") or {}
    if isinstance(vocab, list):  # a Unigram's [piece, score] pairs
        tokens = {entry[0]: index for index, entry in enumerate(vocab)
                  if isinstance(entry, list) and entry and isinstance(entry[0], str)}
        unknown = next((token for token, index in tokens.items() if index == model.get("unk_id")), None)
    else:
        tokens, unknown = dict(vocab), model.get("unk_token")
    added = [(entry.get("content"), entry.get("id"), entry.get("special"))
             for entry in data.get("added_tokens") or [] if isinstance(entry, dict)]
    own = {unknown: tokens[unknown]} if unknown in tokens else {}
    own |= {content: index for content, index, special in added if special is True}
    return tokens | {content: index for content, index, _ in added}, own


def declared_by(folder: Path, token: str) -> tuple[str, str] | None:
    """The file of `folder` beside tokenizer.json that brings `token` to its tokenizer, and how, as a message says it:
    a key of special_tokens_map.json or tokenizer_config.json whose value is or holds it (`_named_tokens`),
    added_tokens.json adding it, else tokenizer_config.json's tokenizer_class (a class brings its own special tokens);
    None where none does."""
    for name in DECLARING_FILES:
        settings = read_json(folder / name, dict) or {}
        if name == "added_tokens.json" and token in settings:
            return str(folder / name), f"adds the token {quoted(token)}"
        key = next((key for key, value in settings.items() if token in _named_tokens(key, value)), None)
        if key is not None:
            return str(folder / name), f"its {key} names {quoted(token)}"
    settings = read_json(folder / "tokenizer_config.json", dict) or {}
    if "tokenizer_class" in settings:
        return (str(folder / "tokenizer_config.json"),
                f"its tokenizer_class {quoted(settings['tokenizer_class'])} brings {quoted(token)}")
    return None


def introduced_by(folder: Path | None, token: str, where: str) -> str:
    """The file at fault for a token of a tokenizer read from `folder` (None: a hub name): `where` (its tokenizer.json)
    where tokenizer.json holds it, else the file that brings it (`declared_by`)."""
    held = tokenizer_file_tokens(folder) if folder is not None else None
    if held is None or token in held[0]:
        return where
    return (declared_by(folder, token) or (where,))[0]


def _named_tokens(key: str, value: Any) -> set[str]:
    """The tokens a key of special_tokens_map.json or tokenizer_config.json names (a `*_token`, a list of
    `*_tokens`, `added_tokens_decoder`'s entries): a text, or an entry's `content`, at any depth."""
    if not key.endswith(("_token", "_tokens", "added_tokens_decoder")):
        return set()
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {value["content"]} if isinstance(value.get("content"), str) else _named_tokens(key, [*value.values()])
    return set().union(*(_named_tokens(key, item) for item in value)) if isinstance(value, list) else set()


def check_needed_tokens(tokenizer: Any, where: str, needs: Sequence[str] = ()) -> None:
    """ModelLoadError naming `where` (the tokenizer's tokenizer_config.json, else its source) when the tokenizer lacks
    a special token a command needs: a pad token, which every command pads a batch of texts of different lengths with
    (transformers fails at the first batch; padding by hand would put whatever token has id 0); the mask token where
    `needs` "mask" (pre-training); and where it `needs` "pair" (a cross-encoder), a pair framed by special tokens: one
    first, which its classifier reads, and one between the query and the passage, which would else run together."""
    for name in ("pad", *(need for need in needs if need != "pair")):
        if getattr(tokenizer, f"{name}_token_id") is None:
            raise ModelLoadError(f"{where}: the tokenizer has no {name} token ({name}_token), which "
                                 f"{NEEDED_TOKENS[name]}; set {name}_token to one of its tokens")
    if "pair" in needs:
        with tokenizer_panics():
            special = tokenizer(PROBE, PROBE, return_special_tokens_mask=True)["special_tokens_mask"]
        text = [index for index, flag in enumerate(special) if not flag]
        if not special[0] or all(special[index] == 0 for index in range(text[0], text[-1] + 1)):
            place = "before" if not special[0] else "between the texts of"
            raise ModelLoadError(f"{where}: the tokenizer puts no special token {place} a (query, passage) pair "
                                 "(BERT's reads [CLS] query [SEP] passage [SEP]): a cross-encoder's classifier reads "
                                 "the first token and must tell the query from the passage; use a tokenizer whose "
                                 "post-processor frames pairs")


def check_tokenizer_growth(tokenizer: Any, where: str) -> None:
    """ModelLoadError naming `where` (as `check_tokenizer_reads`) when the tokenizer's normalizer and pre-tokenizer may
    make a text many times longer: the tokenizers library reads a whole text so before it cuts it to its tokens, so
    each of its characters would cost that many. Refused: steps whose strings put in place of characters
    (`_declared_growth`) may multiply a text's length by more than `MAX_DECLARED_GROWTH` (a pattern the sample lacks,
    steps that compound), said before any step runs; and steps that, run one at a time on `GROWTH_PROBE`, make more
    than `MAX_PROBE_GROWTH` times its characters (stopped at the step that does: a built-in step multiplies by a few at
    most). With the characters a text is read to bounded (`retromae.data.long_texts`), so is what one text costs."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow tokenizer: Python code of transformers', with no steps from a file
        return
    steps = _steps(backend.normalizer, "normalizers") + _steps(backend.pre_tokenizer, "pretokenizers")
    inserting = [found for _, spec in steps if (found := _declared_growth(spec))[0] > 1]
    declared = math.prod(growth for growth, _ in inserting)
    if declared > MAX_DECLARED_GROWTH:
        steps_shown = Counter(what for _, what in inserting).most_common()
        shown = "; ".join(f"{count} × {what}" if count > 1 else what for what, count in steps_shown[:3])
        made = f"{declared:,.0f}" if declared < 1e9 else "over a billion"
        raise ModelLoadError(f"{where}: its normalizer may make {made} characters of one "
                             f"({shown}{'; ...' if len(steps_shown) > 3 else ''}), more than the "
                             f"{MAX_DECLARED_GROWTH} of any real tokenizer's: every text would cost that many times "
                             "its length to read; use the tokenizer the model was made with")
    from tokenizers import PreTokenizedString, normalizers, pre_tokenizers

    pieces = PreTokenizedString(GROWTH_PROBE)
    for key, spec in steps:
        step = normalizers.Sequence([]) if key == "normalizers" else pre_tokenizers.Sequence([])
        step.__setstate__(json.dumps(spec).encode())  # the one step, as pickling restores it
        pieces.normalize(step.normalize) if key == "normalizers" else step.pre_tokenize(pieces)
        size = sum(len(piece) for piece, _, _ in pieces.get_splits())
        if size > MAX_PROBE_GROWTH * len(GROWTH_PROBE):
            raise ModelLoadError(f"{where}: its normalizer and pre-tokenizer make {size:,} characters of a sample "
                                 f"text of {len(GROWTH_PROBE)} by their {spec.get('type')} step, more than the "
                                 f"{MAX_PROBE_GROWTH} times as many of any real tokenizer: every text would cost that "
                                 "many times its length to read; use the tokenizer the model was made with")


def _steps(component: Any, key: str) -> list[tuple[str, dict[str, Any]]]:
    """The steps of a normalizer or pre-tokenizer (`key`: what its JSON calls a Sequence's steps) in order, nested
    Sequences flattened, each with `key` and its JSON object."""
    def flattened(spec: dict[str, Any]) -> list[dict[str, Any]]:
        return [step for inner in spec[key] for step in flattened(inner)] if spec.get("type") == "Sequence" else [spec]

    return [] if component is None else [(key, spec) for spec in flattened(json.loads(component.__getstate__()))]


def _declared_growth(spec: dict[str, Any]) -> tuple[float, str]:
    """How many times longer a normalizer step may make a text by the strings it puts in place of characters, and
    which: a Replace's `content` for each match of its pattern (a string of n characters: content / n; a regular
    expression, which may match between any two characters: 1 + content), a Prepend's `prepend` before each piece of
    text between added tokens (1 + prepend: a piece may be one character), the longest replacement of a sentencepiece
    map (Precompiled) for each character; 1 for every other step (built-in ones are run on `GROWTH_PROBE`)."""
    kind = spec.get("type")
    if kind == "Replace":
        content, pattern = len(spec["content"]), spec["pattern"]
        string = pattern.get("String")
        growth = max(1.0, content / len(string)) if string else 1.0 + content
        return growth, f"a Replace of {quoted(string or pattern.get('Regex'))} by {content:,} characters"
    if kind == "Prepend":
        return 1.0 + len(spec["prepend"]), f"a Prepend of {len(spec['prepend']):,} characters"
    if kind == "Precompiled":
        charsmap = base64.b64decode(spec["precompiled_charsmap"])
        trie = int.from_bytes(charsmap[:4], "little")  # then the trie, then its replacements, each ended by a NUL
        longest = max((len(text.decode("utf-8", "replace")) for text in charsmap[4 + trie:].split(b"\0")), default=1)
        return max(1.0, longest), f"a Precompiled map with replacements of up to {longest:,} characters"
    return 1.0, ""


def check_tokenizer_file(folder: Path, vocab_size: Any = None) -> None:
    """ModelLoadError naming a folder's tokenizer.json, before the tokenizers library reads it, when it is larger than
    a tokenizer can be (`_check_tokenizer_size`, before it is read: against the folder's config.json `vocab_size`
    where given), is no JSON object with a vocabulary (`model.vocab`) of at most `MAX_TOKENIZER_ENTRIES` tokens, an id
    is no unsigned 32-bit whole number, two tokens share an id (every word would become the same token) or the
    unknown token it names is not in its vocabulary (tokenizers would fail at the first unknown word, mid-run); and
    its text vocabulary files (`_check_vocabulary_files`), with or without a tokenizer.json. transformers checks none
    of this."""
    path = folder / "tokenizer.json"
    _check_tokenizer_size(path, vocab_size)
    tokenizer = read_json(path, dict)
    if tokenizer is None:
        _check_vocabulary_files(folder)
        return
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = tokenizer.get("added_tokens", [])
    if not isinstance(vocab, dict | list) or not isinstance(added, list):
        raise ModelLoadError(f"{path}: has no vocabulary (a \"model\" object with a \"vocab\") or no list of "
                             "\"added_tokens\"")
    if len(vocab) + len(added) > MAX_TOKENIZER_ENTRIES:
        raise ModelLoadError(f"{path}: holds {len(vocab):,} tokens and {len(added):,} added tokens, more than the "
                             f"{MAX_TOKENIZER_ENTRIES:,} any model's tokenizer holds (the largest public vocabularies "
                             "hold about 260,000)")
    ids = list(vocab.values()) if isinstance(vocab, dict) else []
    added_ids = [token.get("id") if isinstance(token, dict) else token for token in added]
    bad = [value for value in ids + added_ids if type(value) is not int or not 0 <= value < TOKEN_IDS]
    if bad:
        raise ModelLoadError(f"{path}: the token id {_shown(bad[0])} is no whole number from 0 to {TOKEN_IDS - 1}")
    shared = [(value, count) for value, count in Counter(ids).items() if count > 1]
    if shared:
        raise ModelLoadError(f"{path}: its vocabulary gives {shared[0][1]} tokens the id {shared[0][0]}; each token "
                             "needs its own id, or the model cannot tell them apart")
    _check_unknown_token(path, model, vocab)
    _check_vocabulary_files(folder)


def _check_tokenizer_size(path: Path, vocab_size: Any) -> None:
    """ModelLoadError naming tokenizer.json (`path`) when its size, read before the file is, passes
    `MAX_TOKENIZER_BYTES`, or what a tokenizer of the model's `vocab_size` tokens takes (`TOKENIZER_FIXED_BYTES` and
    `TOKENIZER_BYTES_PER_TOKEN` a token; not weighed where `vocab_size` is no positive whole number): parsing it and
    the tokenizers library's reading cost more than thirty times its size in memory."""
    try:
        size = path.stat().st_size if file_kind(path) is None else 0
    except OSError:
        return  # unreadable: `read_json` names it
    if size > MAX_TOKENIZER_BYTES:
        raise ModelLoadError(f"{path}: is {size:,} bytes, more than the {MAX_TOKENIZER_BYTES:,} any model's "
                             "tokenizer takes (the largest public ones take about 35 MB); not read")
    if type(vocab_size) is int and vocab_size > 0:
        room = TOKENIZER_FIXED_BYTES + TOKENIZER_BYTES_PER_TOKEN * vocab_size
        if size > room:
            raise ModelLoadError(f"{path}: is {size:,} bytes, more than a tokenizer of the model's {vocab_size:,} "
                                 f"tokens (config.json vocab_size) takes (at most {room:,}: "
                                 f"{TOKENIZER_FIXED_BYTES:,} and {TOKENIZER_BYTES_PER_TOKEN} a token); not read")


def _check_vocabulary_files(folder: Path) -> None:
    """ModelLoadError naming the file and line of a folder's vocab.txt or merges.txt that is not UTF-8 text (a
    tokenizer built from it failed with a UnicodeDecodeError that named no file), or naming its vocab.json when that
    is no JSON object of token ids (read by our one JSON parser: duplicate keys, NaN, nesting)."""
    for name in TEXT_VOCABULARIES:
        if file_kind(folder / name) != "missing":
            try:
                for _ in numbered_line_pieces(folder / name, VOCABULARY_PIECE):
                    pass
            except DataError as error:
                raise ModelLoadError(str(error)) from None
    vocab = read_json(folder / "vocab.json", dict)
    bad = [value for value in (vocab or {}).values() if type(value) is not int or not 0 <= value < TOKEN_IDS]
    if bad:
        raise ModelLoadError(f"{folder / 'vocab.json'}: the token id {_shown(bad[0])} is no whole number from 0 to "
                             f"{TOKEN_IDS - 1}")


def _check_unknown_token(path: Path, model: dict[str, Any], vocab: dict[str, int] | list[Any]) -> None:
    """ModelLoadError when the unknown token a tokenizer model names (`unk_token`, or a Unigram's `unk_id`) is not in
    its vocabulary."""
    unknown = model.get("unk_token")
    if isinstance(vocab, dict) and unknown is not None and unknown not in vocab:
        raise ModelLoadError(f"{path}: its unknown token {_shown(unknown)} is not in its vocabulary; the first word "
                             "it does not know would stop the run")
    index = model.get("unk_id")
    if isinstance(vocab, list) and index is not None and not (type(index) is int and 0 <= index < len(vocab)):
        raise ModelLoadError(f"{path}: its unk_id {_shown(index)} is no index of its {len(vocab)} tokens")


def _shown(value: Any) -> str:
    """`repr(value)`, cut to `SHOWN_CHARACTERS`: a value from a hostile file, in an error."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters)"


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
    """ModelLoadError naming the first `*.safetensors` file of a folder (or the file itself) that is not a regular
    file, is truncated, is not a safetensors file, or whose header lies (`_tensor_span`), before any library reads
    it: its size must be 8 bytes of header length, the JSON header, and the tensors' bytes the header lists, one
    after another. Reads only the headers; a hub name (nothing on disk) passes."""
    location = Path(location)
    if not location.is_dir():
        files = [location] if os.path.lexists(location) else []
    else:
        files = sorted(location.glob("*.safetensors"))
    for path in files:
        _check_safetensors_file(path)


def _check_safetensors_file(path: Path) -> None:
    kind = file_kind(path)
    if kind is not None:
        raise ModelLoadError(f"{path}: is {kind}, not a regular file")
    size = path.stat().st_size
    header, length = _safetensors_header(path, size)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise ModelLoadError(f"{path}: damaged safetensors file: its __metadata__ is no object of strings")
    end = 0
    for (begin, stop), name in sorted((_tensor_span(path, name, entry), name) for name, entry in header.items()):
        if begin != end:
            raise ModelLoadError(f"{path}: damaged safetensors file: the bytes of tensor {_shown(name)} start at "
                                 f"{begin} of its data, not at {end}, where those before it end")
        end = stop
    if size != 8 + length + end:
        raise ModelLoadError(f"{path}: truncated or damaged safetensors file: {size} bytes, its header "
                             f"describes {8 + length + end}")


def _safetensors_header(path: Path, size: int) -> tuple[dict[str, Any], int]:
    """The JSON object of a safetensors file's header, and its length in bytes."""
    with path.open("rb") as handle:
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        text = handle.read(length) if 0 <= length <= min(size - 8, MAX_HEADER) else None
    if text is None:
        raise ModelLoadError(f"{path}: not a safetensors file, or truncated inside its header ({size} bytes)")
    try:
        header = loads_finite(text.decode("utf-8"))
    except ValueError as error:  # not UTF-8 or JSON; NaN, a 5000-digit number, deep nesting (`loads_finite`)
        raise ModelLoadError(f"{path}: damaged safetensors file: its header is no valid JSON ({error})") from None
    if not isinstance(header, dict):
        raise ModelLoadError(f"{path}: damaged safetensors file: its header is no JSON object")
    return header, length


def _tensor_span(path: Path, name: str, entry: Any) -> tuple[int, int]:
    """The byte range `data_offsets` of one tensor of a safetensors header; ModelLoadError naming the file and the
    tensor unless its dtype is a safetensors type, floating-point but for `INTEGER_BUFFERS`, its shape a list of
    whole numbers, and its range as long as its shape of that type needs."""
    where = f"{path}: tensor {_shown(name)}"
    dtype = entry.get("dtype") if isinstance(entry, dict) else None
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
        raise ModelLoadError(f"{where}: the dtype {_shown(dtype)} is no safetensors type "
                             f"({', '.join(SAFETENSORS_DTYPES)})")
    if dtype not in FLOATING_DTYPES and name.rsplit(".", 1)[-1] not in INTEGER_BUFFERS:
        raise ModelLoadError(f"{where}: is {dtype}, but a model's weights are floating-point numbers "
                             f"({', '.join(FLOATING_DTYPES)}); its bytes would be read as other numbers")
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    if not _whole_numbers(shape):
        raise ModelLoadError(f"{where}: its shape {_shown(shape)} is no list of whole numbers")
    if not (_whole_numbers(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1]):
        raise ModelLoadError(f"{where}: its data_offsets {_shown(offsets)} are no pair [begin, end] of byte "
                             "positions with begin <= end")
    needed = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
    if offsets[1] - offsets[0] != needed:
        raise ModelLoadError(f"{where}: holds {offsets[1] - offsets[0]} bytes, but a {dtype} tensor of shape "
                             f"{_shown(shape)} takes {needed}")
    return offsets[0], offsets[1]


def _whole_numbers(value: Any) -> bool:
    """Whether `value` is a list of whole numbers (not booleans), none negative."""
    return isinstance(value, list) and all(type(item) is int and item >= 0 for item in value)


def saved_files(tokenizer: Any) -> tuple[str, ...]:
    """The names a model's and `tokenizer`'s `save_pretrained` write in a folder (None: a fast tokenizer's):
    `SAVED_FILES` and those its kind of tokenizer saves. What a writer of a model folder claims as its outputs
    (`runtime.run_folder.claim_folder`)."""
    names = getattr(tokenizer, "vocab_files_names", {}).values()
    return (*SAVED_FILES, *(name for name in names if name not in SAVED_FILES))


def is_random_init(model: str | Path) -> bool:
    """Whether `model` is a folder written by `save_random_model` (a random initialisation, not pre-trained)."""
    return (Path(model) / RANDOM_INIT_MARKER).is_file()


def ours_to_write(folder: str | None) -> bool:
    """Whether exports may be kept in `folder`: a local folder we may write, not an installed package's nor a
    Hugging Face cache's."""
    if folder is None or not Path(folder).is_dir() or not os.access(folder, os.W_OK):
        return False
    resolved = Path(folder).resolve()
    # huggingface_hub: its cache folder, where hub models are read from (a dependency of transformers)
    from huggingface_hub.constants import HF_HUB_CACHE

    foreign = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], HF_HUB_CACHE}
    return not any(resolved.is_relative_to(Path(root).resolve()) for root in foreign)
