"""Readers and writers for retrieval sets, TREC runs and STS pairs.

Owns: the BEIR layout (`corpus.jsonl`, `queries.jsonl`, `qrels/{split}.tsv`; a split is a name, never a path:
`check_split`, the check of every split option), the MS MARCO layout
(`collection.tsv`, `queries*.tsv`, `qrels*.tsv`; a .tsv corpus or queries file may start with a header row naming its
columns, `data.fields.tsv_columns`), a corpus argument read by the one rule of `data.corpus.corpus_files` (a
folder stands for its corpus file), a queries argument (a file, or a folder holding `queries.jsonl` or
`queries.tsv`), the one file of a folder for each role (`_find`: two that could each be the queries or the qrels of
a split are refused, naming both), TREC run files (`qid Q0 docid rank score tag`) and the STS Benchmark file
layout; checking them (malformed lines, ids by the one id rule of `data.fields`, fields of the wrong JSON type,
repeated ids named with both lines, dangling judgments, non-finite scores, queries without text, queries judged
without a relevant document).
Does not own: models, encoding, search or metrics. Every file may also be gzip-compressed (`.gz`).
"""

from __future__ import annotations

import logging
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retromae.data.corpus import CORPUS_NAMES, corpus_files, corpus_format, empty_corpus, named_file
from retromae.data.fields import (
    QUERY_LAYOUT,
    check_id,
    document_fields,
    id_problem,
    record_id,
    repeated_id,
    string_field,
    tsv_columns,
    tsv_fields,
)
from retromae.data.ranking import ranked
from retromae.runtime.errors import DataError, NonFiniteError
from retromae.runtime.io import write_text_atomic
from retromae.runtime.lines import (
    SHORT_LINE_BYTES,
    check_regular_file,
    file_kind,
    finite_number,
    integer_field,
    json_object_line,
    numbered_lines,
    quoted,
    shortened,
)
from retromae.runtime.options import require

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)
MAX_IDS_SHOWN = 5
QUERIES_NAMES = ("queries.jsonl", "queries.tsv")  # a queries argument naming a folder reads one of these (or .gz)
QRELS_FORMATS = ("auto", "beir", "trec")
BEIR_COLUMNS = ("query-id", "corpus-id", "score")
TREC_ITERATIONS = ("0", "Q0")
MAX_GRADE = 2**31 - 1  # a relevance grade is a whole number trec_eval reads as a C int
SPLIT_NAME = re.compile(r"[^/\\\x00-\x1f\x7f]+")  # a split's name: no path separator, no control character


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


Parse = Callable[[int, str], tuple[str, object] | None]


def _read_table(paths: list[Path], parser: Callable[[Path], Parse], limit: int | None = None) -> dict:
    """Read every line of `paths` (the first `limit` of each, when given) through `parser(path)(number, line) -> (id,
    value)` (None: a header row); ids must keep the id rule (`data.fields.check_id`) and be unique: a repeated one
    is refused naming the file and line of both occurrences."""
    table: dict = {}
    for path in paths:
        parse = parser(path)
        for number, line in numbered_lines(path, limit=limit):
            parsed = parse(number, line)
            if parsed is None:
                continue
            key, value = parsed
            check_id(key, f"{path}:{number}")
            if key in table:
                raise repeated_id(key, f"{path}:{number}", _first_place(paths, parser, key))
            table[key] = value
    return table


def _first_place(paths: list[Path], parser: Callable[[Path], Parse], key: str) -> str:
    """FILE:LINE of the first line of `paths` giving id `key` (read again: a repeated id is rare, and keeping every
    id's line would cost memory on every read)."""
    for path in paths:
        parse = parser(path)
        for number, line in numbered_lines(path):
            parsed = parse(number, line)
            if parsed is not None and parsed[0] == key:
                return f"{path}:{number}"
    return "?"


