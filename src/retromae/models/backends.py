"""Run an encoder's transformer through an inference library: ONNX Runtime (float32 or int8) or OpenVINO.

Owns what `--backend onnx|openvino` and `--quantize int8` do once the model is loaded (the names and the check that
the libraries are there live torch-free in `retromae.models.encoder_config`): the export of the transformer's forward
pass (token ids and attention mask → last hidden states; pooling and normalisation stay `Encoder`'s) with torch's
ONNX exporter (dynamic batch and sequence axes), its dynamic int8 quantization (onnxruntime's `quantize_dynamic` of
the MatMul weights), OpenVINO's IR of the float32 one, where they are kept, and the runner that computes hidden
states from them. Does not own tokenising, pooling or the vectors' checks (`retromae.models.encoder`).

An export is made once per weights fingerprint (`weights_fingerprint`: a hash of the tensors and the architecture,
so a copy or a link of a model finds it) and kept in the layout sentence-transformers loads with `backend="onnx"`
or `"openvino"` (`EXPORT_FILES`), next to the transformer's files, or, where that folder is not ours to write (a
hub cache, an installed package, a read-only folder, or files there that we did not make), under
`$RETROMAE_CACHE/exports/<fingerprint>/` (default ~/.cache/retromae). Each export folder holds `EXPORT_RECORD`: per
file, the weights it was made from and its own fingerprint; a file whose record is missing, names other weights
or another fingerprint (a truncated or replaced file) is made again (with a note), never used. Weights changed in
memory after loading (the candidates `adapt`'s guard scores) are exported to a temporary folder, dropped when the
weights change again. Model folders' fingerprints skip these folders (`runtime.run_folder.DERIVED_FOLDERS`), so an
export does not change the model's identity. Processes exporting the same weights at once each make the export in
a private folder; the first moved into place with its record, under the folder's lock, is the one all use
(`runtime.cache_entries`).

The record is written by whoever wrote the folder (a shared cache is keyed by a hash anyone holding the model can
compute), so an export found on disk is also checked against the weights it stands for before it runs
(`load_export`, the one way a runner is made): every file it reads is in the record (an .onnx's external data
included, which must lie in its folder), and one probe batch through it agrees with the torch model in memory
(`PROBE_COSINE`). A record that matches files which disagree is refused, naming the folder to delete; any error of
onnxruntime or OpenVINO while loading or running an export is one line naming its file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import mmap
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from retromae.models.model_source import ours_to_write
from retromae.runtime.cache_entries import entry_lock, private_folder
from retromae.runtime.console import notice
from retromae.runtime.errors import DataError, ModelLoadError
from retromae.runtime.io import cache_folder, write_text_atomic
from retromae.runtime.lines import read_json_file
from retromae.runtime.run_folder import file_fingerprint

EXPORT_RECORD = "retromae_export.json"
_MADE: list[Path] = []  # the exports this process made, in order (not probed when made from torch's weights now)
_PROBED: set[tuple[str, str, str]] = set()  # (export, weights, its recorded fingerprint) probed in this process
# What sentence-transformers loads for each backend and quantization (its `export_*` functions' file names).
EXPORT_FILES = {("onnx", "none"): "onnx/model.onnx", ("onnx", "int8"): "onnx/model_qint8_avx512_vnni.onnx",
                ("openvino", "none"): "openvino/openvino_model.xml"}
INPUTS = ("input_ids", "attention_mask")
PER_CHANNEL = True  # int8 weights scaled per output channel (docs/performance.md, "Inference backends")
# The lowest cosine, over the probe batch's texts and both poolings (CLS, mean), between an export's states and
# torch's for the export to run: float32 agrees to about 1e-6; int8's lowest cosine over SciFact's texts was
# 0.9912-0.9915 (docs/performance.md), another model's weights 0.05 (audit seven).
PROBE_COSINE = {"none": 0.999, "int8": 0.95}
Runner = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (B, L) int64 ids and mask → (B, L, D) float32 states


def weights_fingerprint(model: nn.Module) -> str:
    """A hash of `model`'s architecture (its config, names and paths left out) and of every tensor of its state but
    the pooler's (`Encoder.load` adds a fresh one where a checkpoint has none, and the hidden states never read it)."""
    config = {key: value for key, value in model.config.to_dict().items()
              if not key.startswith("_") and key not in ("transformers_version", "dtype", "torch_dtype")}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        if name.split(".")[0] == "pooler":
            continue
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


