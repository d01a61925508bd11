"""Readers and writers for retrieval sets, TREC runs and STS pairs.

Owns: the BEIR layout (`corpus.jsonl`, `queries.jsonl`, `qrels/{split}.tsv`), the MS MARCO layout
(`collection.tsv`, `queries*.tsv`, `qrels*.tsv`), TREC run files (`qid Q0 docid rank score tag`) and the STS
Benchmark file layout; checking them (malformed lines, ids by the one id rule of `data.fields`, fields of the wrong
JSON type, duplicate ids, dangling judgments, non-finite scores, queries without text, queries judged without a
relevant document).
Does not own: models, encoding, search or metrics. Every file may also be gzip-compressed (`.gz`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retromae.data.fields import check_id, document_fields, id_problem, record_id, string_field
from retromae.data.ranking import ranked
from retromae.runtime.errors import DataError, NonFiniteError
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import check_regular_file, file_kind, finite_number, json_object_line, numbered_lines
from retromae.runtime.options import require

logger = logging.getLogger(__name__)
MAX_IDS_SHOWN = 5
QRELS_FORMATS = ("auto", "beir", "trec")
BEIR_COLUMNS = ("query-id", "corpus-id", "score")
TREC_ITERATIONS = ("0", "Q0")


@dataclass(frozen=True, slots=True)
class Passage:
    """One document of a retrieval corpus."""

    title: str
    text: str

    def joined(self) -> str:
        """Title and text separated by a space, or the text alone when there is no title."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass
class RetrievalSet:
    """A corpus, the queries of one split and their relevance judgments (qid → docid → grade)."""

    corpus: dict[str, Passage]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def corpus_texts(self) -> dict[str, str]:
        """Each document as the one text a model reads: title and body joined."""
        return {doc_id: passage.joined() for doc_id, passage in self.corpus.items()}


def _format(path: Path) -> str:
    """'jsonl' or 'tsv', from the file name (a trailing .gz ignored), of a regular file."""
    check_regular_file(path)
    suffixes = [s for s in Path(path).suffixes if s != ".gz"]
    suffix = suffixes[-1] if suffixes else ""
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".tsv", ".txt"):
        return "tsv"
    raise DataError(f"{path}: unknown format; expected .jsonl (BEIR) or .tsv (MS MARCO)")


def _read_table(path: Path, parse: Callable[[int, str], tuple[str, object]]) -> dict:
    """Read every line of `path` through `parse(number, line) -> (id, value)`; ids must keep the id rule
    (`data.fields.check_id`) and be unique."""
    table: dict = {}
    duplicates: dict[str, int] = {}
    for number, line in numbered_lines(path):
        key, value = parse(number, line)
        check_id(key, f"{path}:{number}")
        if key in table:
            duplicates.setdefault(key, number)
        else:
            table[key] = value
    if duplicates:
        shown = ", ".join(f"{key!r} (line {line})" for key, line in list(duplicates.items())[:MAX_IDS_SHOWN])
        raise DataError(f"{path}: {len(duplicates)} duplicate ids: {shown}")
    return table


def load_corpus(path: Path) -> dict[str, Passage]:
    """A corpus: BEIR `corpus.jsonl` (`_id`, `title`, `text`) or MS MARCO `collection.tsv` (pid, [title,] text)."""
    path = Path(path)
    if _format(path) == "jsonl":
        def parse(number: int, line: str) -> tuple[str, Passage]:
            doc_id, title, text = document_fields(json_object_line(path, number, line), f"{path}:{number}",
                                                  id_required=True)
            return doc_id, Passage(title, text)
    else:
        def parse(number: int, line: str) -> tuple[str, Passage]:
            fields = line.split("\t")
            if len(fields) == 2:
                return fields[0].strip(), Passage("", fields[1])
            if len(fields) == 3:
                return fields[0].strip(), Passage(fields[1], fields[2])
            raise DataError(f"{path}:{number}: expected 'id<TAB>text' or 'id<TAB>title<TAB>text', "
                            f"found {len(fields)} tab-separated fields")
    corpus = _read_table(path, parse)
    if not corpus:
        raise DataError(f"{path}: the corpus is empty")
    return corpus


