"""Encode a corpus or query set into a folder of float32 vectors, resumable by shard, over several processes.

Owns the embeddings folder layout:

    embeddings.npy   float32 (N, D), rows in the order of ids.txt (numpy format, never pickled)
    ids.txt          one id per line
    encode.json      how the vectors were made: the side encoded (query: `encode --queries`, passage: `--corpus`),
                     model (its absolute path when local) and its fingerprint, pooling, normalize, prefix,
                     max_length, count, dim, backend and quantize (what ran the model: `retromae.models.backends`),
                     dtype (what it computed in: `Encoder.precision`); the input file (absolute path and
                     fingerprint); the generation (a random id of this writing) and the fingerprints of
                     embeddings.npy and ids.txt
    shards/          shard-00000.npy ... while a run is in progress; removed once merged

The folder belongs to one encoding (`retromae.runtime.run_folder`): its marker records the manifest (model and a
fingerprint of its weights, pooling, prefix, max_length, precision, a fingerprint of ids and texts, shard size).
Started again with the same manifest, a run continues (or, finished, is left as it is); with another, it is refused
unless `overwrite`, which deletes the files listed above first.

A reader (`load_embeddings`) refuses embeddings.npy or ids.txt that are not the files of encode.json's generation
(one replaced by another command writing into the folder), an encode.json whose fields are not of their type and
domain, and vectors that are not the float32 `(count, dim)` it records (`retrieval.vector_files`, the one reader of
.npy files). A resumed run checks every shard it finds (float32, the model's width, its rows, finite) before it
counts or merges it, naming the shard that is not.

Shard i holds rows [i * shard_size, (i + 1) * shard_size). Under Accelerate each process encodes the shards
with `i % num_processes == process_index`; a killed run that is started again skips every finished shard.
`encode_cached` keeps a corpus's vectors in such a folder for evaluations that come back to it: it encodes the
texts in the order `Encoder.encode` batches them (longest first) with shards a whole number of batches, so every
batch, and so every vector, is the one an in-memory `Encoder.encode` of the same texts gives.
Does not own reading input files (`retromae.data.retrieval_sets`) or the model (`retromae.models.encoder`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retromae.data.fields import UniqueIds, id_problem, json_type, read_id_lines
from retromae.models.encoder import Encoder, longest_first
from retromae.models.encoder_config import beyond_torch
from retromae.retrieval.lineage import texts_fingerprint
from retromae.retrieval.vector_files import check_encoding_record, check_recorded_count, read_vectors
from retromae.runtime.console import progress
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_array, atomic_path, check_free_space, write_text_atomic
from retromae.runtime.lines import check_regular_file, quoted, read_json_file
from retromae.runtime.options import ConfigError, require
from retromae.runtime.processes import process_state
from retromae.runtime.run_folder import claim_folder, file_fingerprint, input_fingerprint

EMBEDDINGS_FILE = "embeddings.npy"
IDS_FILE = "ids.txt"
INFO_FILE = "encode.json"
SHARDS_DIR = "shards"
MANIFEST_FILE = "manifest.json"
OUTPUTS = (EMBEDDINGS_FILE, IDS_FILE, INFO_FILE, SHARDS_DIR)
CACHE_SHARD_TEXTS = 10_000  # about this many texts per shard of `encode_cached` (rounded to whole batches)


def absolute(name: str | Path) -> str:
    """A local file or folder as an absolute path (so that a record works from any folder); a hub name as it is."""
    return str(Path(name).resolve()) if name and Path(name).exists() else str(name)


def encoder_info(encoder: Encoder, name: str, prefix: str, max_length: int | None, side: str) -> dict[str, Any]:
    """How an encoder turns text of `side` ("query" or "passage") into vectors; stored beside embeddings so that
    their readers know which side they hold and search can encode queries alike."""
    return {"side": side, "model": absolute(name), "model_fingerprint": input_fingerprint(name),
            "pooling": encoder.pooling, "normalize": encoder.normalize, "prefix": prefix,
            "max_length": max_length or encoder.max_length, "dim": encoder.dimension, **encoder.inference,
            "dtype": encoder.precision}


def source_info(path: str | Path | None) -> dict[str, Any]:
    """Where the encoded texts came from: the input file (or folder) and its fingerprint (empty without one)."""
    if path is None:
        return {}
    return {"source": {"path": absolute(path), "fingerprint": input_fingerprint(path)}}


def _save_array(array: np.ndarray, path: Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _check_manifest(shards: Path, manifest: dict[str, Any]) -> None:
    """Start a manifest, or confirm the one left by an interrupted run describes the same work."""
    path = shards / MANIFEST_FILE
    if path.is_file():
        previous = read_json_file(path)
        if previous != manifest:
            changed = sorted(key for key in manifest if previous.get(key) != manifest[key])
            raise ConfigError(f"{shards.parent}: holds unfinished shards of a different encoding run "
                              f"({', '.join(changed)} differ); delete the folder or choose another output")
        return
    shards.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")


def _shard_done(path: Path, rows: int, dim: int) -> bool:
    """Whether shard `path` is written (shards are written atomically: one there is whole), checked first."""
    if not path.is_file():
        return False
    _read_shard(path, rows, dim)
    return True


def _read_shard(path: Path, rows: int, dim: int) -> np.ndarray:
    """Shard `path`, checked to hold `rows` finite float32 vectors of width `dim` (`read_vectors`): DataError naming
    it if not."""
    return read_vectors(path, rows, dim, remedy="; not a shard of this encoding: delete it to encode its rows again")


def _merge(output_dir: Path, ids: Sequence[str], count: int, shard_size: int, info: dict[str, Any]) -> None:
    """Concatenate shards into embeddings.npy through a memory map, then write ids and info."""
    shards = output_dir / SHARDS_DIR
    with atomic_array(output_dir / EMBEDDINGS_FILE, (len(ids), info["dim"])) as merged:
        for index in range(count):
            rows = min(shard_size, len(ids) - index * shard_size)
            merged[index * shard_size:index * shard_size + rows] = _read_shard(
                shards / f"shard-{index:05d}.npy", rows, info["dim"])
    write_text_atomic(output_dir / IDS_FILE, "".join(f"{doc_id}\n" for doc_id in ids))
    files = {name: file_fingerprint(output_dir / name) for name in (EMBEDDINGS_FILE, IDS_FILE)}
    record = {**info, "count": len(ids), "generation": uuid.uuid4().hex, "files": files}
    write_text_atomic(output_dir / INFO_FILE, json.dumps(record, indent=2) + "\n")
    shutil.rmtree(shards)


def _check_ids(ids: Sequence[str], texts: Sequence[str]) -> None:
    """As many ids as texts, each keeping the id rule (`data.fields`), so ids.txt reads back line for line."""
    if len(ids) != len(texts):
        raise DataError(f"{len(ids)} ids but {len(texts)} texts")
    for row, doc_id in enumerate(ids):
        problem = id_problem(doc_id) if isinstance(doc_id, str) else f"is {json_type(doc_id)}, not a string"
        if problem is not None:
            raise DataError(f"id {quoted(doc_id)} (row {row}) cannot be written one per line to {IDS_FILE}: it "
                            f"{problem}")
    if len(set(ids)) != len(ids):  # rare: name the rows of the first repeated id
        seen = UniqueIds()
        for row, doc_id in enumerate(ids):
            seen.add(doc_id, f"row {row} of the ids")


def _check_shards(output_dir: Path, manifest: dict[str, Any], count: int, dimension: int, state: Any) -> None:
    """Return once the disk has room for what is left (the shards, then embeddings.npy beside them: twice the vectors,
    checked on every process) and the main process has checked that the shards folder's are this encoding's."""
    shards = output_dir / SHARDS_DIR
    done = sum(path.stat().st_size for path in shards.glob("shard-*.npy"))  # a resumed encoding's finished shards
    check_free_space(output_dir, 2 * count * dimension * 4 - done, f"encoding {count:,} texts")
    if state.is_main_process:
        _check_manifest(shards, manifest)
    state.wait_for_everyone()


def _write_shards(encoder: Encoder, texts: Sequence[str], mine: dict[Path, slice], todo: dict[Path, slice], *,
                  progress_name: str, show_progress: bool, **encoding: Any) -> None:
    """Encode and save each shard of `todo`, on one progress bar over this process's shards (`mine`), the finished
    ones counted as done from the start."""
    total = sum(rows.stop - rows.start for rows in mine.values())
    with progress(progress_name, total, "text", initial=total - sum(rows.stop - rows.start for rows in todo.values()),
                  enabled=show_progress) as bar:
        for path, rows in todo.items():
            _save_array(encoder.encode(texts[rows], bar=bar, **encoding), path)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """What `encode_into` did: the embeddings `folder`, its `count` texts, and of them those whose vectors an
    earlier run had made (`earlier`: the finished shards of one resumed, or all where the folder was finished)."""

    folder: Path
    count: int
    earlier: int


def encode_to_dir(encoder: Encoder, ids: Sequence[str], texts: Sequence[str], output_dir: str | Path,
                  **options: Any) -> Path:
    """Encode `texts` into `output_dir` as `encode_into` does (its options); returns the folder."""
    return encode_into(encoder, ids, texts, output_dir, **options).folder


def _manifest(encoder: Encoder, info: dict[str, Any], ids: Sequence[str], texts: Sequence[str],
              shard_size: int) -> dict[str, Any]:
    """What makes an encoding the same work: the record but its side and the model's path (the model by its content,
    `model_fingerprint`: a link to it or a copy of it makes the same vectors), the texts and the shards' size."""
    inference = {**encoder.inference, "dtype": encoder.precision}
    by_content = {key: value for key, value in info.items() if key not in ("side", "model", *inference)}
    by_content.update(beyond_torch(inference))  # torch's float32 as it was before backends and precision were recorded
    return {**by_content, "fingerprint": texts_fingerprint(ids, texts), "count": len(ids), "shard_size": shard_size}