def _tsv_parser(kind: str) -> Callable[[Path], Parse]:
    """A .tsv corpus's or queries file's line reader: its layout from its first line (`data.fields.tsv_columns`),
    a header row skipped."""
    def parser(path: Path) -> Parse:
        layout: list[dict[str, int]] = []

        def parse(number: int, line: str) -> tuple[str, object] | None:
            if not layout:
                columns, header = tsv_columns(path, number, line, kind)
                layout.append(columns)
                if header:
                    return None
            doc_id, title, text = tsv_fields(path, number, line, layout[0], kind)
            return doc_id, Passage(title, text) if kind == "corpus" else text
        return parse
    return parser


def _corpus_parser(path: Path) -> Parse:
    if corpus_format(path) == "tsv":
        return _tsv_parser("corpus")(path)
    if corpus_format(path) != "jsonl":
        raise DataError(f"{path}: a .{corpus_format(path)} corpus is read by pre-training only; retrieval names "
                        "documents by id and reads JSON lines ('_id' or 'id', 'text' or 'contents', optional 'title') "
                        "or .tsv ('id<TAB>[title<TAB>]text'), or a folder holding one")

    def parse(number: int, line: str) -> tuple[str, Passage]:
        doc_id, title, text = document_fields(json_object_line(path, number, line), f"{path}:{number}",
                                              id_required=True)
        return doc_id, Passage(title, text)
    return parse


def load_corpus(path: Path, limit: int | None = None) -> dict[str, Passage]:
    """A corpus: a file or a folder by the one rule of `data.corpus.corpus_files` (a BEIR or MS MARCO folder stands
    for its corpus file), each file JSON lines (`_id`/`id`, `title`, `text`, or Pyserini's `id`, `contents`) or
    .tsv (MS MARCO: pid, [title,] text; an optional header row). `limit`: the first lines of each file only (the
    check before the heavy work, `retromae.preflight`)."""
    path = Path(path)
    corpus = _read_table(corpus_files(path), _corpus_parser, limit)
    if not corpus:
        raise empty_corpus(path)
    return corpus


def queries_file(path: Path) -> Path:
    """The file a queries argument names: itself, or the queries file of a folder (`QUERIES_NAMES`, or .gz)."""
    path = Path(path)
    if not path.is_dir():
        return path
    return _find(path, [QUERIES_NAMES], "queries")


def _queries_parser(path: Path) -> Parse:
    if _format(path) == "tsv":
        return _tsv_parser("queries")(path)

    def parse(number: int, line: str) -> tuple[str, str]:
        record, where = json_object_line(path, number, line), f"{path}:{number}"
        return (record_id(record, where, required=True, layout=QUERY_LAYOUT),
                string_field(record, "text", where, layout=QUERY_LAYOUT))
    return parse


def load_queries(path: Path, limit: int | None = None) -> dict[str, str]:
    """Queries: BEIR `queries.jsonl` (`_id`, `text`) or MS MARCO `queries.tsv` (qid, text; an optional header row),
    or a folder holding one (`queries_file`). `limit`: the first lines only (as `load_corpus`)."""
    path = queries_file(path)
    parse = _queries_parser(path)
    empty: dict[str, int] = {}  # id → line of each query without text

    def parse_checked(number: int, line: str) -> tuple[str, str] | None:
        parsed = parse(number, line)
        if parsed is not None and not parsed[1].strip():
            empty.setdefault(parsed[0], number)
        return parsed
    queries = _read_table([path], lambda _: parse_checked, limit)
    if not queries:
        raise DataError(f"{path}: no queries")
    if empty:
        query_id, number = next(iter(empty.items()))
        raise DataError(f"{path}:{number}: query {quoted(query_id)} has no text ({len(empty)} of the {len(queries)} "
                        "queries have none); an empty query finds nothing and would lower every mean: give each a "
                        "text or remove it")
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
        if qrels_format == "trec":  # a declared layout the file contradicts: refused, never overridden unsaid
            raise DataError(f"{path}:1: starts with a BEIR header ({quoted(first.strip())}), but --qrels-format trec "
                            "declares header-less 'qid 0 docid rel' lines; give --qrels-format beir or auto")
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


