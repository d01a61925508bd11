"""Fine-tuning data: queries with positive and negative passages, read from JSON lines or a BEIR folder.

Owns: `TrainingSet` (a table of distinct passages, and per query the rows of its positives and negatives, with
optional teacher scores), reading the training-file format

    {"query": str, "pos": [str, ...], "neg": [str, ...], "pos_scores": [float, ...], "neg_scores": [float, ...]}

(`neg` and the score lists optional; other fields such as `query_id` are kept by `read_training_records`),
reading a BEIR / MS MARCO folder and split (positives from the qrels, no negatives), and writing training
files. What identifies a passage (`passage_keys`): its corpus id in a folder; in a file, its id where the file gives
`pos_ids` / `neg_ids` (on every line, then), else its text; the rules a file's passages follow (`_FilePassages`).
Does not own mining negatives (`retrieval.mining`), batching or tokenisation (`finetune`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retromae.data.corpus import CORPUS_NAMES
from retromae.data.fields import WHITESPACE, UniqueIds, check_id, missing_field
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_path
from retromae.runtime.lines import finite_number, json_object_line, numbered_lines, quoted

TRAINING_LAYOUT = ('a training line is a JSON object {"query": str, "pos": [str, ...], "neg": [str, ...]} (optional: '
                   '"pos_scores", "neg_scores", "query_id", "pos_ids", "neg_ids")')
_DIGIT = re.compile("[0-9]")


@dataclass
class TrainingExample:
    """One query: rows of its positive and negative passages, and teacher scores by passage row (if any)."""

    query: str
    positives: list[int]
    negatives: list[int] = field(default_factory=list)
    scores: dict[int, float] | None = None
    query_id: str = ""


@dataclass
class TrainingSet:
    """Distinct passages (`texts[row]`, `ids[row]`) and the training examples that point at them. `ids` are the
    passages' own (a folder's corpus ids, a file's `pos_ids` / `neg_ids`) when `ids_given`, else row numbers, which
    name rows for ranking and are never written."""

    texts: list[str]
    ids: list[str]
    examples: list[TrainingExample]
    source: str = ""
    ids_given: bool = True  # `ids` are the passages' own (a folder's, a file's), not row numbers

    @property
    def has_scores(self) -> bool:
        return bool(self.examples) and all(example.scores is not None for example in self.examples)


def _string_list(path: Path, number: int, record: dict, name: str, required: bool) -> list[str]:
    if name not in record:
        if required:
            raise missing_field(record, f"{path}:{number}", (name,), TRAINING_LAYOUT)
        return []
    value = record[name]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DataError(f"{path}:{number}: field {name!r} must be a list of strings")
    return value


def _score_list(path: Path, number: int, record: dict, name: str, expected: int) -> list[float] | None:
    if name not in record:
        return None
    value = record[name]
    if not isinstance(value, list) or not all(isinstance(s, int | float) and not isinstance(s, bool) for s in value):
        raise DataError(f"{path}:{number}: field {name!r} must be a list of numbers")
    if len(value) != expected:
        passages = name.split("_")[0]
        raise DataError(f"{path}:{number}: {name!r} holds {len(value)} scores for {expected} {passages!r} passages")
    return [finite_number(path, number, score, f"a score of {name!r}") for score in value]


def _check_ids(path: Path, number: int, record: dict, positives: list[str], negatives: list[str]) -> None:
    """The ids `retromae mine` writes, when a line has them: `query_id` an id, `pos_ids` / `neg_ids` lists of ids
    as long as the passage lists they name (`data.fields.check_id`)."""
    where = f"{path}:{number}"
    if record.get("query_id") is not None:
        check_id(record["query_id"], where, "field 'query_id'")
    for name, passages in (("pos_ids", positives), ("neg_ids", negatives)):
        if name not in record:
            continue
        ids = record[name]
        if not isinstance(ids, list):
            raise DataError(f"{where}: field {name!r} must be a list of ids")
        for value in ids:
            check_id(value, where, f"an id of {name!r}")
        if len(ids) != len(passages):
            raise DataError(f"{where}: {name!r} holds {len(ids)} ids for {len(passages)} {name[:3]!r} passages")


def _what_data_takes(path: Path, line: str) -> str:
    """What --data expects, after a line that is no JSON object: a tab-separated line is named as the qrels or
    .tsv file it looks like, and a BEIR folder's qrels file gets the folder and split to give instead."""
    columns = line.split("\t")
    looks = (f"the line holds {len(columns)} tab-separated columns, as a qrels or MS MARCO .tsv file does; "
             if len(columns) > 1 else "")
    folder, split = path.parent.parent, path.name.removesuffix(".gz").removesuffix(".tsv")
    instead = (f" (here: --data {folder} --split {split})"
               if path.parent.name == "qrels" and any((folder / name).is_file() for name in CORPUS_NAMES) else "")
    return (f'{looks}--data takes a training file of JSON lines, one query a line ({{"query": str, "pos": [str, ...], '
            f'"neg": [str, ...]}}), or a BEIR / MS MARCO folder and --split{instead}')


