"""Reading line-based files with errors that name the file and the line.

Owns: decoding a UTF-8 file (gzip-compressed when it ends in .gz) into numbered lines, parsing one line as
JSON, reading a whole JSON file (`read_json_file`, the one reader of the JSON files in run and model folders),
reading a line too long to hold in pieces (`numbered_line_pieces`), reading an appended JSON-lines log whose
last record a kill may have cut (`appended_records`), and refusing, before a byte is read, a path that is not a
regular file (`check_regular_file`: a FIFO would block, `/dev/zero` never end). Every line-based reader (corpora,
retrieval sets, training files, pairs, STS, runs) goes through here, so their errors read alike: `FILE:LINE: what
is wrong`, and so they all accept the same text:

- a UTF-8 byte-order mark at the start of the file is skipped, and CRLF (Windows) line ends read as LF;
- a number must be finite: JSON's NaN, Infinity and numbers too large for a float (1e999) are refused where the
  line is parsed, and a number read from a text field goes through `finite_number`, so no NaN or infinity enters
  from a file (teacher scores, grades, similarity scores, run scores);
- control characters are not kept: NUL and every other C0 control but tab (a field separator) and newline
  (inside JSON strings), and DEL, become a space, in raw lines and in JSON strings alike (`clean_text`), so a
  stray NUL from a binary export neither ends a string early in a tokenizer nor makes a JSON line invalid.
"""

from __future__ import annotations

import codecs
import gzip
import itertools
import json
import math
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError

BOM = "\ufeff"
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")  # C0 but tab and newline, and DEL


FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(path: Path) -> str | None:
    """What `path` is when it is not a regular file ("a named pipe (FIFO)", "a character device", ...; symbolic
    links followed), or None for a regular file; "missing" when nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in FILE_KINDS if test(mode)), "not a regular file")


def check_regular_file(path: Path, what: str = "file", *, missing_ok: bool = False) -> None:
    """DataError naming `path` unless a regular file is there (or nothing, with `missing_ok`): a FIFO would block
    until a writer comes, a character device such as /dev/zero would never end, and commands read their inputs more
    than once (to fingerprint them, to read them); so no reader opens what is not a regular file."""
    kind = file_kind(Path(path))
    if kind is None or (kind == "missing" and missing_ok):
        return
    if kind == "missing":
        raise DataError(f"{path}: no such {what}")
    raise DataError(f"{path}: is {kind}, not a regular {what}")


def clean_text(text: str) -> str:
    """`text` with each control character (NUL, CR, ...; not tab or newline) replaced by a space."""
    return CONTROL_CHARACTERS.sub(" ", text)


def _clean_value(value: Any) -> Any:
    """A parsed JSON value with `clean_text` applied to every string in it."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _clean_value(item) for key, item in value.items()}
    return value


