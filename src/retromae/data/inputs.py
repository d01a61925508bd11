"""What an input file or folder may be, checked before the heavy work: each format's check of a path's head.

Owns the formats a command's input options are read in (`CHECKS`: `documents`: a pre-training corpus;
`corpus`: a retrieval corpus, its documents named by id; `queries`; `retrieval set`: a BEIR or MS MARCO folder;
`retrieval sets`: `evaluate --data`, such folders, folders of them or STS files; `training data`: a training file or a
retrieval set's folder; `training file`; `pairs`; `run`: a TREC run; `sts`: an STS Benchmark file), and
`check_format(format, path, split, qrels_format)`: the path read as that format would read it, but only its first
`HEAD_LINES` lines per file, through the very reader the command uses (the readers' `limit`), so that the rules are
the readers' own and a format error is named in a second instead of after torch and the model (issue 61). What a
path names (a folder standing for its corpus file, `data.corpus.corpus_files`) is decided by the same functions.
Errors in later lines are named where the command reads the whole file. Which option of which command reads
which format is declared by each config class (`INPUT_FORMATS`, a class attribute, read over its bases by
`declared_formats`). Does not own reading whole files, nor when the check runs (`retromae.preflight`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retromae.data.corpus import CORPUS_NAMES, HF_PREFIX, corpus_sources, iter_corpus, iter_documents
from retromae.data.pairs import iter_pairs
from retromae.data.retrieval_sets import (
    check_retrieval_set,
    load_corpus,
    load_queries,
    load_sts_pairs,
    read_trec_run,
)
from retromae.data.training_groups import read_training_records

HEAD_LINES = 1000  # lines (or documents) of each file read before the work: a format error shows in the first ones
EMBEDDINGS_INFO = "encode.json"  # a folder holding it is an embeddings folder (`search --queries`), read by its reader


def declared_formats(config_cls: type) -> dict[str, tuple[str, str | None]]:
    """option → (format, the option naming its split, or None) declared by `config_cls` and its bases
    (`INPUT_FORMATS = {"corpus": "corpus", "data": ("retrieval set", "split")}`)."""
    declared: dict[str, tuple[str, str | None]] = {}
    for cls in reversed(config_cls.__mro__):
        for option, value in cls.__dict__.get("INPUT_FORMATS", {}).items():
            declared[option] = (value, None) if isinstance(value, str) else tuple(value)
    return declared


def check_format(kind: str, value: Any, split: str = "test", qrels_format: str = "auto") -> None:
    """DataError (or ConfigError) naming the file and line when the head of `value` (a path, or a list of them for
    `documents` and `retrieval sets`) is not of format `kind`."""
    CHECKS[kind](value, split, qrels_format)


def _documents(sources: Any, split: str, qrels_format: str) -> None:
    """Pre-training sources: each read as far as its first HEAD_LINES documents; all of them local and none
    holding a document with text is the empty corpus (`data.corpus.empty_corpus`). A hub data set is left to the
    command (loading it is the heavy work)."""
    sources = [str(source) for source in (sources if isinstance(sources, list | tuple) else [sources])]
    local = [source for source in sources if not source.startswith(HF_PREFIX)]
    if local and len(local) == len(sources):
        _drain(itertools.islice(iter_corpus(local), HEAD_LINES + 1))  # a corpus shorter than that: wholly read
        return
    for source, _ in corpus_sources(local) if local else ():  # a file reached twice refused before the hub's
        _drain(itertools.islice(iter_documents(source), HEAD_LINES))


def _drain(items: Any) -> None:
    for _ in items:
        pass


def _corpus(path: Any, split: str, qrels_format: str) -> None:
    load_corpus(Path(path), HEAD_LINES)


def _queries(path: Any, split: str, qrels_format: str) -> None:
    """A queries file or folder; an embeddings folder (query vectors, `search --queries`) is its reader's."""
    if not (Path(path) / EMBEDDINGS_INFO).is_file():
        load_queries(Path(path), HEAD_LINES)


def _retrieval_set(path: Any, split: str, qrels_format: str) -> None:
    check_retrieval_set(Path(path), split, qrels_format, HEAD_LINES)


def _retrieval_sets(paths: Any, split: str, qrels_format: str) -> None:
    """`evaluate --data`: each folder holding a corpus file by name is a retrieval set; an STS file or a folder of
    data sets is left to the command, which resolves them."""
    for path in map(Path, paths if isinstance(paths, list | tuple) else [paths]):
        if path.is_dir() and any((path / f"{name}{gz}").exists() for name in CORPUS_NAMES for gz in ("", ".gz")):
            _retrieval_set(path, split, qrels_format)


def _training_data(path: Any, split: str, qrels_format: str) -> None:
    if Path(path).is_dir():
        _retrieval_set(path, split, qrels_format)
    else:
        _training_file(path, split, qrels_format)


def _training_file(path: Any, split: str, qrels_format: str) -> None:
    _drain(read_training_records(Path(path), HEAD_LINES))


def _pairs(path: Any, split: str, qrels_format: str) -> None:
    _drain(iter_pairs(Path(path), limit=HEAD_LINES))


def _run(path: Any, split: str, qrels_format: str) -> None:
    read_trec_run(Path(path), HEAD_LINES)


def _sts(path: Any, split: str, qrels_format: str) -> None:
    load_sts_pairs(Path(path), HEAD_LINES)


CHECKS: dict[str, Callable[[Any, str, str], None]] = {
    "documents": _documents, "corpus": _corpus, "queries": _queries, "retrieval set": _retrieval_set,
    "retrieval sets": _retrieval_sets, "training data": _training_data, "training file": _training_file,
    "pairs": _pairs, "run": _run, "sts": _sts,
}
