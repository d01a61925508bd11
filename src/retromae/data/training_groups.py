"""Fine-tuning data: queries with positive and negative passages, read from JSON lines or a BEIR folder.

Owns: `TrainingSet` (a table of distinct passages, and per query the rows of its positives and negatives, with
optional teacher scores), reading the training-file format

    {"query": str, "pos": [str, ...], "neg": [str, ...], "pos_scores": [float, ...], "neg_scores": [float, ...]}

(`neg` and the score lists optional; other fields such as `query_id` are kept by `read_training_records`),
reading a BEIR / MS MARCO folder and split (positives from the qrels, no negatives), and writing training
files. Passages of a file are identified by their text, those of a folder by their corpus id.
Does not own mining negatives (`retrieval.mining`), batching or tokenisation (`finetune`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retromae.data.corpus import CORPUS_NAMES
from retromae.data.fields import UniqueIds, check_id, missing_field
from retromae.data.retrieval_sets import load_retrieval_set
from retromae.runtime.errors import DataError
from retromae.runtime.io import atomic_path
from retromae.runtime.lines import finite_number, json_object_line, numbered_lines

TRAINING_LAYOUT = ('a training line is a JSON object {"query": str, "pos": [str, ...], "neg": [str, ...]} (optional: '
                   '"pos_scores", "neg_scores", "query_id", "pos_ids", "neg_ids")')


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
    """Distinct passages (`texts[row]`, `ids[row]`) and the training examples that point at them."""

    texts: list[str]
    ids: list[str]
    examples: list[TrainingExample]
    source: str = ""
    corpus_ids: bool = False  # `ids` are a data set's document ids (a folder's), not row numbers

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


def read_training_records(path: str | Path, limit: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every line of a training file (the first `limit` only, when given), checked: `query`
    a string, `pos` a non-empty list of strings, `neg` a list of strings, score lists as long as the passage lists
    they score, ids (when given) by the id rule, a `query_id` given once."""
    path = Path(path)
    query_ids = UniqueIds("query id")
    for number, line in numbered_lines(path, limit=limit):
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
        if record.get("query_id") is not None:
            query_ids.add(record["query_id"], f"{path}:{number}")
        pos_scores = _score_list(path, number, record, "pos_scores", len(positives))
        neg_scores = _score_list(path, number, record, "neg_scores", len(negatives))
        if (pos_scores is None) != (neg_scores is None) and negatives:
            raise DataError(f"{path}:{number}: give both 'pos_scores' and 'neg_scores', or neither")
        yield number, record


class _PassageTable:
    """Rows of distinct passages, keyed by text."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}

    def row(self, text: str) -> int:
        return self.rows.setdefault(text, len(self.rows))

    def texts(self) -> list[str]:
        return list(self.rows)


def _example(record: dict[str, Any], table: _PassageTable) -> TrainingExample:
    positives = [table.row(text) for text in record["pos"]]
    negatives = [table.row(text) for text in record.get("neg", [])]
    scores = None
    if "pos_scores" in record:
        pairs = zip(positives + negatives, record["pos_scores"] + record.get("neg_scores", []), strict=True)
        scores = {row: float(score) for row, score in pairs}
    own = set(positives)
    return TrainingExample(record["query"], list(dict.fromkeys(positives)),
                           [row for row in dict.fromkeys(negatives) if row not in own], scores,
                           record.get("query_id") or "")


def load_training_file(path: str | Path) -> TrainingSet:
    """A training file (JSON lines, format above) as a TrainingSet; passages with equal text share a row."""
    table = _PassageTable()
    examples = [_example(record, table) for _, record in read_training_records(path)]
    if not examples:
        raise DataError(f"{path}: no training examples")
    texts = table.texts()
    return TrainingSet(texts, [str(row) for row in range(len(texts))], examples, str(path))


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
    return TrainingSet([data.corpus[doc_id].joined() for doc_id in ids], ids, examples, f"{folder} ({split})",
                       corpus_ids=True)


def load_training_data(data: str | Path, split: str = "train") -> TrainingSet:
    """A training file, or a BEIR / MS MARCO folder and split."""
    return load_training_folder(data, split) if Path(data).is_dir() else load_training_file(data)


def example_record(data: TrainingSet, example: TrainingExample) -> dict[str, Any]:
    """The training-file record of one example (scores included when it has them)."""
    record: dict[str, Any] = {"query": example.query, "pos": [data.texts[r] for r in example.positives],
                              "neg": [data.texts[r] for r in example.negatives]}
    if example.query_id:
        record = {"query_id": example.query_id, **record,
                  "pos_ids": [data.ids[r] for r in example.positives],
                  "neg_ids": [data.ids[r] for r in example.negatives]}
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
