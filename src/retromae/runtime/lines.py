"""Reading line-based files with errors that name the file and the line.

Owns: decoding a UTF-8 file (gzip-compressed when it ends in .gz) into numbered lines, parsing one line as
JSON, reading a whole JSON file (`read_json_file`, the one reader of the JSON files in run and model folders),
reading a line too long to hold in pieces (`numbered_line_pieces`), reading an appended JSON-lines log whose
last record a kill may have cut (`appended_records`), and refusing, before a byte is read, a path that is not a
regular file (`check_regular_file`: a FIFO would block, `/dev/zero` never end), and, for the files retromae keeps for
itself in a folder it manages (locks, run markers, a checkpoint's files), anything but a regular file there, a
symbolic link not followed (`check_own_file`, `open_own_file`). Every line-based reader (corpora,
retrieval sets, training files, pairs, STS, runs) goes through here, so their errors read alike: `FILE:LINE: what
is wrong`, and so they all accept the same text:

- a UTF-8 byte-order mark at the start of the file is skipped, and CRLF (Windows) line ends read as LF;
- a number must be finite: JSON's NaN, Infinity and numbers too large for a float (1e999) are refused where the
  line is parsed, and a number read from a text field goes through `finite_number` (`integer_field`), so no NaN or
  infinity enters from a file (teacher scores, grades, similarity scores, run scores); a text field's number is in
  plain ASCII decimal notation (not `1_000`, `٣` or `１`, which Python's int() and float() take);
- JSON text is parsed in one place, `loads_finite`, which refuses, besides what is not JSON, what the parser cannot
  turn into a value or what no reader takes: an integer of thousands of digits, arrays or objects nested more than
  `MAX_NESTING` deep (the parser's recursion), a key given twice in one object (which value was meant?), and a lone
  surrogate from a `\\ud800` escape (not Unicode text: it would crash the first write of it as UTF-8);
- control characters are not kept: NUL and every other C0 control but tab (a field separator) and newline
  (inside JSON strings), and DEL, become a space, in raw lines and in JSON strings alike (`clean_text`), so a
  stray NUL from a binary export neither ends a string early in a tokenizer nor makes a JSON line invalid;
- a line is bounded: at most LINE_BYTES (64 MiB) where a line holds texts, SHORT_LINE_BYTES (64 KiB) in the
  formats of ids and numbers (qrels, TREC runs, times.txt); a longer one is refused naming it, read no further than
  the bound (gzip makes a line's length independent of the file's size: a 0.5 MB file can hold a 500 MB line);
- a message shows an id or a text taken from a file through `quoted` (`shortened` to SHOWN_CHARACTERS), never whole;
  a path it names (a file found by listing a folder, or recorded in index.json) is shown as any message text is,
  a control or bidirectional character written as its escape (`runtime.errors.printable`, the text of every error:
  `FILE:LINE: ` stays on one line whatever the file is called).
"""

from __future__ import annotations

import codecs
import collections
import functools
import gzip
import itertools
import json
import math
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from retromae.runtime.errors import DataError

BOM = "\ufeff"
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")  # C0 but tab and newline, and DEL
MAX_NESTING = 100  # levels of arrays and objects in one JSON value: no file we read needs more than a few
# The longest line a reader takes (`numbered_lines`), its line feed aside: gzip makes a line's length independent
# of the file's size, and a line is held about five times over while it is decoded, cleaned and parsed. A line
# holding texts (a corpus document, a query, a training group's passages, an STS pair): 64 MiB, about ten million
# words, several times the longest novel (In Search of Lost Time: 1.3 million words). A line of ids and numbers
# (qrels, TREC runs, a run folder's times.txt): 64 KiB, three ids at their longest (`data.fields.MAX_ID_CHARACTERS`,
# 4 bytes a character) with room to spare.
LINE_BYTES = 64 << 20
SHORT_LINE_BYTES = 64 << 10
SHOWN_CHARACTERS = 80  # the most of an id or a text from a file that a message shows (`quoted`)
SURROGATE = re.compile("[\ud800-\udfff]")  # half a UTF-16 pair: not Unicode text, and no UTF-8 can hold it
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how JSON text spells one
# Numbers in text fields (qrels grades, run scores, STS scores): plain ASCII decimal notation, spaces around allowed;
# int() and float() would also take `1_000`, Arabic-Indic `٣` or fullwidth `１`. NaN and infinities are spelled
# as float() spells them, to be refused as not finite.
INTEGER_TEXT = re.compile(r" *[+-]?[0-9]+ *")
NUMBER_TEXT = re.compile(r" *[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)? *")
NON_FINITE_TEXT = re.compile(r" *[+-]?(nan|inf|infinity) *", re.IGNORECASE | re.ASCII)
PLAIN_NOTATION = "plain decimal notation: ASCII digits, a sign, a point, an exponent"


FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(path: Path, *, follow_links: bool = True) -> str | None:
    """What `path` is when it is not a regular file ("a named pipe (FIFO)", "a character device", ...; symbolic
    links followed, or with `follow_links` False "a symbolic link (to TARGET)"), or None for a regular file;
    "missing" when nothing is there."""
    try:
        mode = os.stat(path, follow_symlinks=follow_links).st_mode
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)})"
    return _mode_kind(mode)


def _mode_kind(mode: int) -> str | None:
    """What a file of mode `mode` is (`FILE_KINDS`), or None for a regular file."""
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


def check_own_file(path: Path) -> None:
    """DataError naming `path` and what is there unless a regular file or nothing is, a symbolic link not followed:
    a file retromae writes for itself in a folder it manages and reads back (an output's lock, a run marker, a
    checkpoint's files) is only ever a regular file it made, and anything else was put there: a link would send the
    write of a lock to another file (truncating it) or read one from elsewhere, a FIFO would block the command."""
    kind = file_kind(Path(path), follow_links=False)
    if kind is not None and kind != "missing":
        raise _not_own_file(path, kind)


def _not_own_file(path: Path, kind: str) -> DataError:
    return DataError(f"{path}: is {kind}, not a regular file; retromae writes this file itself: remove it")


def open_own_file(path: Path, flags: int) -> int:
    """A descriptor of the file `path` (`check_own_file`), opened with `flags` (`os.O_CREAT` makes it 0644 less the
    umask) never through a symbolic link nor waiting (`O_NOFOLLOW`, `O_NONBLOCK`), and checked again once open (a
    FIFO put there meanwhile opens at once with `O_NONBLOCK`, and is refused)."""
    check_own_file(path)
    descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    kind = _mode_kind(os.fstat(descriptor).st_mode)
    if kind is not None:
        os.close(descriptor)
        raise _not_own_file(path, kind)
    return descriptor


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


