"""The one reader of the numpy arrays the project reads back, and the check of the records that describe vectors.

Owns `read_array` (any .npy file of an embeddings or index folder: a regular file, numpy's format read without
pickle and memory-mapped first, so that a header promising more than the file holds is refused before anything is
allocated; DataError naming the file otherwise), `read_vectors` (the float rows of embeddings.npy, a shard,
index.npy, vectors.npy: exactly little-endian float32, two-dimensional, the recorded count and width, finite and
below `models.finite.VECTOR_LIMIT`; no other dtype is converted, since every writer of the project writes float32)
and `check_encoding_record` (the fields of encode.json, and of its copy under "encoder" in index.json: each of its
type and domain, DataError naming the file and the field), and `check_recorded_count` (a record's count against its
ids). Does not own the folders' layouts (`retrieval.encode`, `retrieval.index`, `retrieval.bm25`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from retromae.data.fields import whole_number_field
from retromae.models.encoder_config import POOLINGS
from retromae.models.finite import VECTOR_LIMIT, check_vectors
from retromae.runtime.errors import DataError
from retromae.runtime.lines import check_regular_file, quoted
from retromae.runtime.options import Domain, between
from retromae.runtime.precision import DTYPE_NAMES

VECTOR_DTYPE = np.dtype("<f4")  # what every writer of vectors writes: little-endian float32
MAX_DIM = 1 << 16  # the widest vectors a model makes (config.json's hidden_size is bounded alike)
MAX_LENGTH = 1 << 20  # the longest input a record may claim (config.json's max_position_embeddings, likewise)
# encode.json's fields (and index.json's "encoder"): each optional (a record of an older version lacks some), but of
# this type and, for numbers, this domain where present
TEXT_FIELDS = ("model", "model_fingerprint", "prefix", "fingerprint", "generation", "backend", "quantize")
NUMBER_FIELDS = {"dim": between(1, MAX_DIM), "count": Domain(0), "max_length": between(1, MAX_LENGTH)}
SIDES = ("query", "passage")  # encode.json's side: the texts of `encode --queries`, or of `encode --corpus`


def read_array(path: Path, mmap: bool = False) -> np.ndarray:
    """The array of the .npy file `path` (memory-mapped with `mmap`, else read into memory): DataError naming it when
    it is not a regular file, not numpy's format, holds Python objects, or is shorter than its header says."""
    path = Path(path)
    check_regular_file(path, "numpy array file")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise DataError(f"{path}: not a numpy array file ({error})") from None
    if not isinstance(array, np.ndarray):  # a .npz archive under a .npy name
        array.close()
        raise DataError(f"{path}: not a numpy array file (a .npz archive of several arrays)")
    return array if mmap else np.array(array)


def read_vectors(path: Path, rows: int, dim: int | None = None, *, ids: list[str] | None = None, mmap: bool = True,
                 remedy: str = "") -> np.ndarray:
    """The float32 rows `(rows, dim)` of the .npy file `path` (`dim` None: any width of at least 1), finite; a
    DataError naming the file (and `remedy`, what to do) for another dtype or shape, NonFiniteError for NaN or
    infinity (the first bad row's id when `ids` are given)."""
    vectors = read_array(path, mmap)
    width_ok = vectors.ndim == 2 and vectors.shape[1] >= 1 and dim in (None, vectors.shape[1])
    if vectors.dtype != VECTOR_DTYPE or not width_ok or vectors.shape[0] != rows:
        wanted = f"({rows}, {'D' if dim is None else dim})"
        raise DataError(f"{path}: holds {_dtype_name(vectors.dtype)} of shape {vectors.shape}, not float32 of shape "
                        f"{wanted} (little-endian, one row per id, the recorded width){remedy}")
    check_vectors(vectors, str(path), ids, VECTOR_LIMIT)
    return vectors


def _dtype_name(dtype: np.dtype) -> str:
    """A dtype in words, its byte order shown where it is not the machine's ("float32 (big-endian)")."""
    order = {">": " (big-endian)", "<": " (little-endian)"}.get(dtype.byteorder, "")
    return f"{dtype.name}{order if dtype.byteorder != '=' else ''}"


def check_encoding_record(record: Any, where: str) -> dict[str, Any]:
    """`record` (encode.json, or index.json's "encoder"), each field present of the type and domain the project
    writes; DataError naming `where` and the field otherwise."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: is {type(record).__name__}, not a JSON object of how the vectors were made")
    for name in TEXT_FIELDS:
        if name in record and not isinstance(record[name], str):
            raise DataError(f"{where}: field {name!r} is {quoted(record[name])}, not text")
    for name, domain in NUMBER_FIELDS.items():
        if name in record:
            whole_number_field(record, name, where, domain)
    for name, names in (("pooling", POOLINGS), ("side", SIDES), ("dtype", DTYPE_NAMES)):
        if name in record and record[name] not in names:
            raise DataError(f"{where}: field {name!r} is {quoted(record[name])}, not one of {', '.join(names)}")
    if "normalize" in record and not isinstance(record["normalize"], bool):
        raise DataError(f"{where}: field 'normalize' is {quoted(record['normalize'])}, not true or false")
    for name in ("source", "files"):
        if record.get(name) is not None and not isinstance(record[name], dict):
            raise DataError(f"{where}: field {name!r} is {quoted(record[name])}, not a JSON object")
    return record


def check_recorded_count(record: dict[str, Any], where: Path, ids_file: Path, ids: list[str]) -> None:
    """DataError naming `where` (encode.json, index.json) when the `count` it records is not the number of `ids`
    listed in `ids_file`."""
    if record.get("count", len(ids)) != len(ids):
        raise DataError(f"{where}: field 'count' is {record['count']} but {ids_file} lists {len(ids)} ids")