def load_qrels(path: Path, qrels_format: str = "auto", limit: int | None = None) -> dict[str, dict[str, int]]:
    """Relevance judgments: BEIR tsv (a header naming `query-id`, `corpus-id`, `score`, in any order, among its
    columns) or TREC qrels (`qid 0 docid rel`). `qrels_format` "beir" or "trec" declares a header-less file's
    layout; "auto" reads a header-less file of 3 fields as BEIR and of 4 as TREC only when its second field is 0.
    `limit`: the first lines only, their layout and values checked (as `load_corpus`)."""
    path = Path(path)
    require(qrels_format in QRELS_FORMATS, "qrels_format", f"must be one of {', '.join(QRELS_FORMATS)}")
    qrels: dict[str, dict[str, int]] = {}
    first_lines: dict[str, int] = {}  # query id → the line of its first judgment
    layout, first_number = None, 0
    for number, line in numbered_lines(path, limit=limit, line_bytes=SHORT_LINE_BYTES):
        if layout is None:
            first_number = number
            header, *layout = _qrels_layout(path, line, qrels_format)
            if header:
                continue
        qid, docid, grade = _qrel_fields(path, number, line, *layout)
        header = (f" (a header line is recognised by its names: {chr(9).join(BEIR_COLUMNS)!r})"
                  if number == first_number else "")
        value = integer_field(path, number, grade, "relevance grade", hint=header)
        if abs(value) > MAX_GRADE:  # summed gains of grades near a float's limit reach inf, and NDCG inf/inf = NaN
            raise DataError(f"{path}:{number}: relevance grade {quoted(grade)} is beyond what trec_eval reads "
                            f"(a C int): give a whole number from {-MAX_GRADE} to {MAX_GRADE}")
        check_id(qid, f"{path}:{number}", "query id")
        check_id(docid, f"{path}:{number}", "document id")
        first_lines.setdefault(qid, number)
        previous = qrels.setdefault(qid, {}).setdefault(docid, value)
        if previous != value:
            raise DataError(f"{path}:{number}: query {quoted(qid)} judges document {quoted(docid)} twice ({previous}, "
                            f"{value})")
    if not qrels:
        raise DataError(f"{path}: no relevance judgments")
    return qrels if limit is not None else _without_unanswerable(qrels, path, first_lines)


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
        logger.warning("%s:%d: %d of %d queries (the first: %s) judge no document above 0; they are left out (every "
                       "ranking would score 0 on them)", path, first_lines[first], len(unanswerable), len(qrels),
                       quoted(first))
    return {qid: docs for qid, docs in qrels.items() if qid not in unanswerable}


def _find(folder: Path, tiers: Sequence[Sequence[str]], what: str) -> Path:
    """The file of `folder` playing the role `what` (the corpus, the queries, the qrels of a split): `tiers` are its
    names from the most specific to the least (the split's own file, its `.small` subset, a file naming no split),
    the names of one tier equally good. The first tier with a file present (a name or its .gz) gives it; two present
    in that tier could each be the role's file and are refused naming both (`data.corpus.named_file`); a file of a
    later tier is then not read (`qrels.tsv` beside `qrels/test.tsv`: the file naming the split is the split's).
    DataError listing every name looked for when none is there."""
    for names in tiers:
        found = named_file(folder, names, what, f"a folder holds one {what} file", "move away the one not meant")
        if found is not None:
            return found
    raise DataError(f"{folder}: no {what} file; looked for {', '.join(name for names in tiers for name in names)}")


def _examples(ids: set[str]) -> str:
    return ", ".join(quoted(i) for i in sorted(ids)[:MAX_IDS_SHOWN])