class Backend:
    """The runner of one encoder under `name` (onnx, openvino) and `quantize` (none, int8), made afresh
    whenever the model's weights change; `folder` is the transformer's folder the weights were loaded from (None:
    a hub model or weights in memory)."""

    def __init__(self, name: str, quantize: str, folder: str | None) -> None:
        self.name, self.quantize, self.folder = name, quantize, folder
        self._fingerprint: str | None = None  # of the weights the runner runs
        self._loaded: str | None = None  # the fingerprint of the weights as loaded from `folder`
        self._runner: Runner | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None

    def runner(self, model: nn.Module, check: bool = True) -> Runner:
        """The runner of `model`'s current weights, exported or read back when their fingerprint changed. `check`
        False reuses the runner without hashing the weights again (for a model whose weights never change: no
        counter tells of a change reliably, a fused AdamW step leaving the tensors' version counters as they were)."""
        if self._runner is not None and not check:
            return self._runner
        fingerprint = weights_fingerprint(model)
        if self._runner is None or fingerprint != self._fingerprint:
            self._loaded = self._loaded or fingerprint
            self._runner = self._make(model, fingerprint)
            self._fingerprint = fingerprint
        return self._runner

    def _make(self, model: nn.Module, fingerprint: str) -> Runner:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
        if fingerprint == self._loaded:
            root = export_root(self.folder, fingerprint, EXPORT_FILES[self.name, self.quantize])
        else:  # weights changed in memory: kept only while they are these
            self._scratch = tempfile.TemporaryDirectory(prefix="retromae-export-")
            root = Path(self._scratch.name)
        made = len(_MADE)
        path = ensure_export(model, root, fingerprint, self.name, self.quantize)
        # made now, with what it is made from (an int8 or OpenVINO export made from an ONNX file found is probed)
        chain = 1 if (self.name, self.quantize) == ("onnx", "none") else 2
        return load_export(model, path, self.name, self.quantize, found=len(_MADE) - made < chain)


def export_root(folder: str | None, fingerprint: str, relative: str) -> Path:
    """Where the export `relative` of weights `fingerprint` is kept: beside the model in `folder` when that is ours to
    write and a file there by that name is one we made (recorded), else the cache folder of the fingerprint."""
    if ours_to_write(folder):
        target = Path(folder) / relative
        if not target.exists() or target.name in _record(target.parent):
            return Path(folder)
    return cache_folder() / "exports" / fingerprint


def _record(folder: Path) -> dict[str, Any]:
    """The export record of `folder` (file name → the weights it was made from and its fingerprint); empty when
    there is none or it cannot be read (its files are then made again)."""
    path = folder / EXPORT_RECORD
    if not path.is_file():
        return {}
    try:
        return read_json_file(path)
    except DataError as error:
        notice(f"retromae: note: {error}; exporting again")
        return {}


def _refused(path: Path, why: str) -> ModelLoadError:
    """The one line refusing the export file `path`: what is wrong and the folder to delete."""
    return ModelLoadError(f"{path}: {why}; not run: delete {path.parent} to have it exported again")


def _first_line(error: BaseException) -> str:
    """The line of a library's error that says what is wrong (OpenVINO's first lines name its own sources)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Exception from ", "Check '"))]
    return (said or lines or [type(error).__name__])[0][:300]


def _external_data(path: Path) -> list[str]:
    """The files the ONNX model `path` reads its external data from (none in ours: `export_onnx` keeps the weights
    inside), each a path inside its folder; ModelLoadError naming `path` when it is not an ONNX model, or one of its
    locations is absolute or leaves the folder (a link out included). A file without the key every external tensor
    names ("location") is not parsed: a scan of its bytes costs a tenth of onnx's import and parse."""
    if path.stat().st_size == 0:
        raise _refused(path, "it is empty")
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(b"location") < 0:
            return []
    # onnx: needed by torch's exporter, installed with the backends
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and the reader's others
        raise _refused(path, f"not an ONNX model ({_first_line(error)})") from None
    folder = path.parent.resolve()
    locations = []
    for tensor in _get_all_tensors(proto):
        if not uses_external_data(tensor):
            continue
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
        try:
            inside = (path.parent / location).resolve().is_relative_to(folder)
        except (OSError, RuntimeError):  # a loop of links
            inside = False
        if not location or os.path.isabs(location) or ".." in Path(location).parts or not inside:
            raise _refused(path, f"its external data {location!r} is not a file in its folder")
        locations.append(location)
    return sorted(set(locations))


def _fresh(path: Path, fingerprint: str, say: bool = True) -> bool:
    """Whether `path` and every file it reads (an OpenVINO IR's .bin, an .onnx's external data) are the export of
    weights `fingerprint` its folder's record names; a note says why one that is there is not (when `say`)."""
    names = [path.name, *([path.with_suffix(".bin").name] if path.suffix == ".xml" else [])]
    record = _record(path.parent)
    if not any((path.parent / name).exists() for name in names):
        return False
    if not _matches(path.parent, names, record, fingerprint, say):
        return False
    # the .onnx is the one recorded: the files it reads besides must be too
    return path.suffix != ".onnx" or _matches(path.parent, _external_data(path), record, fingerprint, say)


