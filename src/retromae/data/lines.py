"""Reading line-based files with errors that name the file and the line.

Owns: decoding a UTF-8 file (gzip-compressed when it ends in .gz) into numbered lines, and parsing one line as
JSON. Every line-based reader (corpora, retrieval sets, training files, pairs) goes through here, so their errors
read alike: `FILE:LINE: what is wrong`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retromae.errors import DataError


def numbered_lines(path: Path, *, keep_blank: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its end-of-line) per line; blank lines only with `keep_blank`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the line") from None
            if keep_blank or line.strip():
                yield number, line


def parse_json_line(path: Path, number: int, line: str) -> Any:
    """The JSON value on one line of `path`."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{number}: malformed JSON ({err.msg} at column {err.colno})") from None


def json_object_line(path: Path, number: int, line: str) -> dict:
    """The JSON object on one line of `path`; any other JSON value is an error."""
    record = parse_json_line(path, number, line)
    if not isinstance(record, dict):
        raise DataError(f"{path}:{number}: expected a JSON object")
    return record
