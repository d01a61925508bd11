"""`retromae index`: an embeddings folder → a faiss (or exact numpy) index folder; with `--hybrid`, a BM25 index of
the same documents beside it, so that `retromae search` fuses both.

Thin: parse → `IndexConfig` → `index(config)` (the Python API's `retromae.index`) → `retrieval.index.build_index` /
`save_index` (and `retrieval.bm25.BM25` over the corpus the embeddings folder records, or --corpus).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retromae.config import SEED, add_config_arguments, build_config, option, require
from retromae.console import quiet_by_default
from retromae.retrieval.bm25 import BM25Params
from retromae.retrieval.index import (
    FAISS_FILE,
    IDS_FILE,
    INDEX_INFO,
    LEXICAL_DIR,
    METRICS,
    NUMPY_FILE,
    build_index,
    save_index,
)
from retromae.run_folder import OutputOptions, claim_folder, input_paths, run_identity

if TYPE_CHECKING:
    from retromae.retrieval.bm25 import BM25

HELP = "build a faiss index (Flat, HNSW, IVF-PQ via a factory string) over an embeddings folder, with --hybrid BM25"


@dataclasses.dataclass(kw_only=True)
class IndexConfig(OutputOptions, BM25Params):
    embeddings: Path = option(help="embeddings folder written by `retromae encode`")
    output: Path = option(help="index folder to write (index.faiss or index.npy, ids.txt, index.json; bm25/ "
                               "with --hybrid)")
    factory: str = option("Flat", "faiss index factory string, e.g. Flat, HNSW32, IVF1024,PQ32 "
                                  "(without faiss only Flat: exact numpy search)")
    metric: str = option("ip", "similarity: ip (inner product; cosine on normalised vectors) or l2",
                         choices=METRICS)
    params: str = option("", "faiss search parameters stored with the index, e.g. efSearch=128 or nprobe=32")
    seed: int = option(0, "seed of the training sample for IVF/PQ indexes", SEED)
    hybrid: bool = option(False, "also build a BM25 index (bm25s) of the same documents, so that `retromae search` "
                                 "fuses BM25 with the model")
    corpus: Path | None = option(None, "corpus file whose texts --hybrid indexes; default: the one the embeddings "
                                       "folder records (encode.json)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hybrid:
            changed = [f.name for f in dataclasses.fields(BM25Params) if getattr(self, f.name) != f.default]
            require(not changed and self.corpus is None, (changed or ["corpus"])[0], "applies with --hybrid only")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, IndexConfig)


def run(args: argparse.Namespace) -> int:
    index(build_config(IndexConfig, args))
    return 0


@quiet_by_default
def index(config: IndexConfig | None = None, /, **options: Any) -> Path:
    """Index an embeddings folder as `config` (or `IndexConfig(**options)`) says; returns the index folder
    (`retromae.index(...)`)."""
    # torch (through retrieval.encode): only when the command runs, so --help stays instant
    from retromae.retrieval.encode import load_embeddings
    from retromae.retrieval.index import reading

    config = config if config is not None else IndexConfig(**options)
    claim_folder(config.output, "index", run_identity(config),
                 (FAISS_FILE, NUMPY_FILE, IDS_FILE, INDEX_INFO, LEXICAL_DIR), overwrite=config.overwrite,
                 resumable=False, inputs=input_paths(config))
    with reading(config.embeddings):  # the vectors are read (memory-mapped) while the index is built
        ids, vectors, encoding = load_embeddings(config.embeddings)
        built = build_index(vectors, factory=config.factory, metric=config.metric, params=config.params,
                            seed=config.seed)
    corpus = corpus_record(config, encoding)
    lexical = lexical_index(config, ids, corpus) if config.hybrid else None
    info = {"factory": config.factory, "params": config.params, "encoder": encoding,
            "embeddings_generation": encoding.get("generation"), "corpus": corpus}
    save_index(built, config.output, ids, info, lexical)
    sides = f"{config.factory}, {config.metric}" + (", with BM25" if lexical is not None else "")
    print(f"indexed {len(ids)} vectors into {config.output} ({sides})")
    return Path(config.output)


def corpus_record(config: IndexConfig, encoding: dict[str, Any]) -> dict[str, Any] | None:
    """The corpus the index's texts come from (absolute path and fingerprint): --corpus, else encode.json's."""
    from retromae.retrieval.encode import source_info

    if config.corpus is not None:
        return source_info(config.corpus)["source"]
    source = encoding.get("source")
    return source if isinstance(source, dict) else None


def lexical_index(config: IndexConfig, ids: list[str], corpus: dict[str, Any] | None) -> BM25:
    """A BM25 index over the texts of `ids`, read from the corpus file (every id must be there)."""
    from retromae.data.retrieval_sets import load_corpus
    from retromae.errors import DataError
    from retromae.retrieval.bm25 import BM25
    from retromae.retrieval.texts import corpus_path

    path = config.corpus or corpus_path(corpus, f"{Path(config.embeddings) / 'encode.json'}", "--corpus")
    passages = load_corpus(path)
    missing = [doc_id for doc_id in ids if doc_id not in passages]
    if missing:
        raise DataError(f"{path}: lacks {len(missing)} of the {len(ids)} ids of {config.embeddings} (e.g. "
                        f"{missing[0]!r}); give the corpus they were encoded from with --corpus")
    params = BM25Params(**{f.name: getattr(config, f.name) for f in dataclasses.fields(BM25Params)})
    return BM25(params).index(ids, [passages[doc_id].joined() for doc_id in ids])
