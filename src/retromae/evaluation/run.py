"""Evaluating a model (or a TREC run) as `retromae evaluate` and `retromae.evaluate(...)` do.

Owns: `evaluate(config)`: one data set (every metric at --k-values, or STS correlations; optionally into a JSON
file), or the table of many (`evaluation.table`: a row per data set, the average, BM25 beside the model) with its
report folder, which keeps every system's run on every data set (`runs/SET/SYSTEM.trec`) and where each data set's
corpus vectors are cached per model, by the model's content (`retrieval.encode.encode_cached`, `cache_key`), so
that the same evaluation started again after a kill resumes, and its figures equal the single-set runs'. Does not
own the options (`evaluation.config`), the metrics, the search or the file formats.

Scoring a run file (`--run`) needs no model: the model side (torch, transformers, faiss, scipy) is imported only by
the functions that encode or correlate, so that `retromae evaluate --run` starts in a second and its errors come
at once.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retromae.data.ranking import cut_run
from retromae.data.retrieval_sets import (
    RetrievalSet,
    check_run_documents,
    load_retrieval_set,
    load_sts_pairs,
    read_trec_run,
    write_trec_run,
)
from retromae.evaluation.config import EvaluateConfig, check_not_retrieval_file, cut_offs_beyond
from retromae.evaluation.metrics import empty_queries, evaluate_run, found_themselves, retrieval_depth, scored_run
from retromae.evaluation.names import file_name, model_path
from retromae.evaluation.report import save_results
from retromae.evaluation.systems import BM25, Systems
from retromae.evaluation.table import REPORT_FILES, RUNS_DIR, SetRow, Table, write_report
from retromae.models.encoder_config import beyond_torch
from retromae.retrieval.bm25 import bm25_search
from retromae.retrieval.fusion import RRF_K, candidate_depth, fuse
from retromae.runtime.console import Stages, given, notice
from retromae.runtime.options import require
from retromae.runtime.run_folder import (
    RUN_NEUTRAL,
    claim_file,
    claim_folder,
    input_fingerprint,
    input_paths,
    run_identity,
)

if TYPE_CHECKING:
    from retromae.models.encoder import Encoder, Towers
    from retromae.retrieval.search import Run

EMBEDDINGS_DIR = "embeddings"


def evaluate(config: EvaluateConfig | None = None, /, **options: Any) -> dict[str, Any]:
    """Evaluate as `config` (or `EvaluateConfig(**options)`) says. One data set: its metrics (or STS correlations),
    plus "per_query" when asked; a table: `Table.as_dict()` plus its Markdown (and the paired comparison's lines)
    under "table"."""
    config = config if config is not None else EvaluateConfig(**options)
    sets = config.data_sets()
    if not config.is_table(sets):
        require(config.cache_dir is None, "cache_dir", "acts only with a table (several data sets or models, --bm25, "
                "--hybrid, --compare or an --output folder): one data set alone is encoded once, uncached")
        return evaluate_one(config, next(iter(sets.values())))
    table = evaluate_table(config, sets)
    return {**table.as_dict(), "table": table.text()}


def sts_file(config: EvaluateConfig, data: Path) -> Path | None:
    """The STS pairs file `data` points at, or None for a retrieval set."""
    candidate = data / f"sts-{config.split}.csv" if data.is_dir() else data
    if config.task == "sts" or (config.task == "auto" and candidate.is_file()):
        if config.task == "auto" and not data.is_dir():
            check_not_retrieval_file(candidate, config.split)
        return candidate
    return None


def evaluate_one(config: EvaluateConfig, data: Path) -> dict[str, Any]:
    """Every metric at --k-values on one retrieval set (or STS correlations), saved to --output when given."""
    if config.run is None:
        config.check_top_k(config.k_values, "--k-values")
    claim_file(config.output, config.overwrite, inputs=input_paths(config))
    claim_file(config.save_run, config.overwrite, "save_run", inputs=input_paths(config))
    path = sts_file(config, data)
    per_query = None
    if path is not None:
        results = evaluate_sts(config, path)
    else:
        results, per_query = evaluate_retrieval(config, data)
    extra = {"per_query": per_query} if per_query is not None else {}
    if config.output is not None:
        path = {"model_path": model_path(config.models[0])} if config.models else {}
        save_results({**results, "source": config.source(), **path, "data": str(data), "split": config.split,
                      **extra}, config.output)
    return {**results, **extra}


def evaluate_sts(config: EvaluateConfig, path: Path) -> dict[str, Any]:
    from retromae.evaluation.sts import check_gold, sts_correlations  # numpy: only for STS (`evaluate --run` light)

    require(bool(config.models), "model", "STS evaluation needs a model (a run has no similarities)")
    config.check_sts_options()
    first, second, gold = load_sts_pairs(path)
    check_gold(gold, str(path))  # before the model loads
    encoder = config.load_encoder()
    options = {"batch_size": config.batch_size}
    return sts_correlations(encoder.encode(first, **options), encoder.encode(second, **options), gold, str(path))


def evaluate_retrieval(config: EvaluateConfig, path: Path) -> tuple[dict[str, float], dict[str, Any] | None]:
    data = load_retrieval_set(path, config.split, config.qrels_format)
    themselves = FoundThemselves(config.keep_identical_ids)
    if config.run is not None:
        run = read_trec_run(config.run)
        check_run_documents(run, data.corpus, config.run, "the corpus of " + path.name)
        scored = themselves.scored(path.name, data.qrels, run)
    else:
        k = config.top_k or max(config.k_values)
        depth = retrieval_depth(k, data, config.keep_identical_ids)
        found = model_run(config, config.load_model(config.models[0]), data, depth)
        run = scored = cut_run(themselves.scored(path.name, data.qrels, found), k)
    empty = EmptyResults()
    empty.count(config.source(), path.name, data.qrels, scored)
    empty.warn()
    themselves.say()
    options = {"source": str(path), "keep_identical_ids": config.keep_identical_ids}
    if config.per_query:
        results = evaluate_run(data.qrels, run, config.k_values, per_query=True, **options)
    else:
        results = evaluate_run(data.qrels, run, config.k_values, **options), None
    if config.run is not None:  # once the metrics are checked: a refused evaluation says only why
        warn_shallow_run(config, run, len(data.corpus))
    if config.save_run is not None:  # after the metrics are checked: a refused evaluation writes nothing
        write_trec_run(run, config.save_run)
    return results


def warn_shallow_run(config: EvaluateConfig, run: Run, documents: int) -> None:
    """A warning when the --run read is shallower than cut-offs of --k-values ask (`cut_offs_beyond`, over a corpus of
    `documents`): its deepest query counts, since others may hold fewer because fewer matched. A warning, where
    --top-k's shortfall is refused: a run file may be shallow because its system found no more (BM25 ranks only the
    documents sharing a term with the query), which the file cannot tell from a cut."""
    deepest = max(len(ranking) for ranking in run.values())
    beyond = cut_offs_beyond(deepest, config.k_values, documents)
    if beyond:
        shown = ", ".join(f"@{k}" for k in beyond)
        notice(f"retromae: warning: --run {given(config.run)} holds at most {deepest} document"
               f"{'s' if deepest > 1 else ''} a query, fewer than --k-values asks for ({shown}): those metrics count "
               f"only the documents retrieved, as @{deepest} would; evaluate a run {max(beyond)} deep to measure them")


def model_run(config: EvaluateConfig, towers: Towers, data: RetrievalSet, k: int, cache: Path | None = None,
              name: str = "corpus", model: str | None = None) -> Run:
    """The model's (`model`, default the first) top-k run on `data`, each side encoded by its tower (`towers`); its
    corpus vectors kept in (or read from) `cache` when given."""
    # torch and faiss: only when a model is evaluated, so `evaluate --run` stays torch-free
    from retromae.models.encoder import side_prefix
    from retromae.retrieval.encode import encode_cached
    from retromae.retrieval.search import TextOptions, encode_texts, vector_search

    doc_ids, texts = list(data.corpus), [passage.joined() for passage in data.corpus.values()]
    encoder = towers.passage
    passages = TextOptions(side_prefix(encoder, "passage", config.passage_prefix), config.passage_max_length)
    questions = TextOptions(side_prefix(towers.query, "query", config.query_prefix), config.query_max_length)
    description = f"encoding {name} ({len(doc_ids):,} texts)"
    if cache is None:
        doc_vectors = encode_texts(encoder, texts, passages, config.batch_size, description=description)  # (N, D)
    else:
        doc_vectors = encode_cached(encoder, doc_ids, texts, cache, model_name=model or config.models[0],
                                    batch_size=config.batch_size, max_length=passages.max_length,
                                    prefix=passages.prefix, description=description)  # (N, D)
    query_ids = list(data.queries)
    query_vectors = encode_texts(towers.query, [data.queries[i] for i in query_ids], questions, config.batch_size,
                                 description=f"encoding queries ({len(query_ids):,} texts)")  # (Q, D)
    return vector_search(doc_ids, doc_vectors, query_ids, query_vectors, k, factory=config.factory,
                         params=config.params, shortlist=config.shortlist)


def evaluate_table(config: EvaluateConfig, sets: dict[str, Path]) -> Table:
    """A row per data set (each model, BM25 with --bm25 or --hybrid, each model's hybrid with --hybrid, at the
    table's metrics), the paired comparison of two systems, written to the report folder."""
    config.check_table(sets)
    config.check_top_k(config.table_ks(), "--metrics")
    require(not any(sts_file(config, path) for path in sets.values()), "data",
            "a table holds retrieval sets; evaluate STS pairs on their own")
    systems = Systems.of(config)
    systems.check_compare(config.compare)
    encoders = {name: config.load_model(path) for name, path in systems.models.items()}  # a refused model: no folder
    folder = config.report_folder
    if folder is not None:
        identity = run_identity(config, RUN_NEUTRAL | {"device"}) | prefixes_put(config, encoders)
        claim_folder(folder, "evaluate", identity, (*REPORT_FILES, EMBEDDINGS_DIR), resume=True,
                     overwrite=config.overwrite, resumable=False, inputs=input_paths(config))
    root = config.cache_dir or (folder / EMBEDDINGS_DIR if folder is not None else None)
    caches = {name: root / cache_key(config, path, encoders[name].passage) if root is not None else None
              for name, path in systems.models.items()}
    stages, empty, themselves = Stages(len(sets)), EmptyResults(), FoundThemselves(config.keep_identical_ids)
    rows = []
    for name, path in sets.items():
        row, runs = table_row(config, systems, encoders, name, path, caches, stages, empty, themselves)
        if folder is not None:
            write_runs(folder, name, runs)
        rows.append(row)
    empty.warn()
    themselves.say()
    table = Table(systems.names(), list(config.metrics), rows, labels=systems.labels())
    pair = systems.compared(config.compare)
    if pair is not None:
        table.compare(*pair)
    if folder is not None:
        write_report(table, folder, {**models_about(systems), "split": config.split,
                                     "data": {name: str(path) for name, path in sets.items()}, **hybrid_about(config)})
    return table


def prefixes_put(config: EvaluateConfig, encoders: dict[str, Towers]) -> dict[str, Any]:
    """The prefix options as a table's run identity records them: as put (`side_prefix`) where a side is not given
    and a model names a prompt for it (the text, or a list of each model's where they differ); else as given, so that
    the records of models without prompts are those they were."""
    from retromae.models.encoder import side_prefix  # torch: only when models are evaluated

    put: dict[str, Any] = {}
    for side in ("query", "passage"):
        sides = [getattr(towers, side) for towers in encoders.values()]
        if getattr(config, f"{side}_prefix") is None and any(side in encoder.prompts for encoder in sides):
            values = [side_prefix(encoder, side, None) for encoder in sides]
            put[f"{side}_prefix"] = values[0] if len(set(values)) == 1 else values
    return put


def models_about(systems: Systems) -> dict[str, Any]:
    """The models for results.json: "model", their names (one, or a list); "model_path", their full paths alike;
    "models", name → full path."""
    paths = {name: model_path(model) for name, model in systems.models.items()}
    one = len(paths) == 1
    return {"model": next(iter(paths)) if one else list(paths),
            "model_path": next(iter(paths.values())) if one else list(paths.values()), "models": paths}


def write_runs(folder: Path, data_set: str, runs: dict[str, Run]) -> None:
    """Each system's run on one data set as a TREC run file, OUTPUT/runs/SET/SYSTEM.trec (tagged with the system's
    name), the files BEIR's and Pyserini's tools read."""
    for system, run in runs.items():
        write_trec_run(run, folder / RUNS_DIR / file_name(data_set) / f"{file_name(system)}.trec",
                       tag=file_name(system))


class EmptyResults:
    """Queries that got no results, per system and data set, said in one warning on stderr: they count as 0."""

    def __init__(self) -> None:
        self.found: dict[str, int] = {}
        self.queries: dict[str, int] = {}

    def count(self, system: str, data_set: str, qrels: dict[str, dict[str, int]], run: Run) -> None:
        self.queries[f"{system} on {data_set}"] = len(qrels)
        empty = empty_queries(qrels, run)
        if empty:
            self.found[f"{system} on {data_set}"] = empty

    def warn(self) -> None:
        if not self.found:
            return
        where = "; ".join(f"{name}: {count:,} of {self.queries[name]:,}" for name, count in self.found.items())
        notice(f"retromae: warning: queries with no results ({where}) count as 0 in every metric (BEIR's "
               f"EvaluateRetrieval leaves them out, so its means are higher)")


class FoundThemselves:
    """Queries whose ranking held the query itself (`data.ranking.is_the_query`), per data set, said in one note on
    stderr: left out of the metrics, as BEIR's EvaluateRetrieval leaves them out, or kept (--keep-identical-ids)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.found: dict[str, set[str]] = {}
        self.queries: dict[str, int] = {}

    def scored(self, data_set: str, qrels: dict[str, dict[str, int]], run: Run) -> Run:
        """`run` as the metrics score it (`evaluation.metrics.scored_run`), its queries that found themselves
        counted."""
        self.queries[data_set] = len(qrels)
        self.found.setdefault(data_set, set()).update(found_themselves(run, qrels))
        return scored_run(run, qrels, self.keep)

    def say(self) -> None:
        counts = {name: len(found) for name, found in self.found.items() if found}
        if not counts:
            return
        where = "; ".join(f"{name}: {count:,} of {self.queries[name]:,}" for name, count in counts.items())
        how = ("scored as hits that are not relevant (--keep-identical-ids; BEIR's EvaluateRetrieval leaves them out, "
               "so its figures are higher)" if self.keep else "left out of their rankings before the metrics, as "
               "BEIR's EvaluateRetrieval leaves them (ignore_identical_ids); --keep-identical-ids scores them as hits "
               "that are not relevant")
        notice(f"retromae: note: queries retrieved themselves ({where}), documents under their own ids as ArguAna, "
               f"Quora and CQADupStack hold their queries: {how}")


def hybrid_about(config: EvaluateConfig) -> dict[str, Any]:
    """How the hybrid was fused, for results.json (nothing without --hybrid)."""
    if not config.hybrid:
        return {}
    return {"fusion": {"method": config.fusion, "weight": config.hybrid_weight if config.fusion == "convex" else None,
                       "rrf_k": RRF_K if config.fusion == "rrf" else None,
                       "depth": candidate_depth(config.top_k or max(config.table_ks()))}}


def table_row(config: EvaluateConfig, systems: Systems, encoders: dict[str, Towers], name: str, path: Path,
              caches: dict[str, Path | None], stages: Stages, empty: EmptyResults,
              themselves: FoundThemselves) -> tuple[SetRow, dict[str, Run]]:
    """One data set's row (each system's metrics at the table's cut-offs, and per query) and each system's run, each
    model's and BM25's without the query itself (`FoundThemselves.scored`) before a hybrid fuses them."""
    data = load_retrieval_set(path, config.split, config.qrels_format)
    stages.start(f"{name}: {len(data.queries):,} queries over {len(data.corpus):,} documents")
    ks = config.table_ks()
    k = config.top_k or max(ks)
    depth = candidate_depth(k) if systems.hybrids else k  # a hybrid fuses each side's best `depth`, as `search` does
    depth = retrieval_depth(depth, data, config.keep_identical_ids)
    runs: dict[str, Run] = {}
    for model, towers in encoders.items():
        cache = caches[model]
        folder = cache / name.replace("/", "--") if cache is not None else None
        runs[model] = model_run(config, towers, data, depth, folder, f"{name} corpus", systems.models[model])
    if systems.bm25:
        runs[BM25] = bm25_search(data.corpus_texts(), data.queries, depth, warn_empty=False)  # EmptyResults says it
    runs = {system: themselves.scored(name, data.qrels, run) for system, run in runs.items()}
    for model, hybrid in systems.hybrids.items():
        runs[hybrid] = fuse(runs[model], runs[BM25], config.fusion, config.hybrid_weight, k=k)
    runs = {system: cut_run(run, k) if depth > k else run for system, run in runs.items()}
    row = SetRow(name, len(data.queries), len(data.corpus))
    for system in systems.names():
        empty.count(system, name, data.qrels, runs[system])
        row.scores[system], per_query = evaluate_run(data.qrels, runs[system], ks, per_query=True, source=name,
                                                     keep_identical_ids=config.keep_identical_ids)
        row.per_query[system] = per_query
    return row, runs


def cache_key(config: EvaluateConfig, model: str, encoder: Encoder) -> str:
    """The cache folder name of one model's corpus vectors: a hash of what makes its vectors (the model's files, by
    content, so that a link to the model or a copy of it finds the same vectors; pooling, passage prefix as put
    (`side_prefix`) and length, batch size, precision, backend and quantization), never of the name it was given by."""
    from retromae.models.encoder import side_prefix  # torch: only when a model's vectors are cached

    made_by = {"model": input_fingerprint(model), "pooling": encoder.pooling, "normalize": encoder.normalize,
               "prefix": side_prefix(encoder, "passage", config.passage_prefix),
               "max_length": config.passage_max_length,
               "batch_size": config.batch_size, "dtype": str(encoder.amp_dtype),
               **beyond_torch(encoder.inference)}
    return hashlib.sha1(json.dumps(made_by, sort_keys=True).encode()).hexdigest()[:16]
