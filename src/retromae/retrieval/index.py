"""Vector indexes: faiss through an index-factory string, with an exact numpy index when faiss is absent.

Owns building (`build_index`: "Flat", "HNSW32", "IVF1024,PQ32", ... with inner-product or L2 metric, and the
compressed types of `faiss_options.COMPRESSED`: int8, binary), search parameters ("efSearch=128,nprobe=32"), top-k
search returning higher-is-better scores, and the index folder:

    index.faiss | index.npy   the faiss index (a binary one for type binary), or the vectors of the exact numpy index
    vectors.npy               type binary: the float32 rows its shortlist is rescored with (memory-mapped when read)
    ids.txt                   the id of each indexed row
    bm25/                     the lexical side of a hybrid index (`retrieval.bm25`'s folder), same ids
    index.json                type, factory, metric, count, dim, the encoder info of the embeddings, the corpus, the
                              generation (a random id of this writing) and a fingerprint of every file above

index.json is written last: a file of the folder whose fingerprint differs from the one recorded there (ids.txt
replaced by `retromae encode --output` into the folder, say) belongs to another generation and is refused by
`load_index`, which also refuses a file of the folder that is not a regular file (before faiss or numpy opens it,
folders without fingerprints included), an index.json field not of its type and domain or disagreeing with the files
(count, dim), and a faiss index whose float tables (a Flat index's vectors, quantizers' centroids) hold NaN or
infinity. A writer holds the folder's exclusive lock (`run_folder.claim_folder`); `reading` takes the shared
one, so that a reader never sees half of a rewrite. Does not own encoding (`retrieval.encode`) or turning hits into
runs (`retrieval.search`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from retromae.data.fields import read_id_lines
from retromae.models.finite import VECTOR_LIMIT, check_vectors
from retromae.retrieval.config import METRICS
from retromae.retrieval.faiss_options import (
    BINARY,
    COMPRESSED,
    INDEX_TYPES,
    SHORTLIST,
    check_factory,
    check_factory_fits,
    check_search_params,
    check_search_value,
    check_shortlist,
    index_type,
)
from retromae.retrieval.top_k import capped_top_k, ranked_top_k
from retromae.retrieval.vector_files import check_encoding_record, check_recorded_count, read_vectors
from retromae.runtime.console import progress
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_array, atomic_path, write_text_atomic
from retromae.runtime.lines import check_regular_file, file_kind, open_own_file, quoted, read_json_file
from retromae.runtime.options import ConfigError, require
from retromae.runtime.run_folder import LOCK_FILE, file_fingerprint, held_here

if TYPE_CHECKING:
    from retromae.retrieval.bm25 import BM25

INDEX_INFO = "index.json"
IDS_FILE = "ids.txt"
FAISS_FILE = "index.faiss"
NUMPY_FILE = "index.npy"
VECTORS_FILE = "vectors.npy"
LEXICAL_DIR = "bm25"
TRAIN_SAMPLE = 200_000
EXACT_BLOCK = 256
RESCORE_ROWS = 1 << 16  # float rows a binary index gathers for one block of queries' shortlists (96 MB at 384-d)
REBUILD = "; rebuild the index with `retromae index --overwrite`"


def import_faiss() -> Any | None:
    """The faiss module, or None when it is not installed (then only the exact numpy index exists)."""
    try:
        # faiss, optional: the exact numpy index works without it
        import faiss
    except ImportError:
        return None
    return faiss


class ExactIndex:
    """Exact top-k search in numpy with faiss's interface (`add`, `search`, `ntotal`, `d`, `metric`)."""

    def __init__(self, dim: int, metric: str = "ip") -> None:
        require(metric in METRICS, "metric", f"must be one of {', '.join(METRICS)}")
        self.d = dim
        self.metric = metric
        self.vectors = np.zeros((0, dim), dtype=np.float32)  # (N, D)

    @property
    def ntotal(self) -> int:
        return int(self.vectors.shape[0])

    def add(self, vectors: np.ndarray) -> None:
        self.vectors = np.concatenate([self.vectors, np.asarray(vectors, dtype=np.float32)])

    def _scores(self, queries: np.ndarray) -> np.ndarray:
        """Higher-is-better scores `(Q, N)`: inner products, or negated squared L2 distances."""
        products = queries @ self.vectors.T  # (Q, N)
        if self.metric == "ip":
            return products
        return 2 * products - (queries**2).sum(1, keepdims=True) - (self.vectors**2).sum(1)[None, :]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss-style `(D, I)`, each `(Q, k)`: inner products or squared L2 distances, -1 where fewer than k."""
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)  # (Q, k)
        indices = np.full((len(queries), k), -1, dtype=np.int64)  # (Q, k)
        top = capped_top_k(k, self.ntotal)
        for start in range(0, len(queries) if top else 0, EXACT_BLOCK):
            block = self._scores(np.asarray(queries[start:start + EXACT_BLOCK], dtype=np.float32))  # (B, N)
            best = np.argpartition(-block, top - 1, axis=1)[:, :top]  # (B, top), unordered
            order = np.argsort(-np.take_along_axis(block, best, 1), axis=1, kind="stable")
            ranked = np.take_along_axis(best, order, 1)  # (B, top), best first
            scores[start:start + len(block), :top] = np.take_along_axis(block, ranked, 1)
            indices[start:start + len(block), :top] = ranked
        return (scores if self.metric == "ip" else -scores), indices


class BinaryIndex:
    """The sign bits of each vector in a faiss binary index, searched by Hamming distance for the best `shortlist`
    x k rows, which are rescored with the float `vectors` `(N, D)` (an array, or vectors.npy memory-mapped: only the
    shortlists' rows are read) by `metric`; faiss's interface (`search`, `ntotal`, `d`, `metric`) like `ExactIndex`."""

    def __init__(self, binary: Any, vectors: np.ndarray, metric: str, shortlist: int = SHORTLIST) -> None:
        require(metric in METRICS, "metric", f"must be one of {', '.join(METRICS)}")
        _checked_shortlist("--shortlist", shortlist)
        self.binary, self.vectors, self.metric, self.shortlist = binary, vectors, metric, shortlist
        self.d = int(vectors.shape[1])

    @classmethod
    def build(cls, vectors: np.ndarray, metric: str, shortlist: int = SHORTLIST) -> BinaryIndex:
        """A binary index over `vectors` `(N, D)`, which it keeps (not copied) to rescore with."""
        faiss = import_faiss()
        binary = faiss.index_binary_factory(8 * _code_bytes(vectors.shape[1]), COMPRESSED[BINARY])
        for start in range(0, len(vectors), RESCORE_ROWS):
            binary.add(sign_bits(np.asarray(vectors[start:start + RESCORE_ROWS])))
        return cls(binary, vectors, metric, shortlist)

    @property
    def ntotal(self) -> int:
        return int(self.binary.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss-style `(D, I)`, each `(Q, k)`: inner products or squared L2 distances of the float vectors over each
        query's Hamming shortlist, -1 where fewer than k."""
        depth = min(self.shortlist * k, self.ntotal)
        distances = np.full((len(queries), k), -np.inf if self.metric == "ip" else np.inf, dtype=np.float32)
        indices = np.full((len(queries), k), -1, dtype=np.int64)  # (Q, k)
        step = max(1, RESCORE_ROWS // max(depth, 1))
        for start in range(0, len(queries) if depth else 0, step):
            block = np.asarray(queries[start:start + step], dtype=np.float32)  # (B, D)
            _, rows = self.binary.search(sign_bits(block), depth)  # (B, depth) by Hamming distance
            scores = self._rescored(block, rows)  # (B, depth), higher is better, -inf where no row
            top = min(k, depth)
            order = np.argsort(-scores, axis=1, kind="stable")[:, :top]  # (B, top)
            best = np.take_along_axis(scores, order, 1)
            found = np.where(np.isfinite(best), np.take_along_axis(rows, order, 1), -1)
            distances[start:start + len(block), :top] = best if self.metric == "ip" else -best
            indices[start:start + len(block), :top] = found
        return distances, indices

    def _rescored(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Higher-is-better scores `(B, depth)` of each query's shortlist `rows` with the float vectors (rows read
        once each, in file order), -inf where a row is -1."""
        wanted, where = np.unique(np.where(rows < 0, 0, rows), return_inverse=True)
        gathered = np.asarray(self.vectors[wanted], dtype=np.float32)[where.reshape(rows.shape)]  # (B, depth, D)
        products = np.einsum("bd,bnd->bn", queries, gathered)
        if self.metric == "l2":
            products = 2 * products - (queries**2).sum(1, keepdims=True) - (gathered**2).sum(-1)
        return np.where(rows < 0, -np.inf, products).astype(np.float32)


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """The packed sign bits `(N, ceil(D / 8))` uint8 of float `vectors` `(N, D)`: 1 where a dimension is positive
    (the dimensions past D up to a whole byte are 0 for every vector, so they add no Hamming distance)."""
    return np.packbits(vectors > 0, axis=1)


def _code_bytes(dim: int) -> int:
    return (dim + 7) // 8


def _checked_shortlist(where: str, value: Any) -> None:
    try:
        check_shortlist(value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def _faiss_metric(faiss: Any, metric: str) -> int:
    return faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2


def _skip_polysemous_training(faiss: Any, index: Any) -> None:
    """Turn off PQ polysemous training (faiss's default): slow, and only used by Hamming-filtered search."""
    if hasattr(index, "do_polysemous_training"):
        index.do_polysemous_training = False
    for attribute in ("index", "base_index", "storage"):  # PreTransform, Refine, HNSW wrappers
        inner = getattr(index, attribute, None)
        if inner is not None:
            _skip_polysemous_training(faiss, faiss.downcast_index(inner))


def _train(index: Any, vectors: np.ndarray, seed: int) -> None:
    """Train an index that needs it (IVF, PQ) on a seeded sample of at most TRAIN_SAMPLE vectors."""
    if index.is_trained:
        return
    if len(vectors) > TRAIN_SAMPLE:
        rows = np.sort(np.random.default_rng(seed).choice(len(vectors), TRAIN_SAMPLE, replace=False))
        vectors = vectors[rows]
    with _faiss_errors(f"cannot train this index on {len(vectors)} vectors"):
        index.train(np.ascontiguousarray(vectors, dtype=np.float32))


@contextlib.contextmanager
def _faiss_errors(doing: str) -> Iterator[None]:
    """faiss's C++ exception (a RuntimeError) or failed allocation (a MemoryError, `std::bad_alloc`) while an index
    is trained or filled, as one line naming --factory: `doing` and faiss's last line."""
    try:
        yield
    except MemoryError as error:
        raise ConfigError(f"--factory: {doing}: faiss ran out of memory ({str(error).strip() or 'MemoryError'}); "
                          "give a smaller index") from error
    except RuntimeError as error:
        raise ConfigError(f"--factory: {doing}: {str(error).strip().splitlines()[-1]}") from error


def build_index(embeddings: np.ndarray, factory: str = "Flat", metric: str = "ip", params: str = "",
                seed: int = 0, add_batch: int = 100_000, shortlist: int | None = None) -> Any:
    """An index over `embeddings` `(N, D)` from a faiss factory string or a compressed type (int8; binary, whose
    float rows are `embeddings` itself, rescoring `shortlist` x k rows per query); exact numpy "Flat" without
    faiss."""
    require(metric in METRICS, "metric", f"must be one of {', '.join(METRICS)}")
    _checked("--factory", check_factory, factory)
    faiss = import_faiss()
    if faiss is None:
        require(factory == "Flat", "factory", f"{factory!r} needs faiss (pip install faiss-cpu); without it "
                                              "only 'Flat' (exact numpy search) is available")
    if shortlist is not None and factory != BINARY:
        raise ConfigError(f"--shortlist: acts only with --factory {BINARY} (the index asked for is {factory!r})")
    if factory == BINARY:
        index = BinaryIndex.build(embeddings, metric, SHORTLIST if shortlist is None else shortlist)
        set_search_params(index, params)
        return index
    if faiss is None:
        index = ExactIndex(embeddings.shape[1], metric)
    else:
        _checked("--factory", lambda text: check_factory_fits(text, min(len(embeddings), TRAIN_SAMPLE), len(embeddings),
                                                              int(embeddings.shape[1])), factory)
        try:
            index = faiss.index_factory(int(embeddings.shape[1]), COMPRESSED.get(factory, factory),
                                        _faiss_metric(faiss, metric))
        except RuntimeError as error:
            raise ConfigError(f"--factory: {factory!r} is not a valid faiss index factory string") from error
        _skip_polysemous_training(faiss, index)
        _train(index, embeddings, seed)
    with _faiss_errors(f"cannot add {len(embeddings)} vectors to this index"):
        for start in range(0, len(embeddings), add_batch):
            index.add(np.ascontiguousarray(embeddings[start:start + add_batch], dtype=np.float32))
    set_search_params(index, params)
    return index


def set_search_params(index: Any, params: str, where: str = "--params") -> None:
    """Apply faiss search parameters such as "efSearch=128,nprobe=32" (ignored by the exact index), checked first
    (`check_search_params`; a refusal names `where` they came from: the option, or an index.json)."""
    _checked(where, check_search_params, params)
    if params and isinstance(index, BinaryIndex):
        raise ConfigError(f"{where}: {quoted(params)}: no faiss search parameter applies to a binary index (its "
                          "shortlist is --shortlist)")
    if not params or isinstance(index, ExactIndex):
        return
    faiss = import_faiss()
    try:
        faiss.ParameterSpace().set_index_parameters(index, params)
    except RuntimeError as error:
        raise ConfigError(f"--params: {quoted(params)} does not apply to this index: "
                          f"{str(error).strip().splitlines()[-1]}") from error


def _checked(where: str, check: Any, value: Any) -> None:
    """`check(value)` (`retrieval.faiss_options`), its ValueError as a ConfigError naming `where`."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected text, got {quoted(value)}")
    try:
        check(value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def search(index: Any, queries: np.ndarray, k: int, *, ids: Sequence[str], batch_size: int = 4096,
           show_progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top-k `(scores, indices)`, each `(Q, min(k, index.ntotal))` (`capped_top_k`), best first with ties by the
    rows' `ids` (`top_k.ranked_top_k`: the first n never depend on k); scores are higher-is-better, indices -1
    (scores -inf) where an approximate index finds fewer."""
    require(len(ids) == index.ntotal, "ids", f"{len(ids)} ids for an index of {index.ntotal} vectors")
    k = capped_top_k(k, index.ntotal)
    scores = np.empty((len(queries), k), dtype=np.float32)  # (Q, k)
    indices = np.empty((len(queries), k), dtype=np.int64)  # (Q, k)
    if k == 0:  # an empty index has nothing to find
        return scores, indices
    with progress(f"searching {len(queries):,} queries", len(queries), "query", enabled=show_progress) as bar:
        for start in range(0, len(queries), batch_size):
            block = np.ascontiguousarray(queries[start:start + batch_size], dtype=np.float32)
            found = ranked_top_k(_backend(index, block), len(block), k, ids)
            scores[start:start + len(block)], indices[start:start + len(block)] = found
            bar.update(len(block))
    return scores, indices


def _backend(index: Any, block: np.ndarray) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """`index`'s top-`depth` of the queries of `block` at `positions`: higher-is-better scores, -inf where none."""
    l2 = _is_l2(index)

    def top(positions: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        distances, rows = index.search(np.ascontiguousarray(block[positions]), depth)  # (W, depth) each
        scores = (-distances if l2 else distances).astype(np.float32)
        scores[rows < 0] = -np.inf
        return scores, rows

    return top


def _is_l2(index: Any) -> bool:
    if isinstance(index, (ExactIndex, BinaryIndex)):
        return index.metric == "l2"
    return index.metric_type == import_faiss().METRIC_L2


def save_index(index: Any, folder: str | Path, ids: list[str], info: dict[str, Any] | None = None,
               lexical: BM25 | None = None) -> None:
    """Write the index folder (layout above), with `lexical` (a BM25 over the same ids) as its lexical side; `info`
    (factory, encoder info, corpus, ...) goes into index.json, written last with the files' fingerprints."""
    folder = Path(folder)
    require(index.ntotal == len(ids), "ids", f"{len(ids)} ids for an index of {index.ntotal} vectors")
    folder.mkdir(parents=True, exist_ok=True)
    written = [IDS_FILE]
    if isinstance(index, ExactIndex):
        with atomic_path(folder / NUMPY_FILE) as tmp, open(tmp, "wb") as handle:
            np.save(handle, index.vectors, allow_pickle=False)
        backend, metric, name = "numpy", index.metric, NUMPY_FILE
    elif isinstance(index, BinaryIndex):
        with atomic_path(folder / FAISS_FILE) as tmp:
            import_faiss().write_index_binary(index.binary, str(tmp))
        _save_rows(index.vectors, folder / VECTORS_FILE)
        backend, metric, name = "faiss", index.metric, FAISS_FILE
        written.append(VECTORS_FILE)
    else:
        faiss = import_faiss()
        with atomic_path(folder / FAISS_FILE) as tmp:
            faiss.write_index(index, str(tmp))
        backend, metric, name = "faiss", "l2" if _is_l2(index) else "ip", FAISS_FILE
    write_text_atomic(folder / IDS_FILE, "".join(f"{doc_id}\n" for doc_id in ids))
    written.insert(0, name)
    if lexical is not None:
        require(lexical.ids == list(ids), "lexical", "the BM25 index must hold the same ids, in the same order")
        written += [f"{LEXICAL_DIR}/{name}" for name in lexical.save(folder / LEXICAL_DIR)]
    kind = {"type": BINARY, "shortlist": index.shortlist} if isinstance(index, BinaryIndex) else {}
    record = {"type": index_type((info or {}).get("factory", "Flat")), **(info or {}), **kind, "backend": backend,
              "metric": metric, "count": len(ids), "dim": int(index.d),
              "lexical": LEXICAL_DIR if lexical is not None else None, "generation": uuid.uuid4().hex,
              "files": {file: file_fingerprint(folder / file) for file in written}}
    write_text_atomic(folder / INDEX_INFO, json.dumps(record, indent=2) + "\n")


def _save_rows(vectors: np.ndarray, path: Path) -> None:
    """Write float32 rows `(N, D)` (an array or a memory map) as a .npy file atomically, a block at a time."""
    with atomic_array(path, tuple(vectors.shape)) as rows:
        for start in range(0, len(vectors), RESCORE_ROWS):
            rows[start:start + RESCORE_ROWS] = vectors[start:start + RESCORE_ROWS]


@contextlib.contextmanager
def reading(folder: str | Path) -> Iterator[None]:
    """Hold the shared lock of an index (or embeddings) folder while reading it: ConfigError at once when a writer
    (`retromae index`, `retromae encode`) holds its exclusive lock, and a writer that starts meanwhile is refused.
    A folder whose lock file can be neither opened nor created (read-only) is read as it is; DataError when the
    lock is not a regular file (`open_own_file`: a symbolic link is not followed, a FIFO not waited on)."""
    lock = Path(os.path.abspath(Path(folder) / LOCK_FILE))
    if held_here(lock):  # this process wrote the folder (a library user encoding, then indexing): its own outputs
        yield
        return
    try:
        descriptor = open_own_file(lock, os.O_RDONLY if os.path.lexists(lock) else os.O_RDWR | os.O_CREAT)
    except OSError:
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise ConfigError(f"{folder}: being written by another retromae process (its lock {LOCK_FILE} is held); "
                          "search it once that command has ended") from None
    try:
        yield
    finally:
        os.close(descriptor)


def load_index(folder: str | Path) -> tuple[Any, list[str], dict[str, Any]]:
    """The index, its row ids and its index.json info from a folder written by `save_index`, each file checked to
    be the one index.json recorded (its generation), each field of index.json of its type and domain and agreeing
    with the files (count, dim), and a faiss index's float tables finite."""
    folder = Path(folder)
    if not (folder / INDEX_INFO).exists():  # (a regular file: checked by its reader)
        raise DataError(f"{folder}: not an index folder (no {INDEX_INFO}); create one with `retromae index`")
    info = _read_index_info(folder / INDEX_INFO)
    check_generation(folder, info)
    ids = read_id_lines(folder / IDS_FILE)
    check_recorded_count(info, folder / INDEX_INFO, folder / IDS_FILE, ids)
    if info["backend"] == "numpy":
        vectors = read_vectors(folder / NUMPY_FILE, len(ids), info.get("dim"), ids=ids, mmap=False, remedy=REBUILD)
        index = ExactIndex(vectors.shape[1], info["metric"])
        index.vectors = vectors
    elif info.get("type") == BINARY:
        index = _load_binary(folder, ids, info)
    else:
        index = _load_faiss(folder)
    if index.ntotal != len(ids) or index.d != info.get("dim", index.d):
        raise DataError(f"{folder / INDEX_INFO}: records {info.get('dim')}-dimensional vectors, but the index holds "
                        f"{index.ntotal} vectors of {index.d} dimensions for the {len(ids)} ids of {IDS_FILE}{REBUILD}")
    return index, ids, info


def _load_faiss(folder: Path) -> Any:
    """The faiss index of a folder (index.faiss), every float table it keeps checked finite (`_check_faiss_finite`)."""
    faiss = import_faiss()
    if faiss is None:
        raise ConfigError(f"{folder}: this is a faiss index; install faiss (pip install faiss-cpu) to load it")
    index = _read_faiss(faiss.read_index, folder / FAISS_FILE, "faiss index")
    _check_faiss_finite(faiss, index, folder / FAISS_FILE)
    _check_stored_settings(faiss, index, folder / FAISS_FILE)
    return index


def _stored_settings(faiss: Any, index: Any) -> Iterator[tuple[str, str, float]]:
    """(how it is shown, the search parameter that bounds it, its value) of each search setting a faiss index and the
    indexes inside it store: an HNSW's efSearch, an NSG's search_L (its efSearch), an IVF's nprobe and max_codes, a
    refinement's k_factor, a PQ's polysemous ht, a residual quantizer's beam and a residual coarse quantizer's beam
    factor."""
    index = faiss.downcast_index(index)
    for holder, attribute, name in (("hnsw", "efSearch", "efSearch"), ("nsg", "search_L", "efSearch"),
                                    (None, "nprobe", "nprobe"), (None, "max_codes", "max_codes"),
                                    (None, "k_factor", "k_factor"), (None, "polysemous_ht", "ht"),
                                    ("rq", "max_beam_size", "max_beam_size"), (None, "beam_factor", "beam_factor")):
        owner = getattr(index, holder, None) if holder else index
        value = getattr(owner, attribute, None)
        if isinstance(value, (int, float)) and not (name == "beam_factor" and value < 0):
            yield f"{attribute}={value}", name, value
    for attribute in ("quantizer", "storage", "index", "base_index", "refine_index"):
        inner = getattr(index, attribute, None)
        if inner is not None and isinstance(inner, faiss.Index):
            yield from _stored_settings(faiss, inner)


def _check_stored_settings(faiss: Any, index: Any, path: Path) -> None:
    """DataError naming `path` when a search setting the faiss `index` stores (`_stored_settings`) is outside what
    the search parameter bounding it takes (`faiss_options.check_search_value`, the bound of --params): a search
    would use it as stored (an efSearch of 2**30 allocates that many candidates a query)."""
    for shown, name, value in _stored_settings(faiss, index):
        try:
            check_search_value(name, value, shown)
        except ValueError as error:
            raise DataError(f"{path}: a search setting it stores is out of bounds: {error}{REBUILD}") from None


def _float_tables(faiss: Any, index: Any) -> Iterator[np.ndarray]:
    """Every float table a faiss index keeps (no copy of the vectors): a Flat index's vectors (also the storage of
    HNSW and the coarse quantizer of IVF, read through the wrappers), an IVF-Flat index's inverted lists, the
    matrices of a pre-transform (PCA, OPQ), a scalar quantizer's trained ranges (int8) and a product quantizer's
    centroids. The codes of the quantized types are integers, with no NaN to hold."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexFlatCodes) and hasattr(index, "get_xb"):
        yield faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
    if isinstance(index, faiss.IndexIVFFlat):
        yield from _inverted_list_vectors(faiss, index)
    if isinstance(index, faiss.IndexPreTransform):
        for position in range(index.chain.size()):
            yield from _transform_tables(faiss, faiss.downcast_VectorTransform(index.chain.at(position)))
    for table in ("sq", "pq"):
        quantizer = getattr(index, table, None)
        if quantizer is not None:
            yield faiss.vector_to_array(quantizer.trained if table == "sq" else quantizer.centroids)
    for attribute in ("quantizer", "storage", "index", "base_index", "refine_index"):
        inner = getattr(index, attribute, None)
        if inner is not None and isinstance(inner, faiss.Index):
            yield from _float_tables(faiss, inner)


def _inverted_list_vectors(faiss: Any, index: Any) -> Iterator[np.ndarray]:
    """The vectors an IVF-Flat index keeps in its inverted lists (float32 rows stored as bytes), a view of each list."""
    lists = index.invlists
    for number in range(lists.nlist):
        size = lists.list_size(number)
        if size:
            codes = faiss.rev_swig_ptr(lists.get_codes(number), size * lists.code_size)
            yield codes.view(np.float32).reshape(size, -1)


def _transform_tables(faiss: Any, transform: Any) -> Iterator[np.ndarray]:
    """The float tables a transform of an IndexPreTransform applies to every vector: a linear map's matrix and bias
    (PCA, OPQ, random rotation) and a mean subtracted (centering, ITQ), read through ITQ's inner PCA."""
    for table in ("A", "b", "mean"):
        values = getattr(transform, table, None)
        if values is not None and values.size():
            yield faiss.vector_to_array(values)
    inner = getattr(transform, "pca_then_itq", None)
    if inner is not None:
        yield from _transform_tables(faiss, inner)


def _check_faiss_finite(faiss: Any, index: Any, path: Path) -> None:
    """NonFiniteError naming `path` when a float table of the faiss `index` holds a NaN or an infinity, or a value
    beyond `VECTOR_LIMIT` (a Flat index with such a row would silently drop that document from every result)."""
    for table in _float_tables(faiss, index):
        rows = table.reshape(len(table), -1) if table.ndim > 1 else table.reshape(1, -1)
        check_vectors(rows, str(path), limit=VECTOR_LIMIT)


def _read_faiss(read: Callable[[str], Any], path: Path, what: str) -> Any:
    """`read(path)` (faiss's reader of a float or a binary index), its RuntimeError as a DataError naming the file
    (a binary index recorded as another type, or the reverse); one that is not a regular file is never opened."""
    check_regular_file(path, what)
    try:
        return read(str(path))
    except RuntimeError as error:
        raise DataError(f"{path}: not a {what} ({str(error).strip().splitlines()[-1]})") from None


def _load_binary(folder: Path, ids: list[str], info: dict[str, Any]) -> BinaryIndex:
    """The binary index of a folder: index.faiss (faiss's binary format), vectors.npy memory-mapped."""
    faiss = import_faiss()
    if faiss is None:
        raise ConfigError(f"{folder}: this is a faiss index; install faiss (pip install faiss-cpu) to load it")
    vectors = read_vectors(folder / VECTORS_FILE, len(ids), info.get("dim"), ids=ids, remedy=REBUILD)
    binary = _read_faiss(faiss.read_index_binary, folder / FAISS_FILE, "faiss binary index")
    if binary.d != 8 * _code_bytes(vectors.shape[1]):
        raise DataError(f"{folder / FAISS_FILE}: a binary index of {binary.d} bits for {vectors.shape[1]}-dimensional "
                        f"rows in {VECTORS_FILE}")
    return BinaryIndex(binary, vectors, info["metric"], info["shortlist"])


def load_lexical(folder: str | Path, ids: list[str], info: dict[str, Any]) -> BM25 | None:
    """The lexical (BM25) side of an index loaded by `load_index`, or None for a dense-only index."""
    from retromae.retrieval.bm25 import BM25  # bm25s: only for a hybrid index

    if info.get("lexical") is None:
        return None
    return BM25.load(Path(folder) / LEXICAL_DIR, ids)


def check_generation(folder: Path, info: dict[str, Any]) -> None:
    """DataError naming the first file of the folder that is not the one index.json recorded (an index written
    before generations were recorded has no record, and is read as it is)."""
    files = info.get("files")
    if files is None:
        return
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise DataError(f"{folder / INDEX_INFO}: 'files' is not an object of fingerprints")
    for name, recorded in files.items():
        path = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise DataError(f"{folder / INDEX_INFO}: names {quoted(name)}, outside the index folder")
        kind = file_kind(path)
        if kind not in (None, "missing"):
            raise DataError(f"{path}: is {kind}, not a regular file{REBUILD}")
        if kind == "missing" or file_fingerprint(path) != recorded:
            state = "is missing" if kind == "missing" else "was replaced after the index was written"
            raise DataError(f"{path}: {state} (it does not belong to generation {info.get('generation')} recorded "
                            f"in {folder / INDEX_INFO}, e.g. `retromae encode --output` into this folder); rebuild "
                            "the index with `retromae index --overwrite`")


def _read_index_info(path: Path) -> dict[str, Any]:
    """index.json, checked to name a backend and a metric this module writes, and each other field of its type and
    domain (`_check_index_fields`)."""
    check_regular_file(path)
    info = read_json_file(path)
    _check_index_fields(info, path)
    if info.get("backend") not in ("numpy", "faiss") or info.get("metric") not in METRICS:
        raise DataError(f"{path}: backend {quoted(info.get('backend'))} and metric {quoted(info.get('metric'))}: not "
                        "an index description of `retromae index` (backend numpy or faiss, metric "
                        f"{' or '.join(METRICS)})")
    if info.get("lexical") not in (None, LEXICAL_DIR):
        raise DataError(f"{path}: lexical {quoted(info.get('lexical'))}: not {LEXICAL_DIR!r} or null")
    if info.get("type", "factory") not in INDEX_TYPES:
        raise DataError(f"{path}: type {quoted(info.get('type'))}: not one of {', '.join(INDEX_TYPES)}")
    if info.get("type") == BINARY:
        try:
            check_shortlist(info.get("shortlist"))
        except ValueError as error:
            raise DataError(f"{path}: shortlist {error}") from None
        if info["backend"] != "faiss":
            raise DataError(f"{path}: backend {info['backend']!r}: a binary index is a faiss index")
    return info


def _check_index_fields(info: dict[str, Any], path: Path) -> None:
    """DataError naming index.json and the field: text fields that are not text, count and dim that are not whole
    numbers in range, an encoder record that is not one (`check_encoding_record`) or disagrees with the index's
    count or dim, a corpus record that is not an object."""
    for name in ("factory", "params", "generation", "embeddings_generation"):
        if info.get(name) is not None and not isinstance(info[name], str):
            raise DataError(f"{path}: field {name!r} is {quoted(info[name])}, not text")
    check_encoding_record({name: info[name] for name in ("count", "dim") if name in info}, str(path))
    if info.get("corpus") is not None and not isinstance(info["corpus"], dict):
        raise DataError(f"{path}: field 'corpus' is {quoted(info['corpus'])}, not a JSON object")
    if "encoder" not in info:
        return
    encoder = check_encoding_record(info["encoder"], f"{path}: encoder")
    differ = [name for name in ("count", "dim") if name in encoder and name in info and encoder[name] != info[name]]
    if differ:
        shown = ", ".join(f"{name} {info[name]} but the encoder's {encoder[name]}" for name in differ)
        raise DataError(f"{path}: records {shown}: the index is not of the vectors its encoder record "
                        f"describes{REBUILD}")
