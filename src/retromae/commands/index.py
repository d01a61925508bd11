"""`retromae index`: an embeddings folder → a faiss (or exact numpy) index folder.

Thin: parse → `IndexConfig` → `index(config)` (the Python API's `retromae.index`) → `retrieval.index.build_index` /
`save_index`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from retromae.config import SEED, add_config_arguments, build_config, option
from retromae.console import quiet_by_default
from retromae.retrieval.index import FAISS_FILE, IDS_FILE, INDEX_INFO, METRICS, NUMPY_FILE, build_index, save_index
from retromae.run_folder import OutputOptions, claim_folder, input_paths, run_identity

HELP = "build a faiss index (Flat, HNSW, IVF-PQ via a factory string) over an embeddings folder"


@dataclasses.dataclass(kw_only=True)
class IndexConfig(OutputOptions):
    embeddings: Path = option(help="embeddings folder written by `retromae encode`")
    output: Path = option(help="index folder to write (index.faiss or index.npy, ids.txt, index.json)")
    factory: str = option("Flat", "faiss index factory string, e.g. Flat, HNSW32, IVF1024,PQ32 "
                                  "(without faiss only Flat: exact numpy search)")
    metric: str = option("ip", "similarity: ip (inner product; cosine on normalised vectors) or l2",
                         choices=METRICS)
    params: str = option("", "faiss search parameters stored with the index, e.g. efSearch=128 or nprobe=32")
    seed: int = option(0, "seed of the training sample for IVF/PQ indexes", SEED)


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

    config = config if config is not None else IndexConfig(**options)
    claim_folder(config.output, "index", run_identity(config), (FAISS_FILE, NUMPY_FILE, IDS_FILE, INDEX_INFO),
                 overwrite=config.overwrite, resumable=False, inputs=input_paths(config))
    ids, vectors, encoding = load_embeddings(config.embeddings)
    built = build_index(vectors, factory=config.factory, metric=config.metric, params=config.params,
                        seed=config.seed)
    save_index(built, config.output, ids, {"factory": config.factory, "params": config.params, "encoder": encoding})
    print(f"indexed {len(ids)} vectors into {config.output} ({config.factory}, {config.metric})")
    return Path(config.output)