def load_queries(path: Path) -> dict[str, str]:
    """Queries: BEIR `queries.jsonl` (`_id`, `text`) or MS MARCO `queries.tsv` (qid, text)."""
    path = Path(path)
    if _format(path) == "jsonl":
        def parse(number: int, line: str) -> tuple[str, str]:
            record, where = json_object_line(path, number, line), f"{path}:{number}"
            return record_id(record, where, required=True), string_field(record, "text", where)
    else:
        def parse(number: int, line: str) -> tuple[str, str]:
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(f"{path}:{number}: expected 'id<TAB>text', found {len(fields)} tab-separated fields")
            return fields[0].strip(), fields[1]
    empty: dict[str, int] = {}  # id → line of each query without text

    def parse_checked(number: int, line: str) -> tuple[str, str]:
        query_id, text = parse(number, line)
        if not text.strip():
            empty.setdefault(query_id, number)
        return query_id, text
    queries = _read_table(path, parse_checked)
    if not queries:
        raise DataError(f"{path}: no queries")
    if empty:
        query_id, number = next(iter(empty.items()))
        raise DataError(f"{path}:{number}: query {query_id!r} has no text ({len(empty)} of the {len(queries)} queries "
                        "have none); an empty query finds nothing and would lower every mean: give each a text or "
                        "remove it")
    return queries


def _split_fields(line: str) -> list[str]:
    """Tab-separated fields when the line has tabs (ids may hold spaces), else whitespace-separated."""
    return [f.strip() for f in line.split("\t")] if "\t" in line else line.split()


def _qrels_layout(path: Path, first: str, qrels_format: str) -> tuple[bool, tuple[int, int, int], int | None]:
    """(has a header, positions of qid / docid / grade, the field count every line must have or None), decided once
    per file by its header or the declared format, never by each line's field count. A header is recognised by its
    names only (`query-id`, `corpus-id`, `score`): any other first line is a judgment, so that a header-less file
    never loses its first line, and a header of other names is an error naming the names to use."""
    fields = _split_fields(first)
    if set(BEIR_COLUMNS) <= set(fields):  # a header names the columns (BEIR: query-id corpus-id score)
        return True, tuple(fields.index(name) for name in BEIR_COLUMNS), len(fields)
    if qrels_format == "beir" or (qrels_format == "auto" and len(fields) == 3):
        return False, (0, 1, 2), 3
    if qrels_format == "trec" or (qrels_format == "auto" and len(fields) == 4 and fields[1] in TREC_ITERATIONS):
        return False, (0, 2, 3), 4
    raise DataError(f"{path}:1: cannot tell the qrels format ({len(fields)} fields, no header line): a BEIR file "
                    f"starts with the header {chr(9).join(BEIR_COLUMNS)!r}; a TREC file has 'qid 0 docid rel' lines; "
                    "add the header, or (with `retromae evaluate`) declare the layout with --qrels-format beir|trec")


def _qrel_fields(path: Path, number: int, line: str, positions: tuple[int, int, int],
                 count: int | None) -> tuple[str, str, str]:
    """(qid, docid, grade) of a qrels line laid out as `_qrels_layout` decided."""
    fields = _split_fields(line)
    if len(fields) != count:
        raise DataError(f"{path}:{number}: {len(fields)} fields where the file's first line has {count}: a BEIR "
                        "file's lines have the columns its header names, a TREC file's are 'qid 0 docid rel'")
    return tuple(fields[i] for i in positions)