def _matches(folder: Path, names: list[str], record: dict[str, Any], fingerprint: str, say: bool) -> bool:
    """Whether each file `names` of `folder` is recorded in `record` as made from weights `fingerprint`, with its
    fingerprint now; a note says why one is not (when `say`)."""
    for name in names:
        entry = record.get(name)
        if not isinstance(entry, dict) or entry.get("weights") != fingerprint:
            why = "was not exported from these weights"
        elif not (folder / name).is_file() or entry.get("fingerprint") != file_fingerprint(folder / name):
            why = "changed since it was exported (cut short or replaced)"
        else:
            continue
        if say:
            notice(f"retromae: note: {folder / name} {why}; exporting again")
        return False
    return True


def _commit(folder: Path, made: dict[str, Path], fingerprint: str) -> None:
    """Move the files made (name → temporary path) into `folder`, then record them: the record is written last, so
    an export cut short is never taken for a whole one."""
    for name, tmp in made.items():
        os.replace(tmp, folder / name)
    record = _record(folder)
    record.update({name: {"weights": fingerprint, "fingerprint": file_fingerprint(folder / name)} for name in made})
    write_text_atomic(folder / EXPORT_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")


def ensure_export(model: nn.Module, root: Path, fingerprint: str, backend: str, quantize: str) -> Path:
    """The export of `model` (weights `fingerprint`) for `backend` and `quantize` under `root`, made (with what it is
    made from) unless a fresh one is there. Made in a private folder and moved into place under the folder's lock
    (`runtime.cache_entries`), unless another process put a fresh one there meanwhile: then ours is dropped and
    theirs used (found, so probed as any export found). A fresh one in a folder that takes no file (a cache shared
    read-only) is served; one that must be made there is refused naming the folder and the cache's setting
    (`runtime.cache_entries.private_folder`)."""
    path = root / EXPORT_FILES[backend, quantize]
    with entry_lock(path.parent, shared=True):
        if _fresh(path, fingerprint):
            return path
    with private_folder(path.parent / ".retromae-export") as scratch:
        tmp = scratch / path.name
        if backend == "openvino":
            convert_openvino(ensure_export(model, root, fingerprint, "onnx", quantize), tmp)
            made = {path.name: tmp, path.with_suffix(".bin").name: tmp.with_suffix(".bin")}
        elif quantize == "int8":
            quantize_onnx(ensure_export(model, root, fingerprint, "onnx", "none"), tmp)
            made = {path.name: tmp}
        else:
            export_onnx(model, tmp)
            made = {path.name: tmp}
        with entry_lock(path.parent):
            if _fresh(path, fingerprint, say=False):
                return path
            _commit(path.parent, made, fingerprint)
    _MADE.append(path)
    return path


class _HiddenStates(nn.Module):
    """The transformer's forward pass as exported: token ids and attention mask → last hidden states."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's and quantizer's progress lines and warnings off (they print and log as they go)."""
    loggers = [logging.getLogger(name) for name in ("", "torch.onnx")]  # the quantizer logs to the root logger
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def _native_stderr_off() -> Iterator[None]:
    """Within: what native code writes to file descriptor 2 discarded (Python's own `sys.stderr` is flushed first
    and kept)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def export_onnx(model: nn.Module, path: Path) -> None:
    """`model`'s forward pass to ONNX at `path` (torch's exporter, dynamic batch and sequence axes, weights inside
    the file); ModelLoadError naming the model when the exporter cannot trace it."""
    vocabulary = int(model.config.vocab_size)
    input_ids = (torch.arange(16) % vocabulary).reshape(2, 8)  # (2, 8)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    axes = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")},
            "attention_mask": {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")}}
    was_training = model.training
    model.eval()
    try:
        with _quiet(), torch.no_grad():
            torch.onnx.export(_HiddenStates(model), (input_ids, attention_mask), str(path), input_names=list(INPUTS),
                              output_names=["last_hidden_state"], dynamo=True, dynamic_shapes=axes,
                              external_data=False, verbose=False)
    except Exception as error:  # the exporter's many failures (an operator it lacks, a shape it cannot trace)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"cannot export {type(model).__name__} to ONNX ({first}); use --backend torch") from None
    finally:
        model.train(was_training)


def quantize_onnx(source: Path, path: Path) -> None:
    """Dynamic int8 of the MatMul weights of the ONNX model `source` (onnxruntime's quantizer) into `path`."""
    # onnxruntime: only for --quantize int8
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(source, path, weight_type=QuantType.QInt8, per_channel=PER_CHANNEL,
                         op_types_to_quantize=["MatMul"], extra_options={"MatMulConstBOnly": True})


def convert_openvino(source: Path, path: Path) -> None:
    """OpenVINO's IR (`path`, an .xml and its .bin) of the ONNX model `source`, its weights kept in float32."""
    # openvino: only for --backend openvino
    import openvino

    with _quiet():
        openvino.save_model(openvino.Core().read_model(str(source)), str(path), compress_to_fp16=False)


def _threads() -> int:
    return torch.get_num_threads()  # what `runtime.threads.configure_threads` chose for this process


def onnx_runner(path: Path) -> Runner:
    """Hidden states from the ONNX model at `path` on ONNX Runtime's CPU provider, on this process's threads, which
    sleep between operators."""
    # onnxruntime: only for --backend onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = _threads()
    # its threads sleep between operators rather than spin, as OMP_WAIT_POLICY=PASSIVE makes torch's
    # (`runtime.threads`): measured 15% faster on a shared machine (docs/performance.md)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda input_ids, attention_mask: session.run(
        None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]


