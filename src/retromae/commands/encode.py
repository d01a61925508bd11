"""`retromae encode`: a corpus or query file → an embeddings folder (float32 .npy + ids.txt), resumable.

Thin: parse → `EncodeConfig` → `retrieval.encode.encode_to_dir`. Several GPUs or processes share the work
when started with `accelerate launch -m retromae encode ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from accelerate import PartialState

from retromae.config import add_config_arguments, build_config, option, require
from retromae.data.retrieval_sets import load_corpus, load_queries
from retromae.encoder import EncoderOptions
from retromae.retrieval.encode import encode_to_dir

HELP = "Encode a corpus or queries file into float32 vectors (embeddings.npy + ids.txt), resumable by shard"
KINDS = ("auto", "corpus", "queries")


@dataclasses.dataclass(kw_only=True)
class EncodeConfig(EncoderOptions):
    input: Path = option(help="corpus (BEIR corpus.jsonl, MS MARCO collection.tsv) or queries (queries.jsonl, "
                              "queries.tsv) file, optionally .gz")
    output: Path = option(help="output folder: embeddings.npy, ids.txt, encode.json")
    kind: str = option("auto", "what --input holds; auto: queries when its file name starts with 'queries'",
                       choices=KINDS)
    prefix: str = option("", "text put before every input, e.g. 'query: ' or 'passage: '")
    max_length: int | None = option(None, "max tokens per text; default: the model's own (e.g. 256 for MiniLM)")
    shard_size: int = option(10_000, "texts per shard; a killed run resumes at the first unfinished shard")
    progress: bool = option(True, "show progress bars")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.shard_size > 0, "shard_size", "must be positive")
        require(self.max_length is None or self.max_length > 0, "max_length", "must be positive")


def read_texts(path: Path, kind: str) -> tuple[list[str], list[str]]:
    """Ids and texts of a corpus (title and text joined) or a query file."""
    if kind == "queries" or (kind == "auto" and Path(path).name.startswith("queries")):
        queries = load_queries(path)
        return list(queries), list(queries.values())
    corpus = load_corpus(path)
    return list(corpus), [passage.joined() for passage in corpus.values()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EncodeConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.console import format_seconds

    started = time.perf_counter()
    config = build_config(EncodeConfig, args)
    ids, texts = read_texts(config.input, config.kind)
    encoder = config.load_encoder(PartialState().device)
    folder = encode_to_dir(encoder, ids, texts, config.output, model_name=config.model,
                           shard_size=config.shard_size, batch_size=config.batch_size,
                           max_length=config.max_length, prefix=config.prefix, show_progress=config.progress,
                           description=f"encoding {Path(config.input).name} ({len(ids):,} texts)")
    if PartialState().is_main_process:
        print(f"encoded {len(ids):,} texts in {format_seconds(time.perf_counter() - started)} into {folder} "
              f"({encoder.dimension} dimensions, at most {config.max_length or encoder.max_length} tokens, "
              f"pooling {encoder.pooling}, normalize {encoder.normalize})")
    return 0