def load_qrels(path: Path, qrels_format: str = "auto") -> dict[str, dict[str, int]]:
    """Relevance judgments: BEIR tsv (a header naming `query-id`, `corpus-id`, `score`, in any order, among its
    columns) or TREC qrels (`qid 0 docid rel`). `qrels_format` "beir" or "trec" declares a header-less file's
    layout; "auto" reads a header-less file of 3 fields as BEIR and of 4 as TREC only when its second field is 0."""
    path = Path(path)
    require(qrels_format in QRELS_FORMATS, "qrels_format", f"must be one of {', '.join(QRELS_FORMATS)}")
    qrels: dict[str, dict[str, int]] = {}
    first_lines: dict[str, int] = {}  # query id → the line of its first judgment
    layout, first_number = None, 0
    for number, line in numbered_lines(path):
        if layout is None:
            first_number = number
            header, *layout = _qrels_layout(path, line, qrels_format)
            if header:
                continue
        qid, docid, grade = _qrel_fields(path, number, line, *layout)
        try:
            value = int(grade)
        except ValueError:
            header = (f" (a header line is recognised by its names: {chr(9).join(BEIR_COLUMNS)!r})"
                      if number == first_number else "")
            raise DataError(f"{path}:{number}: relevance grade {grade!r} is not an integer{header}") from None
        check_id(qid, f"{path}:{number}", "query id")
        check_id(docid, f"{path}:{number}", "document id")
        finite_number(path, number, value, "relevance grade")  # a 400-digit grade would overflow every gain
        first_lines.setdefault(qid, number)
        previous = qrels.setdefault(qid, {}).setdefault(docid, value)
        if previous != value:
            raise DataError(f"{path}:{number}: query {qid!r} judges document {docid!r} twice ({previous}, {value})")
    if not qrels:
        raise DataError(f"{path}: no relevance judgments")
    return _without_unanswerable(qrels, path, first_lines)


def _without_unanswerable(qrels: dict[str, dict[str, int]], path: Path,
                          first_lines: dict[str, int]) -> dict[str, dict[str, int]]:
    """The queries with a relevant document (a grade above 0); the others, which every ranking scores 0 on, are left
    out with one warning naming the file, their count and the first one's line. None left is an error."""
    unanswerable = {qid for qid, docs in qrels.items() if not any(grade > 0 for grade in docs.values())}
    if len(unanswerable) == len(qrels):
        raise DataError(f"{path}: no judgment has a grade above 0, so no query has a relevant document and every "
                        "metric would be 0: relevant documents need a positive grade")
    if unanswerable:
        first = min(unanswerable, key=first_lines.__getitem__)
        logger.warning("%s:%d: %d of %d queries (the first: %r) judge no document above 0; they are left out (every "
                       "ranking would score 0 on them)", path, first_lines[first], len(unanswerable), len(qrels), first)
    return {qid: docs for qid, docs in qrels.items() if qid not in unanswerable}


def _find(folder: Path, names: list[str], what: str) -> Path:
    """The first of `names` (or its .gz) present in `folder`; DataError listing every name looked for."""
    for name in names:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.exists():
                check_regular_file(candidate)
                return candidate
    raise DataError(f"{folder}: no {what} file; looked for {', '.join(names)}")


def _examples(ids: set[str]) -> str:
    return ", ".join(repr(i) for i in sorted(ids)[:MAX_IDS_SHOWN])


def _drop_dangling(qrels: dict[str, dict[str, int]], corpus: dict, queries: dict, paths: dict[str, Path]) -> None:
    """Remove judgments naming an unknown query or document, with one warning giving the counts."""
    unknown_queries = {qid for qid in qrels if qid not in queries}
    dropped_by_query = sum(len(qrels.pop(qid)) for qid in unknown_queries)
    unknown_docs: set[str] = set()
    dropped_by_doc = 0
    for docs in qrels.values():
        missing = [docid for docid in docs if docid not in corpus]
        unknown_docs.update(missing)
        dropped_by_doc += len(missing)
        for docid in missing:
            del docs[docid]
    if not dropped_by_query and not dropped_by_doc:
        return
    parts = []
    if dropped_by_query:
        parts.append(f"{dropped_by_query} judgments name {len(unknown_queries)} queries missing from "
                     f"{paths['queries'].name} (e.g. {_examples(unknown_queries)})")
    if dropped_by_doc:
        parts.append(f"{dropped_by_doc} judgments name {len(unknown_docs)} documents missing from "
                     f"{paths['corpus'].name} (e.g. {_examples(unknown_docs)})")
    logger.warning("%s: dropped them: %s", paths["qrels"], "; ".join(parts))


