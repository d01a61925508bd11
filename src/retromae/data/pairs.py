"""Reading a pairs file: JSON lines of {"query": str, "pos": str or [str, ...]} (and "neg" for supervised SimCSE),
what the contrastive pre-training objectives read with `--pairs`.

Owns `iter_pairs` and its checks (`FILE:LINE` errors naming the fields accepted, `PAIR_LAYOUT`). Kept apart from
`data.contrastive` (which imports torch) so that the check before the heavy work (`retromae.preflight`) reads a pairs
file's first lines with this very reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from retromae.data.fields import missing_field
from retromae.runtime.errors import DataError
from retromae.runtime.lines import numbered_lines, parse_json_line


def iter_pairs(path: Path, negatives: bool = False,
               limit: int | None = None) -> Iterator[tuple[str, list[str], list[str], str]]:
    """(query, positives, hard negatives, "file:line") for each line of a pairs file (the first `limit` only, when
    given); the negatives ("neg") are read, and required, only with `negatives`; other fields are ignored."""
    for number, line in numbered_lines(Path(path), limit=limit):
        where = f"{path}:{number}"
        record = parse_json_line(path, number, line)
        query, positives = _check_pair(record, where)
        yield query, positives, _check_negatives(record, where) if negatives else [], where


PAIR_LAYOUT = 'a pair is a JSON object {"query": str, "pos": str or [str, ...]} (optional: "neg")'


def _check_pair(record: object, where: str) -> tuple[str, list[str]]:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object with fields 'query' and 'pos'; {PAIR_LAYOUT}")
    missing = tuple(name for name in ("query", "pos") if name not in record)
    if missing:
        raise missing_field(record, where, missing, PAIR_LAYOUT)
    query = record["query"]
    if not isinstance(query, str) or not query.strip():
        raise DataError(f"{where}: field 'query' must be a non-empty string")
    return query, _texts(record["pos"], "pos", where)


def _check_negatives(record: dict, where: str) -> list[str]:
    """The hard negatives of a line: "neg" must be there; an empty list says this query has none."""
    if "neg" not in record:
        raise DataError(f"{where}: supervised SimCSE needs hard negatives: add a field 'neg' (a string or a list "
                        "of strings, e.g. the NLI contradictions; [] for a query without one), or train on "
                        "--corpus (unsupervised)")
    return [] if record["neg"] == [] else _texts(record["neg"], "neg", where)


def _texts(value: object, field: str, where: str) -> list[str]:
    """A field holding a string or a non-empty list of non-empty strings, as a list."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise DataError(f"{where}: field '{field}' must be a string or a non-empty list of strings")
    if not all(isinstance(text, str) and text.strip() for text in texts):
        raise DataError(f"{where}: every entry of '{field}' must be a non-empty string")
    return texts
