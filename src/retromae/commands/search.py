"""`retromae search`: an index folder + queries (an embeddings folder, or a queries file) → a TREC run file.

Thin: parse → `SearchConfig` → `retrieval.index.search` → `write_trec_run`. A queries file is encoded with the
model, pooling and normalisation recorded in the index (from `retromae encode`) unless options override them.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retromae.config import POSITIVE, TOP_K, ConfigError, add_config_arguments, build_config, option
from retromae.console import quiet_by_default
from retromae.encoder_config import EncoderOptions
from retromae.run_folder import OutputOptions, claim_file, input_paths

if TYPE_CHECKING:
    import numpy as np

    from retromae.encoder import Encoder

HELP = "search an index with queries (embeddings folder or queries file) and write the top-k as a TREC run"


@dataclasses.dataclass(kw_only=True)
class SearchConfig(OutputOptions, EncoderOptions):
    model: str | None = option(None, "model that encodes a queries file; default: the one recorded in the index")
    index: Path = option(help="index folder written by `retromae index`")
    queries: Path = option(help="queries: an embeddings folder from `retromae encode`, or a queries file "
                                "(queries.jsonl, queries.tsv) to encode here")
    output: Path = option(help="TREC run file to write")
    top_k: int = option(100, "documents retrieved per query", TOP_K, aliases=("--k",))
    params: str | None = option(None, "faiss search parameters, e.g. efSearch=256; default: those saved in the index")
    query_prefix: str = option("", "text put before every query when encoding a queries file, e.g. 'query: '")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    tag: str = option("retromae", "run tag written in the last column")


def _load_query_encoder(config: SearchConfig, recorded: dict[str, Any]) -> Encoder:
    # torch: only for a queries file to encode
    from retromae.encoder import Encoder

    model = config.model or recorded.get("model")
    if not model:
        raise ConfigError("--model: the index records no model; name the one that encoded the corpus")
    pooling = config.pooling or recorded.get("pooling")
    normalize = recorded.get("normalize") if config.normalize is None else config.normalize
    encoder = Encoder.load(model, pooling=pooling, normalize=normalize, device=config.device, dtype=config.dtype)
    encoder.check_lengths(config)
    return encoder


def query_vectors(config: SearchConfig, recorded: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    """Ids and `(Q, D)` vectors of the queries: read from an embeddings folder, or encoded from a file."""
    # numpy and torch: only when the command runs, so --help stays instant
    import numpy as np

    from retromae.data.retrieval_sets import load_queries
    from retromae.retrieval.encode import load_embeddings
    from retromae.retrieval.search import TextOptions, encode_texts

    if Path(config.queries).is_dir():
        ids, vectors, _ = load_embeddings(config.queries)
        return ids, np.asarray(vectors, dtype=np.float32)
    queries = load_queries(config.queries)
    encoder = _load_query_encoder(config, recorded)
    options = TextOptions(config.query_prefix, config.query_max_length)
    return list(queries), encode_texts(encoder, list(queries.values()), options, config.batch_size)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, SearchConfig)


def run(args: argparse.Namespace) -> int:
    search(build_config(SearchConfig, args))
    return 0


@quiet_by_default
def search(config: SearchConfig | None = None, /, **options: Any) -> Path:
    """Search an index as `config` (or `SearchConfig(**options)`) says; returns the TREC run file
    (`retromae.search(...)`)."""
    # numpy and faiss: only when the command runs, so --help stays instant
    from retromae.data.retrieval_sets import write_trec_run
    from retromae.retrieval.index import load_index, set_search_params
    from retromae.retrieval.index import search as search_index
    from retromae.retrieval.search import results_to_run

    config = config if config is not None else SearchConfig(**options)
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    index, doc_ids, info = load_index(config.index)
    set_search_params(index, info.get("params", "") if config.params is None else config.params)
    query_ids, vectors = query_vectors(config, info.get("encoder", {}))
    if vectors.shape[1] != index.d:
        raise ConfigError(f"--queries: {vectors.shape[1]}-dimensional query vectors for a {index.d}-dimensional index")
    scores, rows = search_index(index, vectors, config.top_k, show_progress=True)
    write_trec_run(results_to_run(query_ids, doc_ids, scores, rows), config.output, tag=config.tag)
    print(f"searched {len(query_ids)} queries over {len(doc_ids)} documents; top-{config.top_k} run in {config.output}")
    return Path(config.output)
