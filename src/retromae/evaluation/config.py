"""The options of `retromae evaluate` and `retromae report` (and of `retromae.evaluate(...)`, `retromae.report(...)`),
declared apart from running them.

Owns: `EvaluateConfig`, which data it names (one retrieval set or STS file, several sets, or a folder of sets:
`data_sets`) and where its results go (one JSON file, or a report folder); `ReportConfig`. Does not own evaluating
(`evaluation.run`), the table (`evaluation.table`) nor the report (`evaluation.experiments`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from retromae.data.corpus import CORPUS_NAMES
from retromae.data.retrieval_sets import check_split
from retromae.evaluation.metric_registry import RANKING, metrics
from retromae.evaluation.names import check_names, model_names
from retromae.evaluation.table import DEFAULT_METRICS, metric_k, ranking_key
from retromae.models.encoder_config import EncoderOptions, encoder_acts, prefix_option
from retromae.retrieval.faiss_options import (
    NOT_BINARY,
    SHORTLIST,
    SHORTLIST_RANGE,
    WITH_BINARY,
    check_factory,
    check_search_params,
)
from retromae.retrieval.fusion import DEFAULT_METHOD, DEFAULT_WEIGHT, METHODS
from retromae.runtime.errors import DataError
from retromae.runtime.input_files import read_once
from retromae.runtime.io import check_folder_option
from retromae.runtime.lines import quoted
from retromae.runtime.options import (
    POSITIVE,
    PROBABILITY,
    TOP_K,
    Acts,
    ConfigError,
    acts_with,
    check_listed_name,
    option,
    require,
)
from retromae.runtime.run_folder import OutputOptions

if TYPE_CHECKING:
    import torch

    from retromae.models.encoder import Encoder, Towers

TASKS = ("auto", "retrieval", "sts")
QRELS_FORMATS = ("auto", "beir", "trec")  # as `data.retrieval_sets.load_qrels` reads them (no numpy import here)
CORPUS_FILES = CORPUS_NAMES  # a data set's folder holds one of them (`data.corpus.corpus_files`, the one rule)
RANKING_NAMES = ", ".join(metric.name for metric in metrics(RANKING))  # ndcg, mrr, recall, map, p
RANKING_TITLES = ", ".join(f"{metric.long_title}@k" for metric in metrics(RANKING))  # NDCG@k, MRR@k, Recall@k, ...


SIDE_OPTIONS = ("query_prefix", "passage_prefix", "query_max_length", "passage_max_length")  # a query's, a passage's
WITH_MODEL = Acts(lambda config: bool(config.model), "with --model (a run file is scored as it is)",
                  {"model": ["x"]}, ({"model": None, "run": "x"},))


@dataclasses.dataclass(kw_only=True)
class EvaluateConfig(OutputOptions, EncoderOptions):
    """Options of `retromae evaluate`: a model or a run, one or more data sets, the metrics and where they go."""
    # The format each input option is read in (`retromae.data.inputs`).
    INPUT_FORMATS = {"data": ("retrieval sets", "split"), "run": "run"}

    ACTS = {"hybrid_weight": acts_with("hybrid") & acts_with("fusion", "convex", off="rrf"),
            "fusion": acts_with("hybrid"),
            **encoder_acts(WITH_MODEL, "query_prefix", "passage_prefix", "query_max_length", "passage_max_length",
                           "factory"),
            "params": WITH_MODEL & NOT_BINARY, "shortlist": WITH_MODEL & WITH_BINARY, "top_k": WITH_MODEL}

    model: list[str] | None = option(None, "model(s) to evaluate (our export, sentence-transformers folder, HF "
                                           "encoder); several: one table, a column group each",
                                     required_unless="--run", reads="model")
    name: list[str] = option([], "a name per --model, in the same order, shown in the header, the table, the picture "
                                 "and the saved runs; default: the last part of its path (the part before it when "
                                 "that is model, encoder or sentence-transformer), a hub name's last part")
    run: Path | None = option(None, "TREC run file to evaluate instead of a model (one retrieval set only)",
                              required_unless="--model", reads="path")
    data: list[Path] = option(help="one or more BEIR / MS MARCO folders, or a folder holding such folders (a row "
                                   "each in one table, and their average); or STS pairs (an STS Benchmark file, or "
                                   "its folder holding sts-{split}.csv)", reads="path")
    split: str = option("test", "split: qrels/{split}.tsv, qrels.{split}.tsv or sts-{split}.csv",
                        check=check_split)
    qrels_format: str = option("auto", "the qrels files' layout: auto (a header naming query-id, corpus-id, score; "
                                       "else 3 fields = BEIR, 'qid 0 docid rel' = TREC), or declare beir or trec "
                                       "for a file without a header", choices=QRELS_FORMATS)
    task: str = option("auto", "retrieval or sts; auto: sts for a file or a folder holding sts-{split}.csv",
                       choices=TASKS)
    metrics: list[str] = option(list(DEFAULT_METRICS), f"the table's columns, NAME@K with NAME one of {RANKING_NAMES}")
    bm25: bool = option(False, "BM25 (bm25s: k1 1.2, b 0.75, English stopwords) beside the model in the table")
    hybrid: bool = option(False, "the hybrid beside the model and BM25 in the table: BM25's and the model's top-k "
                                 "fused per query (--fusion, --hybrid-weight)")
    hybrid_weight: float = option(DEFAULT_WEIGHT, "the model's share w of the convex fusion w*model + (1-w)*BM25 "
                                                  "(scores min-max normalised per query)", PROBABILITY)
    fusion: str = option(DEFAULT_METHOD, "how --hybrid fuses: convex (weighted normalised scores) or rrf "
                                         "(reciprocal rank fusion, k=60)", choices=METHODS)
    compare: list[str] = option([], "two systems of the table to compare query by query (names as in its header); "
                                    "default: the two when the table has two, the hybrid and its model with one "
                                    "model and --hybrid")
    k_values: list[int] = option([10, 100], f"one data set without a report folder: the cut-offs k of its "
                                            f"{RANKING_TITLES}", TOP_K)
    top_k: int | None = option(None, "documents retrieved per query; default: the largest k needed", TOP_K)
    per_query: bool = option(False, "also report every query's scores (in the --output JSON file; a table "
                                          "writes them to its --output folder's per-query.json)")
    keep_identical_ids: bool = option(False, "score a query's own document (a document under the query's id it is "
                                             "not judged relevant to: ArguAna, Quora, CQADupStack hold their queries "
                                             "so) as a hit that is not relevant, where BEIR's EvaluateRetrieval "
                                             "leaves it out of the query's ranking")
    output: Path | None = option(None, "a .json file for one data set's results; or a folder for the table of "
                                       "several: results.md, .csv, .json, .png, per-query.json, runs/ (every "
                                       "system's run), and embeddings/ caching each data set's corpus vectors (the "
                                       "same command started again resumes)")
    cache_dir: Path | None = option(None, "a table's corpus vectors cache, a folder per model (and its encoding "
                                          "options) and data set, which evaluations may share; default: "
                                          "OUTPUT/embeddings with an --output folder, else none",
                                    check=check_folder_option)
    save_run: Path | None = option(None, "also write the model's run as a TREC run file (one data set alone; a "
                                         "table writes every system's run into its --output folder: runs/SET/"
                                         "SYSTEM.trec)")
    query_prefix: str | None = prefix_option("query", "text put before every query, e.g. 'query: '")
    passage_prefix: str | None = prefix_option("passage", "text put before every passage, e.g. 'passage: '")
    query_max_length: int | None = option(None, "max tokens per query; default: the model's own", POSITIVE)
    passage_max_length: int | None = option(None, "max tokens per passage; default: the model's own", POSITIVE)
    factory: str = option("Flat", "faiss index factory string for the dense search, or int8 or binary (compressed "
                                  "vectors: `retromae index --help`)", check=check_factory)
    params: str = option("", "faiss search parameters, e.g. efSearch=128", check=check_search_params)
    shortlist: int | None = option(None, f"--factory binary: rows rescored per query with the float vectors, as a "
                                         f"multiple of k; default {SHORTLIST}", SHORTLIST_RANGE)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.data = [Path(path) for path in ([self.data] if isinstance(self.data, (str, Path)) else self.data)]
        require(len(self.data) > 0, "data", "give at least one data set")
        require(len(self.metrics) > 0, "metrics", "give at least one metric")
        given, self.metrics = list(self.metrics), [ranking_key(metric) for metric in self.metrics]
        twice = next((key for key in self.metrics if self.metrics.count(key) > 1), None)
        spellings = ", ".join(text for text, key in zip(given, self.metrics, strict=True) if key == twice)
        require(twice is None, "metrics", f"names {twice} twice ({spellings}): give it once")
        if isinstance(self.model, str):
            self.model = [self.model]
        if isinstance(self.name, str):
            self.name = [self.name]
        if (not self.model) == (self.run is None):
            raise ConfigError("--model: give either --model or --run")
        require(self.run is None or not self.bm25, "bm25", "compares BM25 with a model, not with a run")
        require(self.run is None or not self.hybrid, "hybrid", "fuses BM25 with a model, not with a run")
        resolved = [str(Path(name).resolve()) if Path(name).exists() else name for name in self.models]
        require(len(set(resolved)) == len(resolved), "model", "names a model twice")
        if self.name:
            check_names(self.name, self.models)
        require(len(self.compare) in (0, 2), "compare", "names two systems of the table")

    @property
    def models(self) -> list[str]:
        """The models evaluated (none with --run)."""
        return list(self.model or [])

    def model_names(self) -> list[str]:
        """The name each model is shown by (`evaluation.names`: --name, else made from its folder)."""
        return model_names(self.name, self.models)

    def source(self) -> str:
        """What is evaluated, as the header names it: the models' names, or the run file."""
        return ", ".join(self.model_names()) or str(self.run)

    def load_model(self, name: str, device: str | torch.device | None = None) -> Towers:
        """The encoder of each side of one of the models (`EncoderOptions.load_towers`: an untied fine-tune's
        towers), with the encoding options shared by all."""
        one = copy.copy(self)
        one.model = name
        return EncoderOptions.load_towers(one, device)

    def load_encoder(self, device: str | torch.device | None = None) -> Encoder:
        """The encoder of the (first) model, one for texts of both sides (STS pairs)."""
        one = copy.copy(self)
        one.model = self.models[0]
        return EncoderOptions.load_encoder(one, device)

    def check_sts_options(self) -> None:
        """ConfigError naming --keep-identical-ids (STS pairs are not ranked) or the first option of a query or
        passage side (its prefix or max length) given for STS pairs, which are neither: each sentence is encoded as it
        is, as sentence-transformers' EmbeddingSimilarityEvaluator encodes it (`encode`, no prompt, at the model's own
        length)."""
        require(not self.keep_identical_ids, "keep_identical_ids",
                "acts on retrieval sets, whose rankings may hold a query's own document; STS pairs are not ranked")
        for name in SIDE_OPTIONS:
            require(getattr(self, name) is None, name,
                    "does not act on STS pairs: their sentences are neither queries nor passages, and each is encoded "
                    "as it is, at the model's own length and with no prompt (as sentence-transformers' "
                    "EmbeddingSimilarityEvaluator encodes them); drop it")

    @property
    def report_folder(self) -> Path | None:
        """The folder the table goes to: --output unless it names a .json file."""
        return None if self.output is None or self.output.suffix == ".json" else self.output

    def is_table(self, sets: dict[str, Path]) -> bool:
        """Whether the results are a table: several data sets, BM25 beside the model, or a report folder. One data
        set alone reports every metric at --k-values instead (ConfigError if --metrics asks for others)."""
        table = (len(sets) > 1 or self.bm25 or self.hybrid or len(self.models) > 1 or self.report_folder is not None
                 or bool(self.compare))
        require(table or list(self.metrics) == list(DEFAULT_METRICS), "metrics",
                "chooses a table's columns (several data sets, --bm25 or an --output folder); one data set alone "
                "reports every metric at --k-values")
        return table

    def table_ks(self) -> list[int]:
        """The cut-offs the table's metrics need."""
        return sorted({metric_k(metric) for metric in self.metrics})

    def check_top_k(self, ks: list[int], named: str) -> None:
        """ConfigError when --top-k retrieves fewer documents than the largest cut-off asks (`cut_offs_beyond`)."""
        if self.top_k is not None and cut_offs_beyond(self.top_k, ks):
            raise ConfigError(f"--top-k {self.top_k} retrieves fewer documents than {named} asks for "
                              f"(@{max(ks)}); raise --top-k to {max(ks)} or lower {named}")

    def data_sets(self) -> dict[str, Path]:
        """Name → folder of every retrieval set --data names (a folder of sets gives each of its sets, sorted); a
        name is the folder's, with its parent's prepended where two would clash. STS pairs: the one path given."""
        reached = [(str(given), path) for given in self.data for path in _sets_in(given, self.split)]
        read_once(reached, "data set", "--data")
        names = [path.name for _, path in reached]
        named = {(f"{path.parent.name}/{path.name}" if names.count(path.name) > 1 else path.name): path
                 for _, path in reached}
        if len(named) != len(reached):
            raise ConfigError("--data: gives two data sets one name (the folder's and its parent's); rename one")
        return named

    def table_reason(self, sets: dict[str, Path]) -> str:
        """What makes the results a table, in the user's options, e.g. "3 data sets" or "--hybrid"."""
        reasons = [f"{len(sets)} data sets" if len(sets) > 1 else "", f"{len(self.models)} models"
                   if len(self.models) > 1 else "", "--bm25" if self.bm25 else "", "--hybrid" if self.hybrid else "",
                   "--compare" if self.compare else ""]
        return ", ".join(reason for reason in reasons if reason) or "an --output folder"

    def check_table(self, sets: dict[str, Path]) -> None:
        """ConfigError for options that need one data set evaluated alone when a table is asked for."""
        reason = self.table_reason(sets)
        require(self.run is None, "run", f"applies to one data set evaluated alone, not to a table ({reason})")
        for name, kept in (("save_run", "each system's run as runs/SET/SYSTEM.trec"),
                           ("per_query", "every query's scores as per-query.json")):
            require(getattr(self, name) in (None, False), name,
                    f"applies to one data set evaluated alone; a table ({reason}) keeps {kept} in its --output "
                    "folder: give --output DIR")
        if self.output is not None and self.report_folder is None:
            raise ConfigError(f"--output {self.output}: a table ({reason}) goes into a folder (results.md, .csv, "
                              ".json, .png), not a .json file")


