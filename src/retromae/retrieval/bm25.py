"""BM25 lexical retrieval with bm25s: the baseline of every retrieval table and the source of BM25 negatives.

Owns tokenisation for BM25 (lower-casing, English stopwords, optional Snowball stemming through PyStemmer, as
BEIR-style baselines do), building the index over a corpus, returning runs `{query_id: {doc_id: score}}`, the
warning that counts queries left without results, and the lexical folder (`BM25.save`, `BM25.load`), written and
read by this module rather than by bm25s's own loader, so that every file is checked as a hostile file would be:

    params.json     BM25Params, bm25s's delta, the document count and a fingerprint of the ids
    data.npy        float32 term-document scores (CSC data), finite and non-negative
    indices.npy     int32/int64 document rows of each score, in [0, count)
    indptr.npy      int column starts, one per vocabulary term plus one, non-decreasing, ending at len(data)
    vocab.json      term → column, a bijection onto [0, vocabulary size)
    nonoccurrence.npy   float32 score of each term where it is absent (bm25l and bm25+ only)

Arrays are read with `allow_pickle=False`; files are written atomically (`retromae.runtime.io`); the ids themselves are
the index folder's (`retrieval.index`). Does not own reading data files or evaluating runs.

bm25s is imported only when an index is built (`_bm25s`): it imports jax when jax is installed, and jax would
otherwise take most of a GPU's memory at import, for every process that merely loaded this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from retromae.retrieval.config import BM25Params
from retromae.retrieval.top_k import capped_top_k, ranked_top_k
from retromae.retrieval.vector_files import read_array
from retromae.runtime.console import notice, step, verbose
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_path, write_text_atomic
from retromae.runtime.lines import quoted, read_json_file
from retromae.runtime.options import ConfigError, require

PARAMS_FILE = "params.json"
VOCAB_FILE = "vocab.json"
ARRAYS = ("data", "indices", "indptr")
NONOCCURRENCE = "nonoccurrence"
FILES = (PARAMS_FILE, VOCAB_FILE, *(f"{name}.npy" for name in (*ARRAYS, NONOCCURRENCE)))  # every file `save` writes


def _stemmer(name: str) -> Any:
    """A PyStemmer stemmer (bm25s calls its `stemWords`), or None for no stemming."""
    if name == "none":
        return None
    try:
        # PyStemmer, optional: only for --stemmer english
        import Stemmer
    except ImportError as error:
        raise ConfigError("--stemmer: english stemming needs PyStemmer (pip install PyStemmer)") from error
    return Stemmer.Stemmer(name)


def _bm25s() -> ModuleType:
    """bm25s, imported with jax (if installed) kept on the CPU unless the user chose jax's platform themselves."""
    if "JAX_PLATFORMS" not in os.environ and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"
    # bm25s imports jax when installed: only after its platform is set
    import bm25s

    return bm25s