def _checked_line(path: Path, number: int, line: str) -> dict[str, Any]:
    """One line of a training file as its record: `query` a string, `pos` a non-empty list of strings, `neg` a list of
    strings, score lists as long as the passage lists they score, ids (when given) by the id rule."""
    try:
        record = json_object_line(path, number, line)
    except DataError as error:
        raise DataError(f"{error}; {_what_data_takes(path, line)}") from None
    if not isinstance(record.get("query"), str):
        raise (missing_field(record, f"{path}:{number}", ("query",), TRAINING_LAYOUT) if "query" not in record
               else DataError(f"{path}:{number}: field 'query' must be a string"))
    if not record["query"].strip():
        raise DataError(f"{path}:{number}: 'query' is empty; every example needs a query text")
    positives = _string_list(path, number, record, "pos", required=True)
    if not positives:
        raise DataError(f"{path}:{number}: 'pos' is empty; every query needs at least one positive passage")
    negatives = _string_list(path, number, record, "neg", required=False)
    _check_ids(path, number, record, positives, negatives)
    pos_scores = _score_list(path, number, record, "pos_scores", len(positives))
    neg_scores = _score_list(path, number, record, "neg_scores", len(negatives))
    if (pos_scores is None) != (neg_scores is None) and negatives:
        raise DataError(f"{path}:{number}: give both 'pos_scores' and 'neg_scores', or neither")
    return record


