"""Load any text encoder for inference, pool its token states into one vector per text, normalise.

Owns: `Encoder` (a transformers `AutoModel` + fast tokenizer + pooling; its forward pass, when texts are encoded, run
by torch or by an inference backend of `retromae.models.backends`, pooled here alike), reading the three
folder kinds (our export with `retromae_encoder.json`, a sentence-transformers folder, any plain Hugging Face
model folder or hub name) and saving our export. A sentence-transformers folder gives the vectors
`SentenceTransformer.encode` gives: each of its settings that changes them is applied (`max_seq_length`,
`do_lower_case`) or refused in one line naming the file and field (`describe_folder`). Does not own training,
objectives or decoder heads: those live in `objectives/` and `training/`, which call `Encoder.embed` for pooled
embeddings with gradients. The options that name an encoder (`EncoderOptions`) and `PoolingConfig` live in
`retromae.models.encoder_config`, which imports no torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
from tokenizers import normalizers
from tqdm.auto import tqdm
from transformers import AutoModel, PreTrainedModel, PreTrainedTokenizerBase

from retromae.data.long_texts import clip_texts
from retromae.models.backends import Backend
from retromae.models.encoder_config import (
    POOLINGS,
    QUANTIZED_BACKENDS,
    WITH_QUANTIZED_BACKEND,
    EncoderArguments,
    PoolingConfig,
    backend_of,
    device_name,
    dtype_name,
)
from retromae.models.finite import VECTOR_LIMIT, check_vectors, check_weights
from retromae.models.low_precision import LowPrecisionWeights
from retromae.models.masked_lm import check_max_length, position_limit
from retromae.models.model_source import (
    ENCODER_FILE,
    ModelSource,
    check_tokenizer,
    module_path,
    read_json,
    resolve_model,
    saved_files,
)
from retromae.models.onednn import PackedLinears
from retromae.models.pretrained import load_model, load_tokenizer
from retromae.runtime.console import notice, progress
from retromae.runtime.devices import resolve_device
from retromae.runtime.errors import ModelLoadError, tokenizer_panics
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import quoted
from retromae.runtime.options import checked_arguments, require
from retromae.runtime.precision import dtype_label, resolve_dtype
from retromae.runtime.run_folder import Naming, claim_folder, mark_started, quiet_entry_point

AUTOCAST_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}  # how a progress bar names the autocast dtype
DEFAULT_MAX_LENGTH = 512
TOKENIZE_CHUNK = 10_000  # texts `Encoder.token_table` tokenises at once
SAVE = "Encoder.save"  # what the marker of a folder `Encoder.save` wrote records (`run_folder.MARKER_COMMANDS`)
SAVE_NAMING = Naming(output="path", overwrite="overwrite=True")  # what its refusals call its arguments
# sentence-transformers names a pooling either as a mode string (v5+) or as boolean `pooling_mode_*` keys.
ST_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
ST_MODEL_FILE = "config_sentence_transformers.json"
# sentence-transformers' similarity functions that rank as an inner product does (cosine: of normalised vectors); None:
# the file does not say
ST_SIMILARITIES = (None, "cosine", "dot")
MODULE_ORDER = ("Transformer", "Pooling", "Normalize")  # the sentence-transformers modules read, in the order run
_PROMPTS_NOTED: set[tuple[str, str]] = set()  # (model, side) whose named prompt put was said (`side_prefix`)
# The fields of sentence_bert_config.json, which sentence-transformers passes to its Transformer module (one it does
# not know is an error there), each with the values under which `SentenceTransformer.encode`, `encode_query` and
# `encode_document` read texts as `Encoder` does; None: any value. `Encoder.load` applies max_seq_length and
# do_lower_case; unpad_inputs, backend and cache_dir say how it runs; query_length and document_length cut a query or a
# document at their own length in `encode_query` and `encode_document` (a length retromae takes only from
# --query-max-length and --passage-max-length), and query_expansion pads or cuts every query there: a folder is read
# only without them.
ST_TRANSFORMER_FIELDS: dict[str, tuple[Any, ...] | None] = {
    **dict.fromkeys(("max_seq_length", "do_lower_case", "unpad_inputs", "backend", "cache_dir")),
    **dict.fromkeys(("query_length", "document_length", "query_expansion"), (None,)),
    "transformer_task": ("feature-extraction",),
    "modality_config": ({"text": {"method": "forward", "method_output_name": "last_hidden_state"}},),
    "module_output_name": ("token_embeddings",),
    "tokenizer_name_or_path": (None,),
    **dict.fromkeys(("model_kwargs", "model_args", "processor_kwargs", "tokenizer_args", "config_kwargs",
                     "config_args", "processing_kwargs"), ({},)),
}


@dataclasses.dataclass
class FolderSpec:
    """What a model folder says about itself: where the transformer lives, its pooling and max length."""

    subfolder: str = ""
    pooling: PoolingConfig = dataclasses.field(default_factory=PoolingConfig)
    max_length: int | None = None
    declared: bool = False  # whether the folder declares its pooling (else `pooling` is the default)
    lowercase: bool = False  # sentence-transformers' do_lower_case: every text lowercased before it is tokenised
    prompts: dict[str, str] = dataclasses.field(default_factory=dict)  # side → its named prompt (`named_prompts`)


@dataclasses.dataclass(frozen=True)
class Towers:
    """The encoder of each side: an untied fine-tune's query and passage towers, else one encoder for both
    (`EncoderOptions.load_towers`)."""

    query: Encoder
    passage: Encoder


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, config: PoolingConfig) -> torch.Tensor:
    """Pool token states `(B, L, D)` under `attention_mask` `(B, L)` into `(B, D)` text vectors."""
    hidden = hidden.float()  # pool in float32 even under autocast
    if config.pooling == "cls":
        pooled = hidden[:, 0]  # (B, D)
    else:
        mask = attention_mask.unsqueeze(-1).float()  # (B, L, 1)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B, D)
    return F.normalize(pooled, dim=-1) if config.normalize else pooled


def longest_first(offsets: np.ndarray) -> np.ndarray:
    """`(N,)` text indices, longest first and ties in input order, of `Encoder.token_table`'s `(N + 1,)` offsets: the
    order `Encoder.encode` batches texts in."""
    return np.argsort(-np.diff(offsets), kind="stable")


def _read_json(source: str, filename: str, kind: type = dict, optional: bool = False) -> Any:
    """A JSON file (a `kind`: an object, else an array) of a local folder or hub repository, or None when it has no
    such file (or, `optional`, when it is not in the Hugging Face cache offline: a file read only to check it, which
    a model cached before retromae read it lacks); ModelLoadError naming the file when it holds another JSON value
    (`model_source.read_json`)."""
    if os.path.isdir(source):
        return read_json(Path(source) / filename, kind)
    try:
        downloaded = Path(hf_hub_download(source, filename))
    except LocalEntryNotFoundError as error:  # offline and not cached: a subclass of EntryNotFoundError
        if optional:
            return None
        raise _load_error(source, f"not a local folder, and not in the Hugging Face cache ({error})") from error
    except EntryNotFoundError:
        return None
    except Exception as error:  # any other hub failure (missing repo, bad id, network) means it cannot load
        raise _load_error(source, f"not a local folder, and the Hugging Face Hub lookup failed: {error}") from error
    return read_json(downloaded, kind)


def _load_error(source: str, reason: str) -> ModelLoadError:
    """A one-line ModelLoadError naming the model."""
    return ModelLoadError(f"cannot load model {source!r}: {' '.join(reason.split())}")


def _st_pooling(source: str, path: str) -> str:
    """The pooling mode of a sentence-transformers Pooling module, if we support it; ModelLoadError naming its
    config.json when it leaves a prompt's tokens out of the pooling (`include_prompt` false: retromae pools every
    token, those of a --query-prefix or --passage-prefix too)."""
    config = _read_json(source, f"{path}/config.json") or {}
    mode = config.get("pooling_mode") or [name for key, name in ST_POOLING_KEYS.items() if config.get(key)]
    modes = [mode] if isinstance(mode, str) else list(mode)
    other = [key for key, value in config.items() if key.startswith("pooling_mode_") and value
             and key not in ST_POOLING_KEYS]
    if len(modes) != 1 or modes[0] not in POOLINGS or other:
        raise ModelLoadError(f"{source}: sentence-transformers pooling {modes + other} is not supported "
                             f"(supported: {', '.join(POOLINGS)})")
    if config.get("include_prompt", True) is not True:
        raise ModelLoadError(f"{os.path.join(source, path, 'config.json')}: include_prompt is "
                             f"{quoted(config['include_prompt'])}: sentence-transformers leaves a prompt's tokens out "
                             "of the pooling, and retromae pools every token of a text and its prefix; a folder is "
                             "read only with include_prompt true")
    return modes[0]


def _st_transformer(source: str, path: str) -> tuple[int | None, bool]:
    """The max length and `do_lower_case` of the Transformer module at `path`. The length: `max_seq_length` of its
    sentence_bert_config.json (versions before 6 write it there), else its tokenizer's `model_max_length` (where
    version 6 writes it), else None. Every other field of sentence_bert_config.json must hold a value under which
    sentence-transformers reads texts as `Encoder` does (`ST_TRANSFORMER_FIELDS`), else ModelLoadError naming the
    file and the field."""
    prefix = f"{path}/" if path else ""
    settings = _read_json(source, f"{prefix}sentence_bert_config.json") or {}
    where = os.path.join(source, f"{prefix}sentence_bert_config.json")
    for field, value in settings.items():
        if field not in ST_TRANSFORMER_FIELDS:
            raise ModelLoadError(f"{where}: {quoted(field)} is no field of a sentence-transformers Transformer module "
                                 "(sentence-transformers cannot load the folder either)")
        allowed = ST_TRANSFORMER_FIELDS[field]
        if allowed is not None and value not in allowed:
            raise ModelLoadError(f"{where}: {field} is {quoted(value)}: sentence-transformers would read texts "
                                 f"otherwise than retromae, which reads a folder only with {field} "
                                 f"{' or '.join('null' if v is None else quoted(v) for v in allowed)} (or without it)")
    lowercase = settings.get("do_lower_case", False)
    if not isinstance(lowercase, bool):
        raise ModelLoadError(f"{where}: do_lower_case is {quoted(lowercase)}; it must be true or false")
    declared = settings.get("max_seq_length")
    if declared is not None:
        return declared, lowercase  # checked by `_check_declared_length`
    length = (_read_json(source, f"{prefix}tokenizer_config.json") or {}).get("model_max_length")
    return (length if isinstance(length, int) and 0 < length < 1_000_000 else None), lowercase  # 1e30: none


def _check_st_model_settings(source: str) -> tuple[str | None, dict[str, str]]:
    """ModelLoadError naming config_sentence_transformers.json and the field where its model-wide settings make
    `SentenceTransformer.encode` give other vectors than `Encoder`: a default prompt (put before every text; not
    applied here: a query and a passage get their own, the named prompts or --query-prefix and --passage-prefix),
    `truncate_dim` (each vector cut to its first dimensions) or a `model_type` other than a
    SentenceTransformer, or a `similarity_fn_name` that is no inner product of the vectors (euclidean, manhattan:
    retromae ranks by inner product). Returns `similarity_fn_name` (None where the file does not say), which
    `_sentence_transformers_spec` applies, and the named prompts `encode_query` and `encode_document` put before a
    query and a passage (`named_prompts`), which the commands put there where --query-prefix and --passage-prefix
    are not given (`side_prefix`). The rest describe versions."""
    where = os.path.join(source, ST_MODEL_FILE)
    settings = _read_json(source, ST_MODEL_FILE, optional=True) or {}
    kind, truncate = settings.get("model_type"), settings.get("truncate_dim")
    if kind not in (None, "SentenceTransformer"):
        raise ModelLoadError(f"{where}: model_type is {quoted(kind)}; retromae encodes with a SentenceTransformer "
                             "(one dense vector a text) only")
    if truncate is not None:
        raise ModelLoadError(f"{where}: truncate_dim is {quoted(truncate)}: sentence-transformers keeps only the first "
                             "dimensions of each vector, and retromae keeps them all; remove truncate_dim to read "
                             "the folder")
    prompts, default = settings.get("prompts", {}), settings.get("default_prompt_name")
    if not isinstance(prompts, dict):
        raise ModelLoadError(f"{where}: prompts is {quoted(prompts)}, not an object of prompts by name")
    if not isinstance(default, str | None):
        raise ModelLoadError(f"{where}: default_prompt_name is {quoted(default)}, not the name of a prompt")
    prompt = prompts.get(default)
    if prompt:
        raise ModelLoadError(f"{where}: default_prompt_name {quoted(default)} puts {quoted(prompt)} before every text "
                             "sentence-transformers encodes, and retromae puts a folder's prompt only before a query "
                             "or a passage (the prompts named query and document): remove default_prompt_name and "
                             "name the prompt query or document, or give it as --query-prefix or --passage-prefix "
                             "(prefix= in the Python API)")
    similarity = settings.get("similarity_fn_name")
    if similarity not in ST_SIMILARITIES:
        raise ModelLoadError(f"{where}: similarity_fn_name is {quoted(similarity)}, which ranks otherwise than the "
                             "inner product of the vectors retromae ranks by (dot, or cosine of normalised vectors); "
                             "give a model compared by dot or cosine")
    return similarity, named_prompts(prompts, where)


def named_prompts(prompts: dict[str, Any], where: str) -> dict[str, str]:
    """side ("query", "passage") → the prompt sentence-transformers' `encode_query` (its prompt "query") or
    `encode_document` (the first of "document", "passage", "corpus") puts before such a text, where one is given;
    ModelLoadError naming `where` for a prompt that is not text."""
    found = {}
    for side, names in (("query", ("query",)), ("passage", ("document", "passage", "corpus"))):
        name = next((name for name in names if name in prompts), None)
        prompt = prompts.get(name)
        if name is not None and not isinstance(prompt, str):
            raise ModelLoadError(f"{where}: the prompt {quoted(name)} is {quoted(prompt)}, not a text")
        if prompt:
            found[side] = prompt
    return found


def side_prefix(encoder: Encoder, side: str, given: str | None) -> str:
    """The prefix put before every text of `side` ("query" or "passage") that `encoder` encodes: `given` where it is
    given (--query-prefix, --passage-prefix, a `QueryEncoding`'s prefix; "" puts none), else the prompt the model's
    folder names for the side (`named_prompts`: what sentence-transformers' `encode_query` / `encode_document` put
    there), else none. A prompt put so is said once per process, model and side, with the option that turns it off."""
    if given is not None:
        return given
    prompt = encoder.prompts.get(side, "")
    if prompt and (encoder.source, side) not in _PROMPTS_NOTED:
        _PROMPTS_NOTED.add((encoder.source, side))
        method = "encode_query" if side == "query" else "encode_document"
        notice(f"retromae: note: {encoder.source}: {quoted(prompt)} is put before every {side}, the {side} prompt "
               f"its {ST_MODEL_FILE} names (as sentence-transformers' {method} does); --{side}-prefix '' puts none")
    return prompt


def _sentence_transformers_spec(source: str, modules: list[dict[str, Any]]) -> FolderSpec:
    """Read a sentence-transformers folder: its modules (`_st_modules`) and model-wide settings
    (`_check_st_model_settings`), each that `SentenceTransformer.encode` reads texts with read as `Encoder` does."""
    similarity, prompts = _check_st_model_settings(source)
    spec = _st_modules(source, modules)
    spec.prompts = prompts
    # compared by cosine (sentence-transformers' `similarity`) without a Normalize module: the vectors normalised, so
    # that the inner product retromae ranks by is that cosine; a folder that does not say is ranked as its modules are
    spec.pooling = PoolingConfig(spec.pooling.pooling, spec.pooling.normalize or similarity == "cosine")
    return spec


def _st_modules(source: str, modules: list[dict[str, Any]]) -> FolderSpec:
    """What the modules of a sentence-transformers folder declare: Transformer → Pooling (cls|mean) → optional
    Normalize, each module's path a folder inside it (`model_source.module_path`), its settings those
    `SentenceTransformer.encode` reads texts with as `Encoder` does (`_st_transformer`, `_st_pooling`)."""
    spec, pooling, normalize = FolderSpec(), None, False
    for module in modules:
        if not isinstance(module, dict):
            raise ModelLoadError(f"{os.path.join(source, 'modules.json')}: lists {module!r}, not a module (an object)")
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = module_path(source, module)
        if kind == "Transformer":
            spec.subfolder = path
            spec.max_length, spec.lowercase = _st_transformer(source, path)
        elif kind == "Pooling":
            pooling = _st_pooling(source, path)
        elif kind == "Normalize":
            normalize = True
        else:
            raise ModelLoadError(f"{source}: sentence-transformers module {module.get('type')!r} is not supported "
                                 "(supported: Transformer, Pooling, Normalize)")
    if pooling is None:
        raise ModelLoadError(f"{source}: modules.json has no Pooling module")
    _check_module_order(source, modules)
    spec.pooling, spec.declared = PoolingConfig(pooling, normalize), True
    return spec


def _both_descriptions(source: str, ours: FolderSpec, modules: list[dict[str, Any]]) -> FolderSpec:
    """A folder holding our retromae_encoder.json (read into `ours`) and sentence-transformers' modules.json (every
    export since encoder/ became a sentence-transformers folder too): its modules and settings are read as a
    sentence-transformers folder's are (each refusal of `_st_modules` and `_check_st_model_settings`), and
    ModelLoadError names both files where they would encode otherwise than ours says: another pooling, a Normalize
    module where ours does not normalise (or none where it does), lowercasing, or another max length where both
    declare one. `similarity_fn_name` is not compared: exports written after encoder/ became a sentence-transformers
    folder and before the similarity was declared hold sentence-transformers' default, cosine, beside unnormalised
    vectors (the vectors agree; only sentence-transformers' `similarity` ranks them by cosine). Returns `ours`, with
    the named prompts of the folder (`named_prompts`)."""
    _, ours.prompts = _check_st_model_settings(source)
    theirs = _st_modules(source, modules)
    pairs = {"pooling": (ours.pooling.pooling, theirs.pooling.pooling),
             "normalize": (ours.pooling.normalize, theirs.pooling.normalize),
             "lowercasing": (ours.lowercase, theirs.lowercase),
             "max_length": (ours.max_length, theirs.max_length if ours.max_length is not None else None)}
    differ = {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}
    if differ:
        name, (mine, other) = next(iter(differ.items()))
        raise ModelLoadError(f"{os.path.join(source, ENCODER_FILE)} says {name} {quoted(mine)} and "
                             f"{os.path.join(source, 'modules.json')} (with its modules' files) {quoted(other)}: "
                             "sentence-transformers encodes the folder by the second and retromae by the first, "
                             "which would give other vectors; make the two agree, or remove one")
    return ours


def _check_module_order(source: str, modules: list[dict[str, Any]]) -> None:
    """ModelLoadError naming modules.json unless its modules run as `Encoder` runs them: one Transformer first, then
    Pooling, then a Normalize, if any, last (sentence-transformers runs them in the order listed: a Normalize before
    the Pooling normalises token states, not the text's vector, and a Pooling first does not load there)."""
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    ranks = [MODULE_ORDER.index(kind) for kind in kinds]
    if kinds.count("Transformer") != 1 or ranks != sorted(ranks) or kinds.count("Normalize") > 1:
        raise ModelLoadError(f"{os.path.join(source, 'modules.json')}: lists its modules as {', '.join(kinds)}; "
                             "sentence-transformers runs them in that order, and retromae reads one Transformer, "
                             "then Pooling, then an optional Normalize")


def _our_spec(path: str, ours: dict[str, Any]) -> FolderSpec:
    """What our `retromae_encoder.json` (`path`) declares; ModelLoadError naming the file and the field holding a
    value of another type or domain (`"normalize": "false"` is no boolean, `"pooling": "max"` no pooling of ours);
    its `max_length` is checked against the tokenizer (`_check_declared_length`)."""
    pooling, normalize = ours.get("pooling", "cls"), ours.get("normalize", False)
    if not (isinstance(pooling, str) and pooling in POOLINGS):
        raise ModelLoadError(f"{path}: pooling is {pooling!r}; it must be one of {', '.join(POOLINGS)}")
    if not isinstance(normalize, bool):
        raise ModelLoadError(f"{path}: normalize is {normalize!r}; it must be true or false")
    return FolderSpec(pooling=PoolingConfig(pooling, normalize), max_length=ours.get("max_length"), declared=True)


def describe_folder(source: str) -> FolderSpec:
    """Pooling, normalisation, max length, lowercasing and transformer subfolder declared by a model folder or hub
    repo; a sentence-transformers folder's settings under which its vectors would differ refused
    (`_sentence_transformers_spec`), and so are those of one beside our retromae_encoder.json, which must describe
    the same vectors (`_both_descriptions`). Read by every loader of an encoder (`Encoder.load`)."""
    ours, modules = _read_json(source, ENCODER_FILE), _read_json(source, "modules.json", list)
    if ours is not None:
        spec = _our_spec(os.path.join(source, ENCODER_FILE), ours)
        return spec if modules is None else _both_descriptions(source, spec, modules)
    if modules is not None:
        return _sentence_transformers_spec(source, modules)
    return FolderSpec()


def folder_prompts(source: Any) -> dict[str, str]:
    """The named prompts by side (`named_prompts`) of the model folder `source`, as a record names it; none where it
    is no local folder (moved since, or a hub name: a record's check reads no network)."""
    return describe_folder(source).prompts if isinstance(source, str) and os.path.isdir(source) else {}


def _check_declared_length(declared: Any, tokenizer: PreTrainedTokenizerBase, source: str) -> None:
    """ModelLoadError when a folder's metadata declares a max length that is no whole number of tokens above its
    tokenizer's special tokens (a tokenizer ignores a truncation below them and would read whole texts)."""
    least = tokenizer.num_special_tokens_to_add(pair=False) + 1
    if declared is not None and (not isinstance(declared, int) or isinstance(declared, bool) or declared < least):
        raise ModelLoadError(f"{source}: its metadata declares a max length of {declared!r} tokens; it must be a whole "
                             f"number of at least {least} (its tokenizer's special tokens and one of text)")


def _lowercase_first(tokenizer: PreTrainedTokenizerBase) -> None:
    """Make `tokenizer` lowercase every text before its own normaliser, as sentence-transformers does for a folder's
    `do_lower_case` (its Transformer module puts a `Lowercase` normaliser first, unless the tokenizer has one): the
    same tokens, and the tokenizer saved with the model (`Encoder.save`, the exports) lowercases as well."""
    backend = tokenizer.backend_tokenizer
    steps = list(backend.normalizer) if isinstance(backend.normalizer, normalizers.Sequence) else [backend.normalizer]
    if not any(isinstance(step, normalizers.Lowercase) for step in steps):
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *(s for s in steps if s is not None)])


