"""The options of the retrieval commands (`encode`, `index`, `search`, `bm25`, `mine`), declared apart from the work
so that parsing them imports no torch (nor numpy), beside the library code that runs them (`retromae.retrieval.run`).

Owns `EncodeConfig` (with the spellings kept until the next release), `BM25Params` (the BM25 scoring group that
`index`, `bm25`, `evaluate` and fine-tuning share), `IndexConfig`, `SearchConfig`, `BM25Config` and `MineConfig`.
Does not own encoding, indexes, search or mining (the other modules of `retromae.retrieval`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from retromae.data.fields import id_problem
from retromae.data.retrieval_sets import check_split
from retromae.models.encoder_config import EncoderOptions, encoder_acts, prefix_option
from retromae.retrieval.faiss_options import (
    APPROXIMATE,
    NOT_BINARY,
    SHORTLIST,
    SHORTLIST_RANGE,
    TUNED,
    WHEN_TRAINED,
    WITH_BINARY,
    check_factory,
    check_search_params,
    param_names,
    search_knob,
)
from retromae.retrieval.fusion import METHODS
from retromae.retrieval.mining_options import MiningOptions
from retromae.runtime.errors import RetroMAEError
from retromae.runtime.lines import read_json_file
from retromae.runtime.options import (
    POSITIVE,
    PROBABILITY,
    SEED,
    TOP_K,
    Acts,
    ConfigError,
    Domain,
    Options,
    acts_with,
    acts_with_folder,
    between,
    option,
    require,
)
from retromae.runtime.run_folder import OutputOptions

KINDS = ("auto", "corpus", "queries")
VARIANTS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
STEMMERS = ("none", "english")
# The stopword lists bm25s knows (`bm25s.tokenization._infer_stopwords`), by code and by name, and none.
STOPWORD_LANGUAGES = {"en": "english", "en_plus": "english_plus", "de": "german", "nl": "dutch", "fr": "french",
                      "es": "spanish", "pt": "portuguese", "it": "italian", "ru": "russian", "sv": "swedish",
                      "no": "norwegian", "zh": "chinese", "tr": "turkish", "ko": "korean", "da": "danish"}
STOPWORDS = (*STOPWORD_LANGUAGES, *STOPWORD_LANGUAGES.values(), "none")
METRICS = ("ip", "l2")  # the similarities an index offers


WITH_CORPUS = Acts(lambda config: config.corpus is not None, "with --corpus", {"corpus": "x"},
                   ({"corpus": None, "queries": "x"},))
WITH_QUERIES = Acts(lambda config: config.queries is not None, "with --queries", {"queries": "x"},
                    ({"queries": None, "corpus": "x"},))


@dataclasses.dataclass(kw_only=True)
class EncodeConfig(OutputOptions, EncoderOptions):
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"corpus": "corpus", "queries": "queries"}
    ACTS = {"passage_prefix": WITH_CORPUS, "passage_max_length": WITH_CORPUS, "query_prefix": WITH_QUERIES,
            "query_max_length": WITH_QUERIES}
    corpus: Path | None = option(None, "corpus to encode: a .jsonl or .tsv file (BEIR corpus.jsonl, MS MARCO "
                                       "collection.tsv, optionally .gz) or a folder holding one (a document is its "
                                       "title and text joined)",
                                 required_unless="--queries", reads="path")
    queries: Path | None = option(None, "queries to encode: queries.jsonl or queries.tsv (optionally .gz), or a "
                                        "folder holding one",
                                  required_unless="--corpus", reads="path")
    output: Path = option(help="output folder: embeddings.npy, ids.txt, encode.json; a killed run started again "
                               "with the same model and input continues")
    passage_prefix: str | None = prefix_option("passage", "text put before every passage of --corpus, e.g. 'passage: '")
    query_prefix: str | None = prefix_option("query", "text put before every query of --queries, e.g. 'query: '")
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own (256 for MiniLM)",
                                            POSITIVE)
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    shard_size: int = option(10_000, "texts per shard; a killed run resumes at the first unfinished shard", POSITIVE)
    progress: bool = option(True, "show progress bars")
    input: Path | None = option(None, deprecated="--input is replaced by --corpus FILE or --queries FILE; it "
                                                 "works until the next release", reads="path")
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
    def text_options(self) -> tuple[str, str | None, int | None]:
        """(side, "query" or "passage"; its prefix, None where not given; its max length) of the texts this run
        encodes."""
        if self.queries is not None:
            return "query", self.query_prefix, self.query_max_length
        return "passage", self.passage_prefix, self.passage_max_length


@dataclasses.dataclass
class BM25Params(Options):
    """BM25 scoring (k1, b, variant) and tokenisation (stopwords, stemmer) settings."""

    OPTION_GROUP = "BM25 scoring"
    # bm25s scores in float32: a k1 far above any in use (0.5-3) shrinks every score to 0, i.e. no result at all.
    k1: float = option(1.2, "BM25 term-frequency saturation", between(0, 1000))
    b: float = option(0.75, "BM25 length normalisation", PROBABILITY)
    variant: str = option("lucene", "BM25 variant (bm25s)", choices=VARIANTS, aliases=("--method",))
    stopwords: str = option("en", "stopword list of bm25s: a language (en, en_plus, de, nl, fr, es, pt, it, ru, sv, "
                                  "no, zh, tr, ko, da, or its English name), or none", choices=STOPWORDS)
    stemmer: str = option("none", "stemmer: none, or english (Snowball, needs PyStemmer)", choices=STEMMERS)


@dataclasses.dataclass(kw_only=True)
class IndexConfig(OutputOptions, BM25Params):
    INPUT_FORMATS = {"corpus": "corpus"}  # the format each input option is read in (`retromae.data.inputs`)
    ACTS = {name: acts_with("hybrid") for name in (*(f.name for f in dataclasses.fields(BM25Params)), "corpus")}
    embeddings: Path = option(help="embeddings folder written by `retromae encode`", reads="path")
    output: Path = option(help="index folder to write (index.faiss or index.npy, ids.txt, index.json; "
                               "vectors.npy with --factory binary; bm25/ with --hybrid)")
    factory: str = option("Flat", "faiss index factory string, e.g. Flat, HNSW32, IVF1024,PQ32 "
                                  "(without faiss only Flat: exact numpy search); or int8 (faiss's SQ8: a byte per "
                                  "dimension, 4x less memory) or binary (a sign bit per dimension, 32x less, "
                                  "searched by Hamming distance, its shortlist rescored with the float vectors)",
                          check=check_factory)
    metric: str = option("ip", "similarity: ip (inner product; cosine on normalised vectors) or l2",
                         choices=METRICS)
    params: str = option("", "faiss search parameters stored with the index, e.g. efSearch=128 or nprobe=32",
                         check=check_search_params, acts=NOT_BINARY)
    shortlist: int | None = option(None, f"--factory binary: rows rescored per query with the float vectors, as a "
                                         f"multiple of k (the Hamming search's best SHORTLIST x k); stored with the "
                                         f"index; default {SHORTLIST}", SHORTLIST_RANGE, acts=WITH_BINARY)
    seed: int = option(0, "seed of the training sample for indexes that are trained (IVF, PQ, SQ, int8, PCA, ...)",
                       SEED, acts=WHEN_TRAINED)
    recall_queries: Path | None = option(None, "embeddings folder of queries (`retromae encode --queries`, the "
                                               "index's model) on which the index's recall@10 against exact search "
                                               "is measured (at most 1,000 of them), printed and stored",
                                         reads="path", acts=APPROXIMATE)
    target_recall: float | None = option(None, "recall@10 the index must reach on --recall-queries: its search knob "
                                               "(HNSW efSearch, IVF nprobe, binary shortlist) is set to the lowest "
                                               "value reaching it on half of them, measured on the other half and "
                                               "stored with the index; refused when out of the index's reach",
                                         Domain(0, 1, low_open=True),
                                         acts=TUNED & acts_with("recall_queries", on="queries", off=None))
    hybrid: bool = option(False, "also build a BM25 index (bm25s) of the same documents, so that `retromae search` "
                                 "fuses BM25 with the model")
    corpus: Path | None = option(None, "corpus file whose texts --hybrid indexes; default: the one the embeddings "
                                       "folder records (encode.json)", reads="path")

    def __post_init__(self) -> None:
        super().__post_init__()
        knob = search_knob(self.factory)
        if self.target_recall is not None and knob is not None:
            given = self.shortlist is not None if knob == "shortlist" else knob in param_names(self.params)
            flag = "--shortlist" if knob == "shortlist" else f"--params {knob}=..."
            require(not given, "target_recall", f"sets {knob} itself; give {flag} or --target-recall, not both")


SHOWN_K, RUN_K = 10, 100


def non_blank(text: str) -> None:
    """ValueError for a query of no text (spaces only): it would match every document alike."""
    if not text.strip():
        raise ValueError("must not be empty")


def check_run_tag(tag: str) -> None:
    """ValueError for a tag a TREC run cannot hold in its last column (the id rule, `data.fields.id_problem`: not
    empty, no whitespace), said before the search rather than when its run is written."""
    problem = id_problem(tag)
    if problem is not None:
        raise ValueError(f"{tag!r} cannot be written in a TREC run: it {problem}")


# `search`'s options that act only where it encodes queries itself: with --queries an embeddings folder the vectors
# are made already (their model, pooling and length recorded in its encode.json).
ENCODES_QUERIES = Acts(lambda config: config.query is not None or (config.queries is not None
                                                                   and not Path(config.queries).is_dir()),
                       "where queries are encoded (--query, or --queries a queries file, not an embeddings folder)",
                       {"query": ["x"]}, ({"query": None, "queries": ".", "output": "run.trec"},))


@dataclasses.dataclass(kw_only=True)
class SearchConfig(OutputOptions, EncoderOptions):
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"corpus": "corpus", "queries": "queries"}
    ACTS = {**encoder_acts(ENCODES_QUERIES, "model", "query_prefix", "query_max_length"),
            "corpus": Acts(lambda config: config.query is not None, "with --query (the texts it shows)",
                           {"query": ["x"]}, ({"query": None, "queries": "x", "output": "run.trec"},)),
            "tag": acts_with("output", on="run.trec", off=None),
            "hybrid_weight": Acts(lambda config: config.fusion != "rrf", "with --fusion convex (rrf fuses ranks, "
                                  "without weights)", {"fusion": "convex"}, ({"fusion": "rrf"},))}
    model: str | None = option(None, "model that encodes the queries; default: the one recorded in index.json",
                               reads="model")
    index: Path = option(help="index folder written by `retromae index` (with --hybrid: searched with BM25 too)",
                         reads="path")
    query: list[str] | None = option(None, "text to search for (one or more, each quoted): rank, score, id and the "
                                           "start of each document are printed", required_unless="--queries",
                                     check=non_blank)
    queries: Path | None = option(None, "queries: a queries file (queries.jsonl, queries.tsv) to encode here, or an "
                                        "embeddings folder of query vectors from `retromae encode`",
                                  required_unless="--query", reads="path")
    output: Path | None = option(None, "TREC run file to write (required with --queries; optional with --query)")
    corpus: Path | None = option(None, "corpus file whose texts --query shows; default: the one index.json records",
                                 reads="path")
    top_k: int | None = option(None, f"documents per query; default {SHOWN_K} with --query, {RUN_K} with --queries",
                               TOP_K, aliases=("--k",))
    hybrid: bool = option(False, "require the index's BM25 side (refused on an index built without --hybrid); an "
                                 "index with both sides is fused without it")
    dense_only: bool = option(False, "search with the model alone, even on an index with a BM25 side")
    fusion: str | None = option(None, "how the two sides of a hybrid index are fused: convex (min-max normalised "
                                      "scores, weighted) or rrf (reciprocal ranks); default convex", choices=METHODS)
    hybrid_weight: float | None = option(None, "the model's share under convex fusion, in [0, 1] (BM25 gets the "
                                               "rest); default 0.7", PROBABILITY)
    params: str | None = option(None, "faiss search parameters, e.g. efSearch=256; default: those saved in the index",
                                check=check_search_params)
    shortlist: int | None = option(None, "an index of --factory binary: rows rescored per query, as a multiple of k; "
                                         "default: the one saved in the index (refused on another index)",
                                   SHORTLIST_RANGE)
    query_prefix: str | None = prefix_option("query", "text put before every query when encoding, e.g. 'query: '")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    tag: str = option("retromae", "run tag written in the last column (no whitespace)", check=check_run_tag)

    def __post_init__(self) -> None:
        super().__post_init__()
        require((self.query is None) != (self.queries is None), "query", "give either --query TEXT or --queries")
        require(self.queries is None or self.output is not None, "output", "is required with --queries")

    def recorded_encoder(self) -> dict[str, Any]:
        """index.json's record of the encoder of the documents, where this search encodes queries (`ENCODES_QUERIES`):
        its model and backend encode them where --model and --backend are not given (`searcher.load_query_encoder`).
        {} where no queries are encoded here, or index.json holds no such record or cannot be read (the index's
        reader says why)."""
        if self.index is None or not ENCODES_QUERIES.holds(self):
            return {}
        try:
            encoder = read_json_file(Path(self.index) / "index.json").get("encoder")
        except (RetroMAEError, OSError):
            return {}
        return encoder if isinstance(encoder, dict) else {}


@dataclasses.dataclass(kw_only=True)
class BM25Config(OutputOptions, BM25Params):
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": ("retrieval set", "split"), "corpus": "corpus", "queries": "queries"}
    ACTS = {"split": Acts(lambda config: config.data is not None, "with --data", {"data": "x"},
                          ({"data": None, "corpus": "x", "queries": "x"},))}
    data: Path | None = option(None, "BEIR or MS MARCO folder; its --split queries are searched",
                               required_unless="--corpus and --queries", reads="path")
    split: str = option("test", "split whose judged queries are searched (with --data)", check=check_split)
    corpus: Path | None = option(None, "corpus (with --queries): a .jsonl or .tsv file or a folder holding one",
                                 required_unless="--data", reads="path")
    queries: Path | None = option(None, "queries (with --corpus): queries.jsonl or queries.tsv, or a folder "
                                        "holding one",
                                  required_unless="--data", reads="path")
    output: Path = option(help="TREC run file to write")
    top_k: int = option(100, "documents retrieved per query", TOP_K, aliases=("--k",))
    tag: str = option("bm25", "run tag written in the last column (no whitespace)", check=check_run_tag)

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.data is None) == (self.corpus is None or self.queries is None):
            raise ConfigError("--data: give either --data (with --split) or both --corpus and --queries")


@dataclasses.dataclass(kw_only=True)
class MineConfig(OutputOptions, MiningOptions, EncoderOptions):
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": ("training data", "split")}
    ACTS = {**encoder_acts(acts_with("negatives", "model", off="bm25"), "model", "query_max_length",
                           "passage_max_length", "query_prefix", "passage_prefix"),
            "split": acts_with_folder("data")}
    model: str | None = option(None, "dense model that ranks the passages", required_unless="--negatives bm25",
                               reads="model")
    data: Path = option(help="BEIR / MS MARCO folder (positives from --split qrels) or a training file", reads="path")
    split: str = option("train", "qrels split of a --data folder", check=check_split)
    negatives: str = option("model", "what ranks the passages negatives are drawn from: model (dense, exact "
                                     "search) or bm25", choices=("model", "bm25"), aliases=("--method",))
    output: Path = option(help="training file to write (JSON lines: query_id, query, pos, neg, pos_ids, neg_ids)")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own", POSITIVE)
    query_prefix: str | None = prefix_option("query", "text put before every query the model ranks for, e.g. 'query: '")
    passage_prefix: str | None = prefix_option("passage", "text put before every passage the model ranks, e.g. "
                                                          "'passage: '")
    seed: int = option(0, "seed of the sampling inside the rank window", SEED)

    def __post_init__(self) -> None:
        EncoderOptions.__post_init__(self)
        MiningOptions.__post_init__(self)
        if self.negatives == "model" and not self.model:
            raise ConfigError("--model: --negatives model needs a model")