def cut_offs_beyond(depth: int, ks: list[int], documents: int | None = None) -> list[int]:
    """The one rule of a cut-off deeper than what was retrieved, for the model's --top-k and a given --run alike: the
    cut-offs of `ks` beyond `depth` documents a query, since a metric@k of fewer than k documents is not measured at k;
    none when those are all the corpus's `documents` (a run ranking a whole small corpus measured every cut-off)."""
    return [] if documents is not None and depth >= documents else [k for k in ks if k > depth]


def check_not_retrieval_file(path: Path, split: str) -> None:
    """DataError when a file given as STS pairs is a retrieval set's file (a BEIR corpus or queries, JSON lines, an
    MS MARCO collection): the set is given as its folder."""
    name = path.name.lower()
    retrieval_names = (*CORPUS_FILES, "queries.jsonl", "queries.tsv", f"queries.{split}.tsv")
    json_lines = name.endswith((".jsonl", ".json", ".jsonl.gz", ".parquet"))
    if name in retrieval_names or json_lines or _starts_with_brace(path):
        raise DataError(f"--data {path}: a file of documents or queries, not STS pairs; a retrieval set is given as "
                        f"its folder (BEIR: corpus.jsonl, queries.jsonl, qrels/{split}.tsv; MS MARCO: collection.tsv, "
                        f"queries, qrels), e.g. --data {path.parent}")