def _drop_dangling(qrels: dict[str, dict[str, int]], corpus: dict, queries: dict, paths: dict[str, Path]) -> None:
    """Remove judgments naming an unknown query or document, with one warning giving the counts, how many queries
    lost every relevant judgment (they leave the evaluation), and, where a dropped query id equals an id of the
    queries file, or a dropped document id a corpus id, after NFC normalisation or case folding, one such pair in
    code points (`_lookalike`): on screen the two look the same. Ids stay compared byte for byte."""
    unknown_queries = {qid for qid in qrels if qid not in queries}
    dropped_by_query = sum(len(qrels.pop(qid)) for qid in unknown_queries)
    unknown_docs: set[str] = set()
    dropped_by_doc = emptied = 0
    for docs in qrels.values():
        missing = [docid for docid in docs if docid not in corpus]
        unknown_docs.update(missing)
        dropped_by_doc += len(missing)
        relevant = any(grade > 0 for grade in docs.values())
        for docid in missing:
            del docs[docid]
        emptied += relevant and not any(grade > 0 for grade in docs.values())
    if not dropped_by_query and not dropped_by_doc:
        return
    parts = []
    if dropped_by_query:
        name = paths["queries"].name
        alike = _lookalike(unknown_queries, queries, f"a query id of {name}", name)
        parts.append(f"{dropped_by_query} judgments name {len(unknown_queries)} queries missing from {name} (e.g. "
                     f"{_examples(unknown_queries)}){alike}")
    if dropped_by_doc:
        parts.append(f"{dropped_by_doc} judgments name {len(unknown_docs)} documents missing from "
                     f"{paths['corpus'].name} (e.g. {_examples(unknown_docs)}){_lookalike(unknown_docs, corpus)}")
    if emptied:
        parts.append(f"{emptied} queries lost all their relevant judgments and leave the evaluation")
    logger.warning("%s: dropped them: %s", paths["qrels"], "; ".join(parts))


def _folded(text: str) -> str:
    """`text` NFC-normalised and case-folded: the key under which two ids that look alike on screen meet."""
    return (text if text.isascii() else unicodedata.normalize("NFC", text)).casefold()


def check_run_documents(run: dict[str, dict[str, float]], corpus: dict, path: Path, corpus_name: str) -> None:
    """A run's document ids checked against the corpus it is evaluated on: one warning giving how many are missing
    (they can never be relevant), a few of them and any look-alike (`_lookalike`); DataError when none is in the
    corpus (every metric would be 0: a run of another collection, or ids written another way)."""
    unknown: set[str] = set()
    known = False
    for docs in run.values():
        for docid in docs:
            if docid in corpus:
                known = True
            else:
                unknown.add(docid)
    if not unknown:
        return
    said = (f"{len(unknown):,} document ids of the run are missing from {corpus_name} (e.g. {_examples(unknown)})"
            f"{_lookalike(unknown, corpus, source='the run')}")
    if not known:
        raise DataError(f"{path}: none of the run's documents is in {corpus_name}, so every metric would be 0: "
                        f"{said}; is it a run of another collection?")
    logger.warning("%s: %s; they count as not relevant", path, said)


def _lookalike(missing: set[str], known: dict, kind: str = "a corpus id", place: str = "the corpus",
               source: str = "the qrels") -> str:
    """", and N of them equal a corpus id once Unicode-normalised ... (e.g. 'cafe\\u03011' of the qrels is 'caf\\xe91'
    of the corpus ...)" when some ids of `missing` (read from `source`) equal an id of `known` (`kind`, of `place`:
    a corpus's documents, a queries file's queries) after NFC normalisation or case folding (one pass over the known
    ids, only when some were missing); else ""."""
    wanted = {_folded(key): key for key in sorted(missing, reverse=True)}  # the first id of each key kept
    found = {}
    for key in known:
        folded = _folded(key)
        if folded in wanted and folded not in found:
            found[folded] = key
    if not found:
        return ""
    folded = min(found, key=wanted.__getitem__)
    dropped, kept = wanted[folded], found[folded]
    nfc = unicodedata.normalize("NFC", dropped) == unicodedata.normalize("NFC", kept)
    how = "NFC normalisation" if nfc else "case folding" if dropped.casefold() == kept.casefold() else (
        "NFC normalisation and case folding")
    count = sum(1 for key in missing if _folded(key) in found)
    return (f", and {count} of them equal {kind} once Unicode-normalised (NFC) or case-folded, while ids are "
            f"compared character for character: e.g. {shortened(ascii(dropped), 60)} of {source} is "
            f"{shortened(ascii(kept), 60)} of {place} after {how}")