class BM25:
    """A bm25s index over a corpus; `search` returns the top-k documents of each query with positive scores."""

    def __init__(self, params: BM25Params | None = None) -> None:
        self.params = params or BM25Params()
        self.stem = _stemmer(self.params.stemmer)
        self.ids: list[str] = []
        self.searchable = False
        self.retriever = _bm25s().BM25(k1=self.params.k1, b=self.params.b, method=self.params.variant)

    def _tokens(self, texts: Sequence[str], show_progress: bool | None) -> list[list[str]]:
        stopwords = self.params.stopwords if self.params.stopwords != "none" else None
        return _bm25s().tokenize(list(texts), stopwords=stopwords, stemmer=self.stem, return_ids=False,
                              show_progress=_bars(show_progress))

    def index(self, ids: Sequence[str], texts: Sequence[str], show_progress: bool | None = None) -> BM25:
        """Index `texts` under `ids`; returns self. bm25s's bars show when `show_progress` (default: --verbose)."""
        require(len(ids) == len(texts) and len(ids) > 0, "corpus", "needs one text per id and at least one text")
        self.ids = list(ids)
        tokens = self._tokens(texts, show_progress)
        self.searchable = any(tokens)  # bm25s cannot index a corpus without a term (empty or stopwords only)
        if self.searchable:
            self.retriever.index(tokens, show_progress=_bars(show_progress))
        return self

    def search(self, queries: Mapping[str, str], k: int = 100, show_progress: bool | None = None,
               threads: int = 0) -> dict[str, dict[str, float]]:
        """Run `{query_id: {doc_id: score}}` of the top-k documents that share a term with each query (score > 0),
        ties by document id (`top_k.ranked_top_k`: the first n never depend on k)."""
        capped_top_k(k, len(self.ids))
        query_ids = list(queries)
        if not self.searchable:  # no document has a term a query could share
            return {query_id: {} for query_id in query_ids}
        tokens = self._tokens([queries[query_id] for query_id in query_ids], show_progress)

        def top(positions: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
            rows, scores = self.retriever.retrieve([tokens[n] for n in positions], k=depth,
                                                   show_progress=_bars(show_progress), n_threads=threads)  # (W, depth)
            rows, scores = np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)
            shares_nothing = scores <= 0  # a document without a query term is no hit
            return np.where(shares_nothing, -np.inf, scores), np.where(shares_nothing, -1, rows)

        scores, rows = ranked_top_k(top, len(query_ids), k, self.ids)  # (Q, k) each
        return {query_id: {self.ids[row]: float(score) for row, score in zip(rows[n], scores[n], strict=True)
                           if row >= 0} for n, query_id in enumerate(query_ids)}

    def save(self, folder: str | Path) -> list[str]:
        """Write the lexical folder (layout above) of this index; returns the names of the files written (other
        files there are left as they are)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {}
        if self.searchable:
            scores = self.retriever.scores
            arrays = {name: np.asarray(scores[name]) for name in ARRAYS}
            if self.retriever.nonoccurrence_array is not None:
                arrays[NONOCCURRENCE] = np.asarray(self.retriever.nonoccurrence_array, dtype=np.float32)
        for name, array in arrays.items():
            with atomic_path(folder / f"{name}.npy") as tmp, open(tmp, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
        vocab = self.retriever.vocab_dict if self.searchable else {}
        write_text_atomic(folder / VOCAB_FILE, json.dumps(vocab, ensure_ascii=False) + "\n")
        record = {**dataclasses.asdict(self.params), "delta": float(self.retriever.delta),
                  "count": len(self.ids), "ids": ids_fingerprint(self.ids), "searchable": self.searchable}
        write_text_atomic(folder / PARAMS_FILE, json.dumps(record, indent=2) + "\n")
        return sorted([*(f"{name}.npy" for name in arrays), VOCAB_FILE, PARAMS_FILE])

    @classmethod
    def load(cls, folder: str | Path, ids: Sequence[str]) -> BM25:
        """The index saved in `folder` by `save` for these `ids` (the index folder's), every file checked:
        DataError naming the file that is not what `save` writes or belongs to other ids."""
        folder = Path(folder)
        record = _read_params(folder / PARAMS_FILE)
        if record["count"] != len(ids) or record["ids"] != ids_fingerprint(ids):
            raise DataError(f"{folder / PARAMS_FILE}: indexes {record['count']} documents with other ids than the "
                            f"{len(ids)} of this index; rebuild it with `retromae index --hybrid`")
        engine = cls(BM25Params(**{field.name: record[field.name] for field in dataclasses.fields(BM25Params)}))
        engine.ids, engine.searchable = list(ids), record["searchable"]
        engine.retriever.delta = record["delta"]
        if engine.searchable:
            vocab = _read_vocab(folder / VOCAB_FILE)
            terms = len(vocab) - (vocab.get("") == len(vocab) - 1)  # bm25s's empty term, last, has no column
            arrays = _read_arrays(folder, len(ids), terms, engine.params.variant in ("bm25l", "bm25+"))
            engine.retriever.scores = {**{name: arrays[name] for name in ARRAYS}, "num_docs": len(ids)}
            engine.retriever.vocab_dict = vocab
            engine.retriever.unique_token_ids_set = set(vocab.values())
            engine.retriever.nonoccurrence_array = arrays.get(NONOCCURRENCE)
        return engine


def ids_fingerprint(ids: Sequence[str]) -> str:
    """A hash of the ids in order, so that a lexical index is never used with another index's rows."""
    return hashlib.sha1("\n".join(ids).encode("utf-8")).hexdigest()[:16]


def _read_params(path: Path) -> dict[str, Any]:
    """params.json, each field of the type `BM25.save` writes (numbers finite, by `read_json_file`)."""
    if not path.is_file():
        raise DataError(f"{path.parent}: not a lexical index folder (no {PARAMS_FILE}); build one with "
                        "`retromae index --hybrid`")
    record = read_json_file(path)
    kinds = {"k1": (int, float), "b": (int, float), "delta": (int, float), "variant": str, "stopwords": str,
             "stemmer": str, "count": int, "ids": str, "searchable": bool}
    wrong = [name for name, kind in kinds.items()
             if not isinstance(record.get(name), kind) or (kind is not bool and isinstance(record.get(name), bool))]
    if wrong:
        raise DataError(f"{path}: {', '.join(wrong)} missing or of the wrong type; not written by `retromae index`")
    try:
        BM25Params(**{field.name: record[field.name] for field in dataclasses.fields(BM25Params)})
    except ConfigError as error:
        raise DataError(f"{path}: {error}") from None
    return record


def _read_vocab(path: Path) -> dict[str, int]:
    """vocab.json: term → column, the columns exactly 0 .. size - 1."""
    vocab = read_json_file(path)
    columns = sorted(value for value in vocab.values() if isinstance(value, int) and not isinstance(value, bool))
    if len(columns) != len(vocab) or columns != list(range(len(vocab))):
        raise DataError(f"{path}: the term columns are not the integers 0 to {len(vocab) - 1}, each once")
    return vocab


def _load_array(path: Path, kinds: str) -> np.ndarray:
    """A one-dimensional array of one of numpy's `kinds` ("f", "iu") read without pickle."""
    array = read_array(path)
    if array.ndim != 1 or array.dtype.kind not in kinds:
        raise DataError(f"{path}: holds {array.dtype} of shape {array.shape}, not a flat array of the right kind")
    return array


def _read_arrays(folder: Path, count: int, terms: int, nonoccurrence: bool) -> dict[str, np.ndarray]:
    """The CSC score matrix (and the non-occurrence scores), checked to be one `bm25s` can search safely."""
    data = _load_array(folder / "data.npy", "f").astype(np.float32, copy=False)
    indices, indptr = _load_array(folder / "indices.npy", "iu"), _load_array(folder / "indptr.npy", "iu")
    if not np.isfinite(data).all() or (data < 0).any():
        raise DataError(f"{folder / 'data.npy'}: holds negative, NaN or infinite scores")
    if len(indices) != len(data) or (len(indices) and (indices.min() < 0 or indices.max() >= count)):
        raise DataError(f"{folder / 'indices.npy'}: {len(indices)} rows for {len(data)} scores, or a row outside "
                        f"the {count} documents")
    if len(indptr) != terms + 1 or indptr[0] != 0 or indptr[-1] != len(data) or (np.diff(indptr) < 0).any():
        raise DataError(f"{folder / 'indptr.npy'}: not {terms + 1} non-decreasing column starts from 0 to "
                        f"{len(data)} (one per term of {VOCAB_FILE} but bm25s's empty term, plus one)")
    arrays = {"data": data, "indices": indices, "indptr": indptr}
    if nonoccurrence:
        extra = _load_array(folder / f"{NONOCCURRENCE}.npy", "f").astype(np.float32, copy=False)
        if len(extra) != terms or not np.isfinite(extra).all():
            raise DataError(f"{folder / NONOCCURRENCE}.npy: not {terms} finite scores (one per term)")
        arrays[NONOCCURRENCE] = extra
    return arrays


def empty_results(run: Mapping[str, Mapping[str, float]], what: str = "BM25") -> int:
    """Count the queries of `run` without a single document and say so in one warning on standard error (e.g. a
    one-word query whose word is in no document, or only stopwords); returns the count."""
    empty = [query_id for query_id, hits in run.items() if not hits]
    if empty:
        example = ", ".join(quoted(query_id) for query_id in empty[:3])
        notice(f"retromae: warning: {what}: {len(empty)} of {len(run)} queries got no results (no query word in any "
               f"document, after stopwords; e.g. {example}); they count as 0 in every metric")
    return len(empty)


def _bars(show_progress: bool | None) -> bool:
    """bm25s draws several anonymous bars per call: off inside a quiet command unless asked for."""
    return verbose() if show_progress is None else show_progress


def bm25_search(corpus: Mapping[str, str], queries: Mapping[str, str], k: int = 100,
                params: BM25Params | None = None, show_progress: bool = True,
                warn_empty: bool = True) -> dict[str, dict[str, float]]:
    """BM25 run of `queries` over `corpus` (both id → text), announced by one status line; the queries without a
    result are counted in a warning unless the caller says them itself (`warn_empty=False`: `evaluate`'s table)."""
    with step(f"BM25 over {len(corpus):,} documents for {len(queries):,} queries", show_progress):
        engine = BM25(params).index(list(corpus), list(corpus.values()))
        run = engine.search(queries, k)
    if warn_empty:
        empty_results(run)
    return run