def numbered_lines(path: Path, *, keep_blank: bool = False, limit: int | None = None,
                   line_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, cleaned line without its end-of-line) per line; blank lines only with `keep_blank`;
    the first `limit` lines only when given (a check of a file's head before the work). A line longer than
    `line_bytes` bytes (LINE_BYTES when not given; SHORT_LINE_BYTES for the formats of ids and numbers) is an error
    naming it, read no further than the bound."""
    path = Path(path)
    check_regular_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    bound = LINE_BYTES if line_bytes is None else line_bytes
    number = 0
    try:
        with opener(path, "rb") as handle:
            lines = iter(functools.partial(handle.readline, bound + 1), b"")
            for number, raw in enumerate(itertools.islice(lines, limit), start=1):
                if len(raw) > bound and not raw.endswith(b"\n"):
                    raise DataError(f"{path}:{number}: the line is longer than {bound:,} bytes, the most a line of "
                                    "this file may hold")
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
    """The text of the bytes `raw` of line `number`, which start at byte `offset` of the line (a character cut at the
    piece's end waits for the next: an error's position counts from the first byte the decoder still holds)."""
    held = len(decoder.getstate()[0])
    try:
        return decoder.decode(raw, final=final)
    except UnicodeDecodeError as err:
        raise DataError(f"{path}:{number}: invalid UTF-8 at byte {offset - held + err.start} of the line") from None


class UnreadableData(ValueError):
    """Text a parser could not turn into a value a reader takes: a number not finite or too long to read, arrays and
    objects nested too deep, a key given twice, a lone surrogate; its message says which, to follow `FILE:LINE: `."""


def _cut(text: str, size: int) -> str:
    """`text` in at most about `size` characters: a longer one is named by its start and length."""
    return text if len(text) <= size else f"{text[:size - 8]}... ({len(text)} characters)"


def shortened(text: str, size: int = 20) -> str:
    """`text` as a refusal shows it unquoted: `_cut` to `size` (a 5,000-digit number is named by its start and
    length), a lone surrogate written as its escape (`\\ud800`), so that the message can be printed."""
    return _cut(text, size).encode("utf-8", "backslashreplace").decode("utf-8")


def quoted(value: Any, size: int = SHOWN_CHARACTERS) -> str:
    """How every message shows an id or a text taken from a file (or any JSON value read from one): quoted as repr
    quotes it, `_cut` to `size` characters, so that an id of megabytes never fills a terminal or a log. A lone
    surrogate (a byte that is not UTF-8, read through surrogateescape) is shown once as repr escapes it (`\\udcff`),
    as every character repr does not print: the quoted text reads back (`ast.literal_eval`) as the value."""
    if isinstance(value, str):
        return repr(_cut(value, size))
    return shortened(repr(value), size)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _refuse_constant(text)
    return value


def _refuse_constant(text: str) -> NoReturn:
    raise UnreadableData(f"the number {shortened(text)} is not finite (NaN or infinite)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of `pairs`; UnreadableData naming a key given twice (which value would be meant?)."""
    mapping = dict(pairs)
    if len(mapping) < len(pairs):
        counts = collections.Counter(key for key, _ in pairs)
        twice = next(key for key, _ in pairs if counts[key] > 1)
        raise UnreadableData(f"{shortened(twice)} given twice")  # as config files say it
    return mapping


def check_nesting(value: Any) -> None:
    """UnreadableData when the arrays and objects (lists and mappings) of a parsed JSON or YAML `value` nest more
    than MAX_NESTING levels deep, or hold themselves (a YAML alias can make a list its own item)."""
    _check_level(value, 1, {})


def _check_level(value: Any, level: int, reached: dict[int, int]) -> None:
    """`check_nesting` of `value` at `level`; a container shared by YAML aliases is walked again only when it is
    reached deeper than before (`reached`: id → level), so a few lines of aliases standing for a billion items are
    walked in a few steps."""
    if reached.get(id(value), 0) >= level:
        return
    reached[id(value)] = level
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        if isinstance(item, dict | list):
            if level >= MAX_NESTING:
                raise UnreadableData(f"arrays or objects nested more than {MAX_NESTING} levels deep")
            _check_level(item, level + 1, reached)


def _check_unicode(value: Any, field: str) -> None:
    """UnreadableData naming the first field (`metadata.title`, `neg[2]`) or key of `value` that holds a lone
    surrogate: a code point of half a UTF-16 pair, which no text may hold (it cannot be written out as UTF-8)."""
    if isinstance(value, str) and SURROGATE.search(value):
        raise UnreadableData(f"field {quoted(field or '(the value)', 20)} is not Unicode text: it holds a lone "
                             "surrogate (a JSON \\ud800-\\udfff escape not paired as UTF-16)")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and SURROGATE.search(key):
            raise UnreadableData(f"the key '{shortened(key)}' is not Unicode text: it holds a lone surrogate")
        _check_unicode(item, f"{field}[{key}]" if isinstance(key, int) else f"{field}.{key}" if field else key)


def loads_finite(text: str) -> Any:
    """`json.loads(text)`, the one JSON parser of files we read (data lines, model and run folders' files,
    checkpoints' state, config files): UnreadableData saying what is wrong for NaN, Infinity and numbers beyond a
    float, an integer too long to read (more than `sys.get_int_max_str_digits()` digits), arrays and objects nested
    more than MAX_NESTING levels deep, a key given twice in one object and a string or key holding a lone surrogate
    (a `\\ud800` escape); json.JSONDecodeError for text that is not JSON."""
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_refuse_constant,
                           object_pairs_hook=_unique_keys)
    except RecursionError:
        raise UnreadableData(f"arrays or objects nested more than {MAX_NESTING} levels deep") from None
    except (UnreadableData, json.JSONDecodeError):
        raise
    except ValueError:  # int(): more digits than Python converts
        raise UnreadableData(f"a number of more than {sys.get_int_max_str_digits()} digits") from None
    check_nesting(value)
    if SURROGATE_ESCAPE.search(text):  # the only way a lone surrogate enters: the text itself is strict UTF-8
        _check_unicode(value, "")
    return value