def numbered_lines(path: Path, *, keep_blank: bool = False, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, cleaned line without its end-of-line) per line; blank lines only with `keep_blank`;
    the first `limit` lines only when given (a check of a file's head before the work)."""
    path = Path(path)
    check_regular_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(itertools.islice(handle, limit), start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the line") from None
                line = clean_text(line.removeprefix(BOM) if number == 1 else line)
                if keep_blank or line.strip():
                    yield number, line
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:  # a cut download or copy: name it, not a traceback
        raise DataError(f"{path}: truncated or damaged gzip file after line {number} ({err})") from None


def numbered_line_pieces(path: Path, piece_bytes: int) -> Iterator[tuple[int, str, bool]]:
    """(1-based line number, cleaned text, whether it ends the line) per piece of at most `piece_bytes` bytes of
    every line, blank ones too: `numbered_lines` for a file whose lines may be too long to hold whole (a byte-order
    mark, line ends and control characters handled alike; a CR just before a piece's end becomes a space)."""
    path = Path(path)
    check_regular_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    decoder = codecs.getincrementaldecoder("utf-8")()
    number, offset, ended = 1, 0, True  # offset: bytes of the current line before this piece
    try:
        with opener(path, "rb") as handle:
            while raw := handle.readline(piece_bytes):
                ended = raw.endswith(b"\n")
                text = _decode(decoder, raw, ended, path, number, offset)
                text = text.removeprefix(BOM) if number == 1 and offset == 0 else text
                yield number, clean_text(text.rstrip("\r\n") if ended else text), ended
                number, offset = (number + 1, 0) if ended else (number, offset + len(raw))
            if not ended:  # a last line without its line end
                yield number, _decode(decoder, b"", True, path, number, offset), True
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: truncated or damaged gzip file after line {number - 1} ({err})") from None


def _decode(decoder: codecs.IncrementalDecoder, raw: bytes, final: bool, path: Path, number: int,
            offset: int) -> str:
    """The text of the bytes `raw` of line `number` (a character cut at the piece's end waits for the next)."""
    try:
        return decoder.decode(raw, final=final)
    except UnicodeDecodeError as err:
        raise DataError(f"{path}:{number}: invalid UTF-8 at byte {offset + err.start} of the line") from None


class NonFiniteNumber(ValueError):
    """A JSON number that is not a finite float (NaN, Infinity, 1e999); its text is the message."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(text)
    return value


def _refuse_constant(text: str) -> float:
    raise NonFiniteNumber(text)


def loads_finite(text: str) -> Any:
    """`json.loads(text)`, refusing NaN, Infinity and numbers beyond a float: `NonFiniteNumber` naming the number
    (every JSON we read: data lines, model folders' files, checkpoints' state)."""
    return json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant)


JSON_KINDS = {dict: "an object", list: "an array"}


def read_json_file(path: Path, kind: type = dict) -> Any:
    """The JSON value of a whole file (a run folder's info, manifest or results, a model folder's config), read as a
    possibly hostile file is: DataError naming the file when it is not UTF-8 JSON, holds NaN or an infinity, or its
    value is not a `kind` (`dict`: an object, `list`: an array, `object`: anything)."""
    path = Path(path)
    check_regular_file(path, missing_ok=True)  # a missing file: the OSError names it (exit 1)
    try:
        value = loads_finite(path.read_text(encoding="utf-8"))
    except NonFiniteNumber as err:
        raise DataError(f"{path}: the number {err} is not finite (NaN or infinite)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(value, kind):
        raise DataError(f"{path}: holds a JSON {type(value).__name__}, not {JSON_KINDS.get(kind, kind.__name__)}")
    return value


def parse_json_line(path: Path, number: int, line: str) -> Any:
    """The JSON value on one line of `path`, its strings cleaned (`clean_text`); a non-finite number is an error."""
    try:
        return _clean_value(loads_finite(line))
    except NonFiniteNumber as err:
        raise DataError(f"{path}:{number}: the number {err} is not finite (NaN or infinite)") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{number}: malformed JSON ({err.msg} at column {err.colno})") from None


def finite_number(path: Path, number: int, value: Any, what: str) -> float:
    """`value` (a field's text, or a parsed JSON number) as a finite float; DataError naming the file and line when
    it is not a number, or is NaN or infinite."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{path}:{number}: {what} {value!r} is not a number") from None
    except OverflowError:  # an integer beyond a float's range
        result = math.inf
    if not math.isfinite(result):
        shown = value if len(str(value)) <= 20 else f"{str(value)[:12]}... ({len(str(value))} characters)"
        raise DataError(f"{path}:{number}: {what} {shown!r} is not finite (NaN, infinite or beyond a float's range)")
    return result


def json_object_line(path: Path, number: int, line: str) -> dict:
    """The JSON object on one line of `path`; any other JSON value is an error."""
    record = parse_json_line(path, number, line)
    if not isinstance(record, dict):
        raise DataError(f"{path}:{number}: expected a JSON object")
    return record


def appended_records(path: Path) -> tuple[list[Any], int | None]:
    """The JSON values of a file written by appending one line per record (metrics.jsonl), and the number of its
    last line when a kill or a full disk cut that record (no line end and not valid JSON: it is left out), else
    None. Any other malformed line is an error naming it."""
    path = Path(path)
    check_regular_file(path, missing_ok=True)
    with path.open("rb") as handle:
        handle.seek(0, 2)
        whole = handle.tell() == 0 or (handle.seek(-1, 2) and handle.read(1) == b"\n")
    entries = list(numbered_lines(path))
    records = []
    for index, (number, line) in enumerate(entries):
        try:
            records.append(parse_json_line(path, number, line))
        except DataError:
            if index == len(entries) - 1 and not whole:
                return records, number
            raise
    return records, None