def _starts_with_brace(path: Path) -> bool:
    """Whether a file's first character is "{" (JSON), read without failing on an unreadable file."""
    try:
        with path.open("rb") as file:
            return file.read(1) == b"{"
    except OSError:
        return False


def is_retrieval_folder(path: Path) -> bool:
    """Whether `path` holds a retrieval corpus (BEIR corpus.jsonl or MS MARCO collection.tsv, optionally .gz)."""
    return any((path / name).is_file() or (path / f"{name}.gz").is_file() for name in CORPUS_FILES)


def _sets_in(path: Path, split: str) -> list[Path]:
    """`path` itself when it is a data set (or an STS file), else the data sets directly inside it."""
    if not path.is_dir() or is_retrieval_folder(path) or (path / f"sts-{split}.csv").is_file():
        return [path]
    inside = sorted(child for child in path.iterdir() if child.is_dir() and is_retrieval_folder(child))
    for child in inside:
        check_listed_name(child)
    if not inside:
        raise DataError(f"--data {path}: neither a data set (no {', '.join(CORPUS_FILES)}) nor a folder of data sets")
    return inside




@dataclasses.dataclass(kw_only=True)
class ReportConfig(OutputOptions):
    variants: list[Path] = option(help="variant folders (or `retromae adapt` output folders), one table row each, "
                                       "in this order", reads="path")
    output: Path = option(help="folder for report.md, report.json and the plots")
    title: str = option("Results", "heading of report.md")

    def __post_init__(self) -> None:
        require(len(self.variants) > 0, "variants", "give at least one variant folder")
        folders = [os.path.realpath(folder) for folder in self.variants]
        for given, folder in zip(self.variants, folders, strict=True):
            if folders.count(folder) > 1:
                raise ConfigError(f"--variants: names the folder {quoted(str(given))} twice (a row each time); give "
                                  "it once")