def load_retrieval_set(folder: Path, split: str = "test", qrels_format: str = "auto") -> RetrievalSet:
    """A BEIR folder or an MS MARCO folder, restricted to the queries judged in `split`.

    BEIR: `corpus.jsonl`, `queries.jsonl`, `qrels/{split}.tsv`. MS MARCO: `collection.tsv`,
    `queries.{split}.tsv` (or `queries.{split}.small.tsv`, `queries.tsv`), `qrels.{split}.tsv`
    (or `qrels.{split}.small.tsv`, `qrels.tsv`). `qrels_format` as in `load_qrels`.
    """
    folder = Path(folder)
    if not folder.is_dir():
        kind = file_kind(folder)
        raise DataError(f"{folder}: not a folder ({'nothing is there' if kind == 'missing' else kind or 'a file'})")
    paths = {
        "corpus": _find(folder, ["corpus.jsonl", "collection.tsv", "corpus.tsv"], "corpus"),
        "queries": _find(folder, ["queries.jsonl", f"queries.{split}.tsv", f"queries.{split}.small.tsv",
                                  "queries.tsv"], "queries"),
        "qrels": _find(folder, [f"qrels/{split}.tsv", f"qrels.{split}.tsv", f"qrels.{split}.small.tsv",
                                "qrels.tsv"], f"qrels (split {split!r})"),
    }
    qrels = load_qrels(paths["qrels"], qrels_format)
    all_queries = load_queries(paths["queries"])
    corpus = load_corpus(paths["corpus"])
    _drop_dangling(qrels, corpus, all_queries, paths)
    queries = {qid: text for qid, text in all_queries.items()  # a query whose relevant documents were all dropped
               if any(grade > 0 for grade in qrels.get(qid, {}).values())}  # has nothing left to find
    if not queries:
        raise DataError(f"{paths['qrels']}: no judged query left after dropping unknown queries and documents")
    return RetrievalSet(corpus=corpus, queries=queries, qrels={qid: qrels[qid] for qid in queries})


def read_trec_run(path: Path) -> dict[str, dict[str, float]]:
    """A TREC run file (`qid Q0 docid rank score tag`, whitespace-separated) as qid → docid → score."""
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    for number, line in numbered_lines(path):
        fields = line.split()
        if len(fields) != 6:
            raise DataError(f"{path}:{number}: expected 'qid Q0 docid rank score tag', found {len(fields)} fields")
        qid, _, docid, rank, score, _ = fields
        check_id(qid, f"{path}:{number}", "query id")
        check_id(docid, f"{path}:{number}", "document id")
        try:
            int(rank)
        except ValueError:
            raise DataError(f"{path}:{number}: rank {rank!r} or score {score!r} is not a number") from None
        value = finite_number(path, number, score, "score")
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise DataError(f"{path}:{number}: document {docid!r} appears twice for query {qid!r}")
        docs[docid] = value
    if not run:
        raise DataError(f"{path}: the run is empty")
    return run


def _check_token(value: str, what: str) -> None:
    """ValueError when `value` breaks the id rule (`data.fields.id_problem`): a run of it could not be read back."""
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {value!r} cannot be written to a TREC run: it {problem}")


def write_trec_run(run: dict[str, dict[str, float]], path: Path, tag: str = "retromae") -> None:
    """Write `run` as a TREC run file, atomically; per query in `data.ranking`'s order (score descending, ties by
    doc id descending: the order trec_eval ranks them in). Scores are written with full precision so that a re-read
    run ranks alike."""
    _check_token(tag, "tag")
    lines = []
    for qid, docs in run.items():
        _check_token(qid, "query id")
        for rank, docid in enumerate(ranked(docs), start=1):
            score = docs[docid]
            _check_token(docid, "document id")
            if not math.isfinite(score):
                raise NonFiniteError(f"{path}: not written: the score of document {docid!r} for query {qid!r} is "
                                     f"{score} (the vectors or the index hold NaN or infinite values)")
            lines.append(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")
    write_text_atomic(Path(path), "".join(lines))


def load_sts_pairs(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """STS Benchmark layout (tab-separated genre, file, year, id, score, sentence 1, sentence 2, [extra columns]):
    the two sentence lists and the gold scores, shape (N,)."""
    path = Path(path)
    first, second, scores = [], [], []
    for number, line in numbered_lines(path):
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataError(f"{path}:{number}: expected at least 7 tab-separated fields "
                            f"(genre, file, year, id, score, sentence 1, sentence 2), found {len(fields)}")
        scores.append(finite_number(path, number, fields[4], "score"))
        first.append(fields[5])
        second.append(fields[6])
    if not scores:
        raise DataError(f"{path}: no sentence pairs")
    return first, second, np.asarray(scores, dtype=np.float64)
