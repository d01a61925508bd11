"""`retromae encode`: a corpus or query file → an embeddings folder (float32 .npy + ids.txt), resumable.

Thin: parse → `EncodeConfig` → `retromae.api.encode` (`retrieval.encode.encode_to_dir`). Several GPUs or
processes share the work when started with `accelerate launch -m retromae encode ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from retromae.config import add_config_arguments, build_config, option, require
from retromae.encoder_config import EncoderOptions
from retromae.run_folder import OutputOptions

PROCESSES = "several"  # splits its work over a multi-process launch (retromae.processes)
HELP = "encode a corpus or queries file into float32 vectors (embeddings.npy + ids.txt), resumable by shard"
KINDS = ("auto", "corpus", "queries")


@dataclasses.dataclass(kw_only=True)
class EncodeConfig(OutputOptions, EncoderOptions):
    corpus: Path | None = option(None, "corpus file to encode: BEIR corpus.jsonl or MS MARCO collection.tsv, "
                                       "optionally .gz (a document is its title and text joined)",
                                 required_unless="--queries")
    queries: Path | None = option(None, "queries file to encode: queries.jsonl or queries.tsv, optionally .gz",
                                  required_unless="--corpus")
    output: Path = option(help="output folder: embeddings.npy, ids.txt, encode.json; a killed run started again "
                               "with the same model and input continues")
    passage_prefix: str = option("", "text put before every passage of --corpus, e.g. 'passage: '")
    query_prefix: str = option("", "text put before every query of --queries, e.g. 'query: '")
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own (256 for MiniLM)")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own")
    shard_size: int = option(10_000, "texts per shard; a killed run resumes at the first unfinished shard")
    progress: bool = option(True, "show progress bars")
    input: Path | None = option(None, deprecated="--input is replaced by --corpus FILE or --queries FILE; it "
                                                 "works until the next release")
    kind: str = option("auto", choices=KINDS, deprecated="--kind is no longer needed: --corpus or --queries says "
                                                         "what the file holds")
    prefix: str | None = option(None, deprecated="--prefix is now --passage-prefix (with --corpus) or "
                                                 "--query-prefix (with --queries); it works until the next release")
    max_length: int | None = option(None, deprecated="--max-length is now --passage-max-length (with --corpus) or "
                                                     "--query-max-length (with --queries); it works until the next "
                                                     "release")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._apply_old_spellings()
        require((self.corpus is None) != (self.queries is None), "corpus", "give either --corpus or --queries")
        other, other_input = ("query", "--queries") if self.corpus is not None else ("passage", "--corpus")
        for name in (f"{other}_prefix", f"{other}_max_length"):
            require(getattr(self, name) in ("", None), name, f"applies to {other_input} only")
        for name in ("passage_max_length", "query_max_length"):
            require(getattr(self, name) is None or getattr(self, name) > 0, name, "must be positive")
        require(self.shard_size > 0, "shard_size", "must be positive")

    def _apply_old_spellings(self) -> None:
        """--input/--kind/--prefix/--max-length (until the next release) onto the options that replace them."""
        if self.input is not None:
            require(self.corpus is None and self.queries is None, "input", "give --corpus or --queries, not both")
            as_queries = self.kind == "queries" or (self.kind == "auto" and Path(self.input).name.startswith("queries"))
            self.queries, self.corpus = (self.input, None) if as_queries else (None, self.input)
        side = "query" if self.queries is not None else "passage"
        if self.prefix is not None:
            setattr(self, f"{side}_prefix", self.prefix)
        if self.max_length is not None:
            setattr(self, f"{side}_max_length", self.max_length)

    @property
    def text_options(self) -> tuple[str, int | None]:
        """(prefix, max length) of the texts this run encodes."""
        if self.queries is not None:
            return self.query_prefix, self.query_max_length
        return self.passage_prefix, self.passage_max_length


def read_texts(config: EncodeConfig) -> tuple[list[str], list[str]]:
    """Ids and texts of the corpus (title and text joined) or of the queries file."""
    from retromae.data.retrieval_sets import load_corpus, load_queries

    if config.queries is not None:
        queries = load_queries(config.queries)
        return list(queries), list(queries.values())
    corpus = load_corpus(config.corpus)
    return list(corpus), [passage.joined() for passage in corpus.values()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, EncodeConfig)


def run(args: argparse.Namespace) -> int:
    from retromae.api import encode
    from retromae.console import format_seconds
    from retromae.processes import is_main_process
    from retromae.retrieval.encode import INFO_FILE

    started = time.perf_counter()
    folder = encode(build_config(EncodeConfig, args))
    if is_main_process():
        info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
        print(f"encoded {info['count']:,} texts in {format_seconds(time.perf_counter() - started)} into {folder} "
              f"({info['dim']} dimensions, at most {info['max_length']} tokens, pooling {info['pooling']}, "
              f"normalize {info['normalize']})")
    return 0