def split_problem(split: str) -> str | None:
    """What is wrong with `split` as the name of a split, or None: it is joined into file names (`qrels/{split}.tsv`,
    `sts-{split}.csv`), so a path separator or `..` would read outside the folder."""
    if SPLIT_NAME.fullmatch(split) and ".." not in split:
        return None
    return f"a split is a name such as test or dev, not a path (no '/', '\\', '..' or control character), got {split!r}"


def check_split(split: str) -> None:
    """ValueError saying what is wrong with `split` (`split_problem`): the `check` of every split option."""
    problem = split_problem(split)
    if problem is not None:
        raise ValueError(problem)


def split_files(folder: Path, split: str) -> dict[str, Path]:
    """The queries and qrels files of one split of a BEIR or MS MARCO folder, each the one file of its role (`_find`),
    a file naming the split read before its `.small` subset, and that before a file naming no split: the queries
    from `queries.{split}.tsv`, `queries.{split}.small.tsv`, then `queries.jsonl` or `queries.tsv`; the qrels from
    `qrels/{split}.tsv` or `qrels.{split}.tsv`, `qrels.{split}.small.tsv`, then `qrels.tsv` (`--split dev.small`
    names MS MARCO's small dev set where its full one lies beside it)."""
    problem = split_problem(split)
    require(problem is None, "split", str(problem))
    return {"queries": _find(folder, [[f"queries.{split}.tsv"], [f"queries.{split}.small.tsv"], QUERIES_NAMES],
                             "queries"),
            "qrels": _find(folder, [[f"qrels/{split}.tsv", f"qrels.{split}.tsv"], [f"qrels.{split}.small.tsv"],
                                    ["qrels.tsv"]], f"qrels (split {split!r})")}


def judged_queries(folder: Path, split: str) -> tuple[dict[str, str], Path]:
    """The queries of one split that judge a document relevant (id → text), without reading the corpus, and the
    qrels file that says so."""
    paths = split_files(Path(folder), split)
    qrels = load_qrels(paths["qrels"])
    queries = load_queries(paths["queries"])
    return {qid: text for qid, text in queries.items()
            if any(grade > 0 for grade in qrels.get(qid, {}).values())}, paths["qrels"]


def load_retrieval_set(folder: Path, split: str = "test", qrels_format: str = "auto") -> RetrievalSet:
    """A BEIR folder or an MS MARCO folder, restricted to the queries judged in `split`.

    BEIR: `corpus.jsonl`, `queries.jsonl`, `qrels/{split}.tsv`. MS MARCO: `collection.tsv`,
    `queries.{split}.tsv` (or `queries.{split}.small.tsv`, `queries.tsv`), `qrels.{split}.tsv`
    (or `qrels.{split}.small.tsv`, `qrels.tsv`); each file found by `split_files`. `qrels_format` as in `load_qrels`.
    """
    paths = _set_paths(Path(folder), split)
    qrels = load_qrels(paths["qrels"], qrels_format)
    all_queries = load_queries(paths["queries"])
    corpus = load_corpus(paths["corpus"])
    _drop_dangling(qrels, corpus, all_queries, paths)
    queries = {qid: text for qid, text in all_queries.items()  # a query whose relevant documents were all dropped
               if any(grade > 0 for grade in qrels.get(qid, {}).values())}  # has nothing left to find
    if not queries:
        raise DataError(f"{paths['qrels']}: no judged query left after dropping unknown queries and documents")
    return RetrievalSet(corpus=corpus, queries=queries, qrels={qid: qrels[qid] for qid in queries})