def passage_keys(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What identifies each passage of a line `read_training_records` gave, `pos`'s then `neg`'s: its id where the
    file gives ids (`pos_ids`, `neg_ids`), else its text."""
    if "pos_ids" in record:
        return record["pos_ids"], record.get("neg_ids", [])
    return record["pos"], record.get("neg", [])


def _keyed_texts(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(what identifies it, its text) of each passage of a line, `pos`'s then `neg`'s (`passage_keys`)."""
    positives, negatives = passage_keys(record)
    return list(zip((*positives, *negatives), (*record["pos"], *record.get("neg", [])), strict=True))


def _named(record: dict[str, Any], key: str) -> str:
    """A passage of `record` as a message names it: its text, or its id and text where the file gives ids."""
    if "pos_ids" not in record:
        return f"the passage {quoted(key)}"
    return f"the passage {quoted(key)} ({quoted(dict(_keyed_texts(record))[key])})"


def _check_roles(where: str, record: dict[str, Any]) -> None:
    """Each passage of a line (`passage_keys`) in one role with one teacher score: a passage both a positive and a
    negative of the query is refused, and one listed twice in a list with two scores (listed twice with one score,
    or without scores, it counts once)."""
    positives, negatives = passage_keys(record)
    both = set(positives).intersection(negatives)
    if both:
        key = next(key for key in positives if key in both)
        raise DataError(f"{where}: {_named(record, key)} is both in 'pos' and in 'neg': a passage is a positive or a "
                        "negative of its query, never both; remove it from one of them")
    for name, keys in (("pos", positives), ("neg", negatives)):
        scores: dict[str, float] = {}
        for key, score in zip(keys, record.get(f"{name}_scores", []), strict=False):
            if scores.setdefault(key, score) != score:
                raise DataError(f"{where}: {_named(record, key)} is listed twice in {name!r} with two teacher scores, "
                                f"{scores[key]!r} and {score!r}; list it once")


def _id_shaped(text: str) -> bool:
    """Whether a passage is shaped like a document id: one word holding an ASCII digit ('31715818', 'doc-12')."""
    return WHITESPACE.search(text) is None and _DIGIT.search(text) is not None


class _FilePassages:
    """A training file's passages, line after line: ids identify them where the first line gives them (then every
    line gives `pos_ids`, and `neg_ids` for its negatives), and an id names one text; each passage holds one role
    on its line (`_check_roles`); a file whose every passage is one word holding a digit, as a document id is, is
    refused (`check_texts`): `pos` and `neg` hold texts, and would be trained on as their digits."""

    def __init__(self, path: Path) -> None:
        self.path, self.first, self.by_id, self.id_shaped, self.sample = path, 0, False, True, ""
        self.id_texts: dict[str, tuple[str, int]] = {}

    def add(self, number: int, record: dict[str, Any]) -> None:
        where = f"{self.path}:{number}"
        self._check_ids_given(where, number, record)
        if self.by_id:
            self._check_id_texts(where, number, record)
        _check_roles(where, record)
        if self.id_shaped:
            self.id_shaped = all(map(_id_shaped, (*record["pos"], *record.get("neg", []))))

    def _check_ids_given(self, where: str, number: int, record: dict[str, Any]) -> None:
        given = "pos_ids" in record or "neg_ids" in record
        if not self.first:
            self.first, self.by_id, self.sample = number, given, record["pos"][0]
        if given != self.by_id:
            raise DataError(f"{where}: {'gives' if given else 'gives no'} 'pos_ids'/'neg_ids', where line "
                            f"{self.first} {'does not' if given else 'does'}; a file's passages are identified by "
                            "their ids on every line, or by their text on every line")
        for name, passages in (("pos_ids", "pos"), ("neg_ids", "neg")):
            if given and record.get(passages) and name not in record:
                raise DataError(f"{where}: gives no {name!r} for its {passages!r} passages; a line that gives "
                                "passage ids gives them for every passage")

    def _check_id_texts(self, where: str, number: int, record: dict[str, Any]) -> None:
        for key, text in _keyed_texts(record):
            first, line = self.id_texts.setdefault(key, (text, number))
            if first != text:
                raise DataError(f"{where}: the passage id {quoted(key)} names another text ({quoted(text)}) than at "
                                f"line {line} ({quoted(first)}); an id names one passage")

    def check_texts(self, lines: int) -> None:
        """Refuse a file (its first `lines` lines read) whose every passage is shaped like a document id."""
        if self.first and self.id_shaped:
            read = f"{lines:,} line{'s' * (lines != 1)}"
            raise DataError(f"{self.path}:{self.first}: {quoted(self.sample)}, as every passage of its {read}, is one "
                            "word holding a digit, as a document id is: 'pos' and 'neg' hold the passages' texts "
                            "(trained on as they are); give the texts (their ids in 'pos_ids' / 'neg_ids'), or a "
                            "BEIR / MS MARCO folder and --split")


def read_training_records(path: str | Path, limit: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every line of a training file (the first `limit` only, when given), each checked
    (`_checked_line`), a `query_id` given once, and its passages by the file's rules (`_FilePassages`)."""
    path = Path(path)
    query_ids = UniqueIds("query id")
    passages = _FilePassages(path)
    lines = 0
    for number, line in numbered_lines(path, limit=limit):
        record = _checked_line(path, number, line)
        if record.get("query_id") is not None:
            query_ids.add(record["query_id"], f"{path}:{number}")
        passages.add(number, record)
        lines += 1
        yield number, record
    passages.check_texts(lines)


class _PassageTable:
    """A training file's distinct passages in order of appearance, keyed by what identifies them (`passage_keys`)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.texts: list[str] = []
        self.by_id = False

    def _row(self, key: str, text: str) -> int:
        if key not in self.rows:
            self.rows[key] = len(self.texts)
            self.texts.append(text)
        return self.rows[key]

    def example(self, record: dict[str, Any]) -> TrainingExample:
        """The example of one line: the rows of its passages (each once), teacher scores by row (if any)."""
        self.by_id = "pos_ids" in record
        keys = passage_keys(record)
        positives = [self._row(key, text) for key, text in zip(keys[0], record["pos"], strict=True)]
        negatives = [self._row(key, text) for key, text in zip(keys[1], record.get("neg", []), strict=True)]
        scores = None
        if "pos_scores" in record:
            pairs = zip(positives + negatives, record["pos_scores"] + record.get("neg_scores", []), strict=True)
            scores = {row: float(score) for row, score in pairs}
        return TrainingExample(record["query"], list(dict.fromkeys(positives)), list(dict.fromkeys(negatives)),
                               scores, record.get("query_id") or "")


def load_training_file(path: str | Path) -> TrainingSet:
    """A training file (JSON lines, format above) as a TrainingSet: one row per passage (`passage_keys`), its ids
    the file's own where it gives them (else row numbers, never written)."""
    table = _PassageTable()
    examples = [table.example(record) for _, record in read_training_records(path)]
    if not examples:
        raise DataError(f"{path}: no training examples")
    ids = list(table.rows) if table.by_id else [str(row) for row in range(len(table.texts))]
    return TrainingSet(table.texts, ids, examples, str(path), ids_given=table.by_id)


def load_training_folder(folder: str | Path, split: str = "train") -> TrainingSet:
    """A BEIR / MS MARCO folder: every corpus passage (title and text), each judged query of `split` with its
    relevant documents (grade > 0) as positives and no negatives."""
    data = load_retrieval_set(Path(folder), split)
    ids = list(data.corpus)
    rows = {doc_id: row for row, doc_id in enumerate(ids)}
    examples = []
    for query_id, text in data.queries.items():
        positives = [rows[doc_id] for doc_id, grade in data.qrels[query_id].items() if grade > 0]
        if positives:
            examples.append(TrainingExample(text, positives, query_id=query_id))
    if not examples:
        raise DataError(f"{folder}: split {split!r} has no query with a relevant document")
    return TrainingSet([data.corpus[doc_id].joined() for doc_id in ids], ids, examples, f"{folder} ({split})")


def load_training_data(data: str | Path, split: str = "train") -> TrainingSet:
    """A training file, or a BEIR / MS MARCO folder and split."""
    return load_training_folder(data, split) if Path(data).is_dir() else load_training_file(data)


def example_record(data: TrainingSet, example: TrainingExample) -> dict[str, Any]:
    """The training-file record of one example: its query id when it has one, the passages' ids when the data gives
    them (`TrainingSet.ids_given`), its scores when it has them."""
    record: dict[str, Any] = {"query": example.query, "pos": [data.texts[r] for r in example.positives],
                              "neg": [data.texts[r] for r in example.negatives]}
    if example.query_id:
        record = {"query_id": example.query_id, **record}
    if data.ids_given:
        record["pos_ids"] = [data.ids[r] for r in example.positives]
        record["neg_ids"] = [data.ids[r] for r in example.negatives]
    if example.scores is not None:
        record["pos_scores"] = [example.scores[r] for r in example.positives]
        record["neg_scores"] = [example.scores[r] for r in example.negatives]
    return record


def write_training_records(records: list[dict[str, Any]], path: str | Path) -> None:
    """Write training records as JSON lines, atomically."""
    with atomic_path(Path(path)) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_training_file(data: TrainingSet, path: str | Path) -> None:
    """Write every example of `data` as a training file."""
    write_training_records([example_record(data, example) for example in data.examples], path)