JSON_KINDS = {dict: "an object", list: "an array"}


def read_json_file(path: Path, kind: type = dict) -> Any:
    """The JSON value of a whole file (a run folder's info, manifest or results, a model folder's config), read as a
    possibly hostile file is: DataError naming the file when it is not UTF-8 JSON, `loads_finite` refuses it, or its
    value is not a `kind` (`dict`: an object, `list`: an array, `object`: anything)."""
    path = Path(path)
    check_regular_file(path, missing_ok=True)  # a missing file: the OSError names it (exit 1)
    try:
        value = loads_finite(path.read_text(encoding="utf-8"))
    except UnreadableData as err:
        raise DataError(f"{path}: {err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(value, kind):
        raise DataError(f"{path}: holds a JSON {type(value).__name__}, not {JSON_KINDS.get(kind, kind.__name__)}")
    return value


def parse_json_line(path: Path, number: int, line: str) -> Any:
    """The JSON value on one line of `path`, its strings cleaned (`clean_text`); what `loads_finite` refuses (a
    non-finite number, a key given twice, a lone surrogate, ...) is an error naming the file and line."""
    try:
        return _clean_value(loads_finite(line))
    except UnreadableData as err:
        raise DataError(f"{path}:{number}: {err}") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{number}: malformed JSON ({err.msg} at column {err.colno})") from None


def finite_number(path: Path, number: int, value: Any, what: str) -> float:
    """`value` (a field's text, or a parsed JSON number) as a finite float; DataError naming the file, line and
    `what` when it is not a number (a text only in plain decimal notation, `NUMBER_TEXT`), or is NaN or infinite."""
    if isinstance(value, str) and not (NUMBER_TEXT.fullmatch(value) or NON_FINITE_TEXT.fullmatch(value)):
        raise DataError(f"{path}:{number}: {what} {quoted(value, 20)} is not a number ({PLAIN_NOTATION})")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{path}:{number}: {what} {quoted(value)} is not a number") from None
    except OverflowError:  # an integer beyond a float's range
        result = math.inf
    if not math.isfinite(result):
        raise DataError(f"{path}:{number}: {what} {quoted(str(value), 20)} is not finite (NaN, infinite or beyond a "
                        "float's range)")
    return result


def integer_field(path: Path, number: int, text: str, what: str, *, hint: str = "") -> int:
    """The integer a text field spells in plain decimal notation (`INTEGER_TEXT`, where int() would also take
    `1_000`, `٣` or `１`), within a float's range; DataError naming the file, line and `what` (then `hint`, when
    given, in place of the rule)."""
    if not INTEGER_TEXT.fullmatch(text):
        raise DataError(f"{path}:{number}: {what} {quoted(text, 20)} is not an integer"
                        f"{hint or ' (ASCII digits 0-9, optionally signed)'}")
    finite_number(path, number, text, what)  # a 400-digit grade would overflow every sum of gains
    return int(text)


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
    records, torn = numbered_records(path)
    return [record for _, record in records], torn


def numbered_records(path: Path) -> tuple[list[tuple[int, Any]], int | None]:
    """`appended_records` with each record's line number: (number, value) pairs."""
    path = Path(path)
    check_regular_file(path, missing_ok=True)
    with path.open("rb") as handle:
        handle.seek(0, 2)
        whole = handle.tell() == 0 or (handle.seek(-1, 2) and handle.read(1) == b"\n")
    entries = list(numbered_lines(path))
    records = []
    for index, (number, line) in enumerate(entries):
        try:
            records.append((number, parse_json_line(path, number, line)))
        except DataError:
            if index == len(entries) - 1 and not whole:
                return records, number
            raise
    return records, None
