"""The rules of the fields read from data files: ids, typed JSON fields, and id lists.

Owns: the id rule (`check_id`, `id_problem`): an id is a JSON string (in JSON formats; a number is refused, since
its spelling is not kept: `4983.0`, `4.983e3`, lost leading zeros), not empty, without any whitespace (no space or
tab, which separate the fields of TREC runs and qrels; no character at which `str.splitlines` ends a line: line
feed, carriage return, form feed, vertical tab, the separators U+001C-U+001E, U+0085, U+2028, U+2029; so no leading
or trailing space either); the typed fields of a JSON record (`string_field`, `document_fields`: a `text` that is an
object, or a title that is a number, is refused, never turned into its repr); and reading a list of ids, one a
line (`read_id_lines`, the `ids.txt` of embeddings and index folders). Every reader of ids (corpora, queries, qrels,
TREC runs, training files, pre-training corpora, ids.txt) goes through here, so one rule holds everywhere and an id
read by one command is read alike by every other. Errors name the file and line. Does not own reading lines
(`retromae.runtime.lines`) or the formats' layouts (`retrieval_sets`, `corpus`, `training_groups`, `contrastive`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError
from retromae.runtime.lines import check_regular_file

LINE_END = b"\n"
WHITESPACE = re.compile(r"\s")  # exactly str.isspace's characters, which include every line end splitlines knows
CHARACTER_NAMES = {" ": "a space", "\t": "a tab", "\n": "a line feed", "\u00a0": "a no-break space",
                   "\u2028": "a line separator (U+2028)", "\u2029": "a paragraph separator (U+2029)"}
ID_RULE = ("an id holds no whitespace and no line break (TREC runs and qrels separate fields by whitespace; "
           "ids.txt holds one id a line)")
JSON_TYPES = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "an array",
              dict: "an object", type(None): "null"}


def json_type(value: Any) -> str:
    """The JSON name of `value`'s type ("a number", "an object", ...)."""
    return JSON_TYPES.get(type(value), type(value).__name__)


def id_problem(value: str) -> str | None:
    """What breaks the id rule in the string `value` ("is empty", "holds a space at character 3 (its end)"), or
    None when it keeps it."""
    if not value:
        return "is empty"
    found = WHITESPACE.search(value)
    if found is None:
        return None
    character, position = found.group(), found.start() + 1
    where = " (its start)" if position == 1 else " (its end)" if position == len(value) else ""
    name = CHARACTER_NAMES.get(character, f"the whitespace U+{ord(character):04X}")
    return f"holds {name} at character {position}{where}"


def check_id(value: Any, where: str, what: str = "id") -> str:
    """`value` when it is an id by the rule above; DataError naming `where` (FILE:LINE) and `what` otherwise."""
    if not isinstance(value, str):
        hint = ""
        if isinstance(value, int | float) and not isinstance(value, bool):
            example = int(value) if isinstance(value, float) and value.is_integer() else value
            hint = (f'; ids are strings: write "{example}", spelled as the qrels and runs spell it (JSON does not '
                    "keep a number's spelling: 4983, 4983.0 and 4.983e3 are one number)")
        raise DataError(f"{where}: {what} must be a string, got {json_type(value)} {value!r}{hint}")
    if not value:
        raise DataError(f"{where}: empty {what}")
    problem = id_problem(value)
    if problem is not None:
        raise DataError(f"{where}: {what} {value!r} {problem}; {ID_RULE}")
    return value


def string_field(record: dict, name: str, where: str, *, required: bool = True) -> str | None:
    """Field `name` of a JSON record as a string: absent or null is None (an error when `required`), any other type
    an error naming the type."""
    value = record.get(name)
    if value is None:
        if required:
            raise DataError(f"{where}: missing field {name!r}" if name not in record
                            else f"{where}: field {name!r} is null")
        return None
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r} must be a string, got {json_type(value)}")
    return value


def record_id(record: dict, where: str, *, required: bool) -> str | None:
    """The id of a JSON record (`_id`, else `id`), checked by the id rule; None when it has none and none is
    `required`."""
    for name in ("_id", "id"):
        if record.get(name) is not None:
            return check_id(record[name], where, f"field {name!r}")
    if required:
        raise DataError(f"{where}: missing field '_id' or 'id'")
    return None


def document_fields(record: Any, where: str, *, id_required: bool) -> tuple[str | None, str, str]:
    """(id, title, text) of one corpus record (a JSON line or a table row): `text` a string (required), `title` a
    string or null (optional), the id by `record_id`. The one reading of a corpus record, for retrieval corpora
    (`corpus.jsonl`, the id required) and pre-training corpora (the id optional) alike."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object with a 'text' field, got {json_type(record)}")
    text = string_field(record, "text", where)
    title = string_field(record, "title", where, required=False) or ""
    return record_id(record, where, required=id_required), title, text


def read_id_lines(path: Path) -> list[str]:
    """The ids of a file holding one id a line (ids.txt), split at line feeds only (never at the other characters
    `str.splitlines` knows); each checked by the id rule, an error naming the file and line."""
    path = Path(path)
    check_regular_file(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}:{data.count(LINE_END, 0, err.start) + 1}: invalid UTF-8") from None
    ids = text.split("\n")
    if ids[-1] == "":
        ids.pop()  # the line end of the last id
    if "" in ids or WHITESPACE.search(text.replace("\n", "")):  # rare: name the first bad line
        for number, value in enumerate(ids, start=1):
            check_id(value, f"{path}:{number}")
    return ids