def encode_into(encoder: Encoder, ids: Sequence[str], texts: Sequence[str], output_dir: str | Path, *,
                model_name: str = "", shard_size: int = 10_000, batch_size: int = 64,
                max_length: int | None = None, prefix: str = "", show_progress: bool = True,
                overwrite: bool = False, description: str | None = None, source: str | Path | None = None,
                side: str = "passage") -> Encoded:
    """Encode `texts` of `side` ("query" or "passage") into `output_dir` (layout above), resuming finished shards;
    returns the folder and how many texts an earlier run had encoded. `source`: the file the texts were read from,
    recorded (absolute path and fingerprint) so that readers can find them again. The side is recorded, not part of
    the run's identity (the same texts make the same vectors): a finished folder of the other side is encoded again.

    `overwrite` replaces another encoding's outputs there (refused without it). One progress bar per process, named
    `description` (default "encoding N texts"), counts its texts (an earlier run's finished shards done at start)."""
    require(shard_size > 0, "shard_size", "must be positive")
    _check_ids(ids, texts)
    output_dir = Path(output_dir)
    state = process_state()
    model_name = model_name or encoder.source
    info = {**encoder_info(encoder, model_name, prefix, max_length, side), **source_info(source)}
    manifest = _manifest(encoder, info, ids, texts, shard_size)
    claim_folder(output_dir, "encode", {**manifest, "model content": input_fingerprint(model_name)}, OUTPUTS,
                 resume=True, overwrite=overwrite, resumable=False, processes=state, inputs=(model_name, source or ""))
    if _finished(output_dir, manifest, side):
        return Encoded(output_dir, len(ids), len(ids))
    count = -(-len(ids) // shard_size)
    every = {output_dir / SHARDS_DIR / f"shard-{index:05d}.npy":
             slice(index * shard_size, min((index + 1) * shard_size, len(ids))) for index in range(count)}
    earlier = sum(rows.stop - rows.start for path, rows in every.items() if path.is_file())  # before any is written
    _check_shards(output_dir, manifest, len(ids), encoder.dimension, state)
    mine = {path: rows for index, (path, rows) in enumerate(every.items())
            if index % state.num_processes == state.process_index}
    todo = {path: rows for path, rows in mine.items() if not _shard_done(path, rows.stop - rows.start, info["dim"])}
    name = (description or f"encoding {len(ids):,} texts") + (
        f" (process {state.process_index})" if state.num_processes > 1 else "")
    _write_shards(encoder, texts, mine, todo, progress_name=name, show_progress=show_progress, batch_size=batch_size,
                  max_length=max_length, prefix=prefix)
    state.wait_for_everyone()
    if state.is_main_process:
        _merge(output_dir, ids, count, shard_size, {**info, "fingerprint": manifest["fingerprint"]})
    state.wait_for_everyone()
    return Encoded(output_dir, len(ids), earlier)


def _finished(output_dir: Path, manifest: dict[str, Any], side: str) -> bool:
    """Whether `output_dir` already holds the merged result of exactly this work, of `side` (a folder written before
    sides were recorded is of any)."""
    path = output_dir / INFO_FILE
    if not (path.is_file() and (output_dir / EMBEDDINGS_FILE).is_file()):
        return False
    info = read_json_file(path)
    return info.get("side", side) == side and all(info.get(key) == value for key, value in manifest.items()
                                                   if key != "shard_size")


def load_embeddings(folder: str | Path, mmap: bool = True) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Ids, float32 `(N, D)` vectors and encode info of an embeddings folder written by `encode_to_dir`."""
    folder = Path(folder)
    for name in (EMBEDDINGS_FILE, IDS_FILE):
        if not (folder / name).exists():
            raise DataError(f"{folder}: not an embeddings folder (no {name}); create one with `retromae encode`")
        check_regular_file(folder / name)
    info, info_path = read_record(folder), folder / INFO_FILE
    ids = read_id_lines(folder / IDS_FILE)
    check_recorded_count(info, info_path, folder / IDS_FILE, ids)
    vectors = read_vectors(folder / EMBEDDINGS_FILE, len(ids), info.get("dim"), ids=ids, mmap=mmap,
                           remedy=f" as {INFO_FILE} and {IDS_FILE} record; encode the folder again")
    _check_generation(folder, info)
    return ids, vectors, info


def read_record(folder: str | Path) -> dict[str, Any]:
    """The record of an embeddings folder (encode.json), its fields checked (`check_encoding_record`); {} for a folder
    without one (written before records were kept)."""
    path = Path(folder) / INFO_FILE
    return check_encoding_record(read_json_file(path), str(path)) if path.exists() else {}


def _check_generation(folder: Path, info: dict[str, Any]) -> None:
    """DataError naming embeddings.npy or ids.txt when it is not the file encode.json's generation recorded (a
    folder written before generations were recorded has no record, and is read as it is)."""
    files = info.get("files")
    if not isinstance(files, dict):
        return
    for name in (EMBEDDINGS_FILE, IDS_FILE):
        if files.get(name) != file_fingerprint(folder / name):
            raise DataError(f"{folder / name}: was replaced after {folder / INFO_FILE} was written (it does not "
                            f"belong to its generation {info.get('generation')}); encode the folder again with "
                            "`retromae encode --overwrite`")


def encode_cached(encoder: Encoder, ids: Sequence[str], texts: Sequence[str], folder: str | Path, *,
                  model_name: str, batch_size: int = 64, max_length: int | None = None, prefix: str = "",
                  show_progress: bool = True, description: str | None = None) -> np.ndarray:
    """Float32 `(N, D)` vectors of `texts` in input order, equal to `encoder.encode(texts, ...)`'s, kept in `folder`
    (an embeddings folder, resumed by shard when a run was killed; read back when complete)."""
    _, offsets = encoder.token_table(texts, max_length, prefix)  # (N + 1,)
    order = longest_first(offsets)  # the order `Encoder.encode` batches in
    encode_to_dir(encoder, [ids[row] for row in order], [texts[row] for row in order], folder,
                  model_name=model_name, shard_size=batch_size * max(1, CACHE_SHARD_TEXTS // batch_size),
                  batch_size=batch_size, max_length=max_length, prefix=prefix, show_progress=show_progress,
                  description=description)
    _, sorted_vectors, _ = load_embeddings(folder, mmap=False)
    vectors = np.empty_like(sorted_vectors)  # (N, D)
    vectors[order] = sorted_vectors
    return vectors