def openvino_runner(path: Path) -> Runner:
    """Hidden states from the OpenVINO IR at `path` on its CPU plugin, computed in float32 (its default on a CPU with
    AMX or AVX-512 bf16 is bf16), on this process's threads."""
    # openvino: only for --backend openvino
    import openvino

    compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                                "INFERENCE_NUM_THREADS": _threads()})
    request = compiled.create_infer_request()
    return lambda input_ids, attention_mask: np.array(request.infer(
        {"input_ids": input_ids, "attention_mask": attention_mask})[0], dtype=np.float32)


def load_export(model: nn.Module, path: Path, backend: str, quantize: str, found: bool) -> Runner:
    """The runner of the export `path` of `model`'s weights, which `ensure_export` found on disk (`found`) or made
    just now. One found is run first on a probe batch, once per process: refused (ModelLoadError naming its folder
    to delete) unless its hidden states have torch's width and their pooled vectors torch's direction
    (`PROBE_COSINE`). Any error of the library loading or running it is one line naming the file."""
    library = "onnxruntime" if backend == "onnx" else "OpenVINO"
    make = onnx_runner if backend == "onnx" else openvino_runner
    try:
        with _native_stderr_off():  # OpenVINO's frontends log to it, line by line, on a file they cannot read
            runner = make(path)
    except Exception as error:  # onnxruntime's Fail/InvalidProtobuf/..., OpenVINO's RuntimeError
        raise _refused(path, f"{library} cannot load it ({_first_line(error)})") from None

    def guarded(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        try:
            return runner(input_ids, attention_mask)
        except Exception as error:
            raise _refused(path, f"{library} failed running it ({_first_line(error)})") from None

    entry = _record(path.parent).get(path.name, {})
    key = (str(path.resolve()), str(entry.get("weights")), str(entry.get("fingerprint")))
    if found and key not in _PROBED:
        _probe(model, path, quantize, guarded)
    _PROBED.add(key)
    return guarded


def _probe(model: nn.Module, path: Path, quantize: str, runner: Runner) -> None:
    """ModelLoadError naming `path` unless `runner`'s hidden states of a probe batch (two short texts of fixed token
    ids, one padded) have `model`'s shape and, pooled by CLS and by the mean, cosine at least `PROBE_COSINE`."""
    vocabulary = int(model.config.vocab_size)
    input_ids = ((torch.arange(1, 17) * 7919) % max(vocabulary - 1, 1) + 1).reshape(2, 8)  # (2, 8), no id 0
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = _HiddenStates(model)(input_ids, attention_mask).float().cpu().numpy()  # (2, 8, D)
    finally:
        model.train(was_training)
    got = np.asarray(runner(input_ids.numpy(), attention_mask.numpy()))
    if got.shape != expected.shape:
        raise _refused(path, f"its hidden states have shape {got.shape}, this model's {expected.shape} "
                             "(the export of another model)")
    mask = attention_mask.numpy()[:, :, None].astype(np.float32)  # (2, 8, 1)
    pooled = [(states[:, 0], (states * mask).sum(axis=1) / mask.sum(axis=1)) for states in (got, expected)]
    cosines = [float(_cosine(a, b).min()) for a, b in zip(pooled[0], pooled[1], strict=True)]
    lowest = min(cosines) if all(np.isfinite(cosines)) else float("nan")
    if not lowest >= PROBE_COSINE[quantize]:
        raise _refused(path, f"its vectors of a probe batch are not this model's (cosine {lowest:.4f}, at least "
                             f"{PROBE_COSINE[quantize]} expected: the export of other weights)")


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of `(B, D)` arrays."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)