def lowercase_as_declared(tokenizer: PreTrainedTokenizerBase, source: ModelSource) -> None:
    """Make `tokenizer`, read from `source`, lowercase every text where `source` is a sentence-transformers model whose
    Transformer module declares do_lower_case (`_st_transformer`, `_lowercase_first`), as `Encoder.load` does from
    `describe_folder`: the rule of the loaders that read such a model's transformer as a Hugging Face model, the
    masked-LM loader (`models.masked_lm.load_masked_lm`), the cross-encoder's (`reranking.run`) and init-model's
    --tokenizer (`pretraining.scratch`)."""
    if _read_json(source.folder, "modules.json", list, optional=True) is not None \
            and _st_transformer(source.folder, source.subfolder)[1]:
        _lowercase_first(tokenizer)


def default_max_length(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, declared: int | None) -> int:
    """The tokens a model reads: the length its folder declares (else `DEFAULT_MAX_LENGTH`), at most its positions
    and its tokenizer's limit. Every folder we write records this length (`retromae.models.export`)."""
    limits = [declared or DEFAULT_MAX_LENGTH, position_limit(model.config),
              tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None]
    return min(limit for limit in limits if limit)


class Encoder:
    """A transformer encoder with pooling: texts → float32 vectors (`encode`) or tensors with grad (`embed`)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 pooling: PoolingConfig | None = None, max_length: int | None = None,
                 amp_dtype: torch.dtype | None = None, backend: Backend | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = pooling or PoolingConfig()
        self.max_length = max_length or default_max_length(model, tokenizer, None)
        self.amp_dtype = amp_dtype
        self.backend = backend  # None: torch runs the forward pass of `encode`
        self._low_precision: LowPrecisionWeights | None = None  # the weights cast for `encode` in bf16 on a CPU
        self._packed = PackedLinears(torch.float32)  # the weights packed for `encode` in float32 on a CPU
        # True where the weights never change between `encode` calls (a searcher's query encoder): the weights cast
        # and packed for one call are kept for the next; else they are freed after each (the model may train)
        self.weights_fixed = False
        self.source = ""  # the --model it was loaded from (`Encoder.load`), recorded beside its vectors
        self.prompts: dict[str, str] = {}  # the named prompts of its folder, by side (`named_prompts`)

    @property
    def pooling(self) -> str:
        return self.config.pooling

    @property
    def normalize(self) -> bool:
        return self.config.normalize

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def inference(self) -> dict[str, str]:
        """What runs the forward pass of `encode` and in what: recorded beside the vectors (encode.json, index.json)."""
        backend = self.backend
        return {"backend": backend.name if backend else "torch", "quantize": backend.quantize if backend else "none"}

    @property
    def precision(self) -> str:
        """What `encode` computes in, as --dtype names it (`runtime.precision.dtype_label`: the resolved `auto`; the
        backends other than torch compute in float32): recorded beside the vectors (encode.json, index.json)."""
        return dtype_label(self.amp_dtype)

    @property
    def dimension(self) -> int:
        return int(self.model.config.hidden_size)

    @classmethod
    @quiet_entry_point
    @checked_arguments(EncoderArguments, name_or_path="model", pooling="pooling", normalize="normalize",
                       device=("device", device_name), dtype=("dtype", dtype_name), max_length="max_length",
                       backend="backend", quantize="quantize", side="side")
    def load(cls, name_or_path: str | Path, pooling: str | None = None, normalize: bool | None = None,
             device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
             max_length: int | None = None, backend: str | None = None, quantize: str | None = None,
             side: str | None = None) -> Encoder:
        """Load our export, a sentence-transformers folder, or any HF model; explicit arguments win. `backend` and
        `quantize` choose what runs its forward pass in `encode` (`retromae.models.backends`; default torch, none),
        its export made or found here.
        `side` ("query", "passage"): the texts it will encode, which picks an untied fine-tune's tower from its run
        folder and refuses the other side's tower (`model_source.resolve_model`); None: both, refused for the run
        folder of an untied fine-tune."""
        resolved = resolve_model(name_or_path, side=side)
        source = resolved.folder
        spec = describe_folder(source)
        config = PoolingConfig(pooling or spec.pooling.pooling,
                               spec.pooling.normalize if normalize is None else normalize)
        device = resolve_device(device)
        backend, quantize = backend_of(backend, quantize)
        require(backend == "torch" or device.type == "cpu", "device", f"{backend} runs on the CPU; drop --device "
                                                                      "or use --backend torch")
        require(quantize == "none" or backend in QUANTIZED_BACKENDS, "quantize", WITH_QUANTIZED_BACKEND.says)
        tokenizer = load_tokenizer(source, spec.subfolder, resolved.given)
        model, _ = load_model(AutoModel, source, spec.subfolder, resolved.given, fresh_head=True)  # the pooler
        check_tokenizer(tokenizer, resolved.given, model.config.vocab_size)
        check_max_length(model.config, max_length, "max_length", tokenizer, argument=True)
        if spec.lowercase:
            _lowercase_first(tokenizer)
        check_weights(model, resolved.given)
        _check_declared_length(spec.max_length, tokenizer, source)
        model.to(device).eval()
        length = max_length or default_max_length(model, tokenizer, spec.max_length)
        runner = None if backend == "torch" else Backend(
            backend, quantize, str(Path(source) / spec.subfolder) if os.path.isdir(source) else None)
        if runner is not None:
            runner.runner(model)  # exported or found now: a cache that cannot take it is refused before any claim
        amp_dtype = resolve_dtype(dtype, device) if runner is None else None  # the backends compute in float32
        encoder = cls(model, tokenizer, config, length, amp_dtype, runner)
        encoder.source, encoder.prompts = resolved.given, spec.prompts
        return encoder

    def check_lengths(self, options: Any) -> None:
        """ConfigError naming the first length option of `options` (a command's config: each field whose name ends
        in `max_length`) that this encoder's tokenizer or positions cannot honour (`backbone.check_max_length`)."""
        for field in dataclasses.fields(options):
            if field.name.endswith("max_length"):
                check_max_length(self.model.config, getattr(options, field.name), field.name, self.tokenizer)

    @quiet_entry_point
    @checked_arguments(EncoderArguments, unchecked=("path",), overwrite="overwrite")
    def save(self, path: str | Path, overwrite: bool = False) -> None:
        """Export as a plain HF model folder plus `retromae_encoder.json` (pooling, normalize, max_length), into
        `path` claimed as a command claims its output folder (`runtime.run_folder.claim_folder`, as `Encoder.save`):
        never over another run's or command's outputs, files no run recorded, or the folder it was loaded from;
        `overwrite` replaces an earlier save's files (others kept). Its refusals name `path` and `overwrite=True`."""
        inputs = [self.source] if self.source and os.path.exists(self.source) else []
        identity = {"model": os.path.abspath(self.source) if inputs else self.source}
        claim_folder(path, SAVE, identity, (*saved_files(self.tokenizer), ENCODER_FILE), overwrite=overwrite,
                     resumable=False, inputs=inputs, started=False, naming=SAVE_NAMING)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        info = {**dataclasses.asdict(self.config), "max_length": self.max_length}
        write_text_atomic(Path(path) / ENCODER_FILE, json.dumps(info, indent=2) + "\n")
        mark_started(path)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled (and, if configured, normalised) embeddings `(B, D)` of `(B, L)` inputs, with gradients."""
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, D)
        return pool(hidden, attention_mask, self.config)

    @checked_arguments(EncoderArguments, text_lists=("texts",), max_length="max_length", prefix="prefix")
    def tokenize(self, texts: Sequence[str], max_length: int | None = None, prefix: str = "") -> list[list[int]]:
        """Token ids of each text (prefix prepended), truncated, unpadded; a long text is read only as far as its
        first tokens (`retromae.data.long_texts`). A panic of the tokenizers library is a ModelLoadError naming the
        tokenizer (`tokenizer_panics`), for a caller of this public class as for the CLI. A `max_length` given is
        checked as every length is (`check_max_length`)."""
        check_max_length(self.model.config, max_length, "max_length", self.tokenizer, argument=True)
        max_length = max_length or self.max_length
        with tokenizer_panics():
            return self.tokenizer(clip_texts(self.tokenizer, texts, max_length, prefix), truncation=True,
                                  max_length=max_length, return_attention_mask=False,
                                  return_token_type_ids=False)["input_ids"]

    @checked_arguments(EncoderArguments, text_lists=("texts",), max_length="max_length", prefix="prefix")
    def token_table(self, texts: Sequence[str], max_length: int | None = None,
                    prefix: str = "") -> tuple[np.ndarray, np.ndarray]:
        """`tokenize`'s ids of every text in one flat int32 array `(T,)`, text i's at `offsets[i]:offsets[i + 1]`
        (`offsets`: `(N + 1,)`), tokenised TOKENIZE_CHUNK texts at a time: 4 bytes a token for a corpus of any size,
        where the lists of a whole corpus at once held about 20 KB a text (2 GB at 100,000 texts)."""
        chunks, lengths = [np.zeros(0, dtype=np.int32)], np.zeros(len(texts) + 1, dtype=np.int64)
        for start in range(0, len(texts), TOKENIZE_CHUNK):
            sequences = self.tokenize(texts[start:start + TOKENIZE_CHUNK], max_length, prefix)
            lengths[start + 1:start + 1 + len(sequences)] = [len(ids) for ids in sequences]
            chunks.append(np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int32))
        return np.concatenate(chunks), np.cumsum(lengths)

    def collate(self, sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-pad token id lists into `(B, L)` ids and attention mask on the encoder's device."""
        longest = max(len(ids) for ids in sequences)
        input_ids = np.full((len(sequences), longest), self.tokenizer.pad_token_id, dtype=np.int64)  # (B, L)
        attention_mask = np.zeros((len(sequences), longest), dtype=np.int64)  # (B, L)
        for row, ids in enumerate(sequences):
            input_ids[row, :len(ids)] = ids
            attention_mask[row, :len(ids)] = 1
        return torch.from_numpy(input_ids).to(self.device), torch.from_numpy(attention_mask).to(self.device)

    @torch.inference_mode()
    @checked_arguments(EncoderArguments, text_lists=("texts",), unchecked=("show_progress", "description", "bar"),
                       batch_size="batch_size", max_length="max_length", prefix="prefix")
    def encode(self, texts: Sequence[str], batch_size: int = 64, max_length: int | None = None, prefix: str = "",
               show_progress: bool = True, description: str | None = None, bar: tqdm | None = None) -> np.ndarray:
        """Float32 `(N, D)` vectors in input order; batches are formed from texts sorted by token length. `prefix` is
        put before every text as given, and no prompt of the model's folder is (as sentence-transformers' `encode`;
        the commands put the named prompt of a query or a passage: `side_prefix`).

        The progress bar is named `description` (default "encoding N texts"), with " in bf16" (or fp16) under
        autocast; a caller with a larger job passes its own `bar` instead, which is advanced here and left open."""
        if bar is not None:
            return self._encode(texts, batch_size, max_length, prefix, bar)
        label = description or f"encoding {len(texts):,} texts"
        if self.amp_dtype is not None:
            label += f" in {AUTOCAST_NAMES[self.amp_dtype]}"
        if self.backend is not None:
            label += f" with {self.backend.name}" + (" int8" if self.backend.quantize == "int8" else "")
        with progress(label, len(texts), "text", enabled=show_progress) as own:
            return self._encode(texts, batch_size, max_length, prefix, own)

    def _encode(self, texts: Sequence[str], batch_size: int, max_length: int | None, prefix: str,
                bar: tqdm) -> np.ndarray:
        ids, offsets = self.token_table(texts, max_length, prefix)  # (T,), (N + 1,)
        order = longest_first(offsets)  # (N,)
        output = np.empty((len(texts), self.dimension), dtype=np.float32)  # (N, D)
        self.model.eval()
        forward = self._forward_pass() if len(texts) else self.embed
        try:
            with self._fast_kernels():
                for start in range(0, len(order), batch_size):
                    rows = order[start:start + batch_size]
                    input_ids, attention_mask = self.collate([ids[offsets[row]:offsets[row + 1]] for row in rows])
                    vectors = forward(input_ids, attention_mask)  # (B, D)
                    output[rows] = vectors.float().cpu().numpy()
                    bar.update(len(rows))
        finally:
            if not self.weights_fixed:
                self._forget_inference_weights()
        check_vectors(output, f"the vectors of {self.source or 'the encoder'}", limit=VECTOR_LIMIT)  # none searched
        return output

    @property
    def _casts_weights(self) -> bool:
        """Whether `encode` runs on a copy of the weights cast to bf16 (on a CPU) rather than under autocast."""
        return self.amp_dtype == torch.bfloat16 and self.device.type == "cpu"

    def _forward_pass(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """What `encode` runs on a batch: the backend's forward pass; in bf16 on a CPU, the model on its weights cast
        once (`retromae.models.low_precision`: faster than autocast there); else `embed`."""
        if self.backend is not None:
            return self._backend_forward()
        if self._casts_weights:
            if self._low_precision is None:
                self._low_precision = LowPrecisionWeights(torch.bfloat16)
            cast = self._low_precision

            def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                states = cast.forward(self.model, input_ids=input_ids, attention_mask=attention_mask)
                return pool(states.last_hidden_state, attention_mask, self.config)  # (B, D) in float32

            return forward
        return self.embed

    def _forget_inference_weights(self) -> None:
        """Free the weights cast and packed for `encode`: the next call makes them from the model as it is then."""
        self._packed.forget()
        if self._low_precision is not None:
            self._low_precision.forget()

    def _backend_forward(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """`embed` with the backend's forward pass (of the model's current weights) in place of torch's."""
        runner = self.backend.runner(self.model, check=not self.weights_fixed)

        def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = runner(input_ids.cpu().numpy(), attention_mask.cpu().numpy())  # (B, L, D)
            return pool(torch.from_numpy(hidden), attention_mask.cpu(), self.config)

        return forward

    def _fast_kernels(self) -> contextlib.AbstractContextManager:
        """Autocast to the lower precision asked for; in float32, oneDNN's prepacked linear layers on CPU
        (`retromae.models.onednn`: the same vectors to 1e-6, in about two thirds of the time where MKL lacks AVX-512
        kernels); nothing with an inference backend, which runs its own, nor in bf16 on a CPU, whose weights are cast
        (`_forward_pass`)."""
        if self.backend is not None or self._casts_weights:
            return contextlib.nullcontext()
        if self.amp_dtype is not None:
            return torch.autocast(self.device.type, dtype=self.amp_dtype)
        return self._packed.applied(self.model)