def _set_paths(folder: Path, split: str) -> dict[str, Path]:
    """The corpus, queries and qrels files of a retrieval set's folder (`load_retrieval_set`)."""
    if not folder.is_dir():
        kind = file_kind(folder)
        if kind is None and folder.name.removesuffix(".gz") in (*CORPUS_NAMES, *QUERIES_NAMES):
            raise DataError(f"{folder}: a file of a retrieval set, which is given as its folder ({folder.parent}: its "
                            "corpus, queries and qrels)")
        raise DataError(f"{folder}: not a folder ({'nothing is there' if kind == 'missing' else kind or 'a file'})")
    return {"corpus": _find(folder, [CORPUS_NAMES], "corpus"), **split_files(folder, split)}


def check_retrieval_set(folder: Path, split: str = "test", qrels_format: str = "auto", limit: int = 1000) -> None:
    """The layout of a retrieval set's folder and the first `limit` lines of each of its files, read as
    `load_retrieval_set` reads them (the check before the heavy work, `retromae.preflight`)."""
    paths = _set_paths(Path(folder), split)
    load_qrels(paths["qrels"], qrels_format, limit)
    load_queries(paths["queries"], limit)
    load_corpus(paths["corpus"], limit)


def read_trec_run(path: Path, limit: int | None = None) -> dict[str, dict[str, float]]:
    """A TREC run file (`qid Q0 docid rank score tag`, whitespace-separated) as qid → docid → score (`limit`: the
    first lines only)."""
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    for number, line in numbered_lines(path, limit=limit, line_bytes=SHORT_LINE_BYTES):
        fields = line.split()
        if len(fields) != 6:
            raise DataError(f"{path}:{number}: expected 'qid Q0 docid rank score tag', found {len(fields)} fields")
        qid, _, docid, rank, score, _ = fields
        check_id(qid, f"{path}:{number}", "query id")
        check_id(docid, f"{path}:{number}", "document id")
        integer_field(path, number, rank, "rank")
        value = finite_number(path, number, score, "score")
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise DataError(f"{path}:{number}: document {quoted(docid)} appears twice for query {quoted(qid)}")
        docs[docid] = value
    if not run:
        raise DataError(f"{path}: the run is empty")
    return run


def _check_token(value: str, what: str) -> None:
    """DataError when `value` breaks the id rule (`data.fields.id_problem`): a run of it could not be read back. (The
    commands refuse a bad --tag before the search: `retrieval.config.check_run_tag`.)"""
    problem = id_problem(value)
    if problem is not None:
        raise DataError(f"{what} {quoted(value)} cannot be written to a TREC run: it {problem}")


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
                raise NonFiniteError(f"{path}: not written: the score of document {quoted(docid)} for query "
                                     f"{quoted(qid)} is {score} (the vectors or the index hold NaN or infinite values)")
            lines.append(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")
    write_text_atomic(Path(path), "".join(lines))


def load_sts_pairs(path: Path, limit: int | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """STS Benchmark layout (tab-separated genre, file, year, id, score, sentence 1, sentence 2, [extra columns]):
    the two sentence lists and the gold scores, shape (N,) (`limit`: the first lines only)."""
    path = Path(path)
    first, second, scores = [], [], []
    for number, line in numbered_lines(path, limit=limit):
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataError(f"{path}:{number}: expected at least 7 tab-separated fields "
                            f"(genre, file, year, id, score, sentence 1, sentence 2), found {len(fields)}")
        scores.append(finite_number(path, number, fields[4], "score"))
        first.append(fields[5])
        second.append(fields[6])
    if not scores:
        raise DataError(f"{path}: no sentence pairs")
    import numpy as np  # numpy: only for the gold scores' array (the readers stay light for the checks before work)

    return first, second, np.asarray(scores, dtype=np.float64)
