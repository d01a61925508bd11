"""The options of `retromae encode`, declared apart from the encoding so that parsing them imports no torch, and
beside the library code that runs them (`retromae.api.encode`) rather than in the command layer.

Owns `EncodeConfig` (every option of `retromae encode`, validated, with the spellings kept until the next release)
and `read_texts`, the ids and texts a config names. Does not own encoding or the embeddings folder
(`retromae.retrieval.encode`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from retromae.config import POSITIVE, option, require
from retromae.encoder_config import EncoderOptions
from retromae.run_folder import OutputOptions

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
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own (256 for MiniLM)",
                                            POSITIVE)
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    shard_size: int = option(10_000, "texts per shard; a killed run resumes at the first unfinished shard", POSITIVE)
    progress: bool = option(True, "show progress bars")
    input: Path | None = option(None, deprecated="--input is replaced by --corpus FILE or --queries FILE; it "
                                                 "works until the next release")
    kind: str = option("auto", choices=KINDS, deprecated="--kind is no longer needed: --corpus or --queries says "
                                                         "what the file holds")
    prefix: str | None = option(None, deprecated="--prefix is now --passage-prefix (with --corpus) or "
                                                 "--query-prefix (with --queries); it works until the next release")
    max_length: int | None = option(None, domain=POSITIVE, deprecated="--max-length is now --passage-max-length "
                                                                      "(with --corpus) or --query-max-length (with "
                                                                      "--queries); it works until the next release")

    def __post_init__(self) -> None:
        super().__post_init__()
        self._apply_old_spellings()
        require((self.corpus is None) != (self.queries is None), "corpus", "give either --corpus or --queries")
        other, other_input = ("query", "--queries") if self.corpus is not None else ("passage", "--corpus")
        for name in (f"{other}_prefix", f"{other}_max_length"):
            require(getattr(self, name) in ("", None), name, f"applies to {other_input} only")

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
    # numpy (through data.retrieval_sets): EncodeConfig is parsed by --help
    from retromae.data.retrieval_sets import load_corpus, load_queries

    if config.queries is not None:
        queries = load_queries(config.queries)
        return list(queries), list(queries.values())
    corpus = load_corpus(config.corpus)
    return list(corpus), [passage.joined() for passage in corpus.values()]
