"""The rules of the fields read from data files: ids, typed JSON fields, and id lists.

Owns: the id rule (`check_id`, `id_problem`): an id is a JSON string (in JSON formats; a number is refused, since
its spelling is not kept: `4983.0`, `4.983e3`, lost leading zeros), not empty, of at most MAX_ID_CHARACTERS (1,000)
characters (ids are held in every table and run, and a 500 MB one took 2.7 GB), without any whitespace (no space or
tab, which separate the fields of TREC runs and qrels; no character at which `str.splitlines` ends a line: line
feed, carriage return, form feed, vertical tab, the separators U+001C-U+001E, U+0085, U+2028, U+2029; so no leading
or trailing space either); the typed fields of a JSON record (`string_field`, `document_fields`: a `text` that is an
object, or a title that is a number, is refused, never turned into its repr; `whole_number_field`: a count that is
text, a boolean or 3.0 is refused); and reading a list of ids, one a line (`read_id_lines`, the `ids.txt` of
embeddings and index folders). Every reader of ids (corpora, queries, qrels,
TREC runs, training files, pre-training corpora, ids.txt) goes through here, so one rule holds everywhere and an id
read by one command is read alike by every other. Also owns the fields a document or query may hold, in the layouts
people have (`document_fields`: BEIR `_id`/`title`/`text`, Pyserini `id`/`contents`; `tsv_columns`: MS MARCO
`id<TAB>[title<TAB>]text` lines with or without a header row naming the columns), every missing-field error naming
the fields accepted (`missing_field`), and the refusal of a repeated id (`repeated_id`, `UniqueIds`: an id given
twice in one input would stand for two texts, and one of them would vanish from every result), naming the file and
line of both occurrences. Errors name the file and line. Does not own reading lines (`retromae.runtime.lines`) or
the formats' layouts (`retrieval_sets`, `corpus`, `training_groups`, `contrastive`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from retromae.runtime.errors import DataError
from retromae.runtime.lines import check_regular_file, quoted
from retromae.runtime.options import NON_NEGATIVE, Domain

LINE_END = b"\n"
WHITESPACE = re.compile(r"\s")  # exactly str.isspace's characters, which include every line end splitlines knows
CHARACTER_NAMES = {" ": "a space", "\t": "a tab", "\n": "a line feed", "\u00a0": "a no-break space",
                   "\u2028": "a line separator (U+2028)", "\u2029": "a paragraph separator (U+2029)"}
# The most characters an id holds: the longest ids of public sets are Wikipedia titles (at most 255 bytes, KILT)
# and URLs; an id is held in every table, run and message that names its text.
MAX_ID_CHARACTERS = 1000
ID_RULE = ("an id holds no whitespace and no line break (TREC runs and qrels separate fields by whitespace; "
           f"ids.txt holds one id a line), and at most {MAX_ID_CHARACTERS:,} characters")
TEXT_FIELDS = ("text", "contents")  # a document's text: BEIR and retromae JSON lines; Pyserini
DOCUMENT_LAYOUTS = ("a document is a JSON object with its text in 'text' (BEIR: '_id', optional 'title', 'text') or "
                    "in 'contents' (Pyserini: 'id', 'contents')")
QUERY_LAYOUT = "a query is a JSON object with '_id' (or 'id') and 'text' (BEIR queries.jsonl)"
# The names a header row of a .tsv corpus or queries file may give its columns (compared in lower case). A first line
# whose first field is one of ID_COLUMNS is a header: a document or query with such an id is not told apart from one.
ID_COLUMNS = ("id", "_id", "docid", "doc_id", "doc-id", "pid", "qid", "query_id", "query-id", "corpus-id")
TEXT_COLUMNS = ("text", "contents", "passage", "query", "body")
TITLE_COLUMNS = ("title",)
TSV_LAYOUTS = {"corpus": "'id<TAB>text' or 'id<TAB>title<TAB>text'", "queries": "'id<TAB>text'"}
JSON_TYPES = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "an array",
              dict: "an object", type(None): "null"}


def json_type(value: Any) -> str:
    """The JSON name of `value`'s type ("a number", "an object", ...)."""
    return JSON_TYPES.get(type(value), type(value).__name__)


def id_problem(value: str) -> str | None:
    """What breaks the id rule in the string `value` ("is empty", "holds a space at character 3 (its end)", "is
    1,200 characters long"), or None when it keeps it."""
    if not value:
        return "is empty"
    if len(value) > MAX_ID_CHARACTERS:
        return f"is {len(value):,} characters long (an id holds at most {MAX_ID_CHARACTERS:,})"
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
        raise DataError(f"{where}: {what} must be a string, got {json_type(value)} {quoted(value)}{hint}")
    if not value:
        raise DataError(f"{where}: empty {what}")
    problem = id_problem(value)
    if problem is not None:
        raise DataError(f"{where}: {what} {quoted(value)} {problem}; {ID_RULE}")
    return value


def missing_field(record: dict, where: str, names: tuple[str, ...], layout: str) -> DataError:
    """The error for a record lacking all of `names`: the fields accepted (`layout`) and those the record holds."""
    held = ", ".join(quoted(name) for name in list(record)[:8]) or "none"
    wanted = " or ".join(repr(name) for name in names)
    return DataError(f"{where}: missing field {wanted}; {layout} (this one holds {held})")


def string_field(record: dict, name: str, where: str, *, required: bool = True,
                 layout: str = "") -> str | None:
    """Field `name` of a JSON record as a string: absent or null is None (an error when `required`, naming the
    fields accepted, `layout`), any other type an error naming the type."""
    value = record.get(name)
    if value is None:
        if required:
            if name not in record:
                raise missing_field(record, where, (name,), layout or f"the record needs a field {name!r}")
            raise DataError(f"{where}: field {name!r} is null")
        return None
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r} must be a string, got {json_type(value)}")
    return value


def whole_number_field(record: dict, name: str, where: str, domain: Domain = NON_NEGATIVE) -> int:
    """Field `name` of a JSON record as a whole number in `domain`: a JSON integer (not a boolean, not 3.0, not the
    text "3"); DataError naming `where` and the field when it is missing or is anything else."""
    if name not in record:
        raise missing_field(record, where, (name,), f"the record needs a field {name!r}")
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, int) or not domain.holds(value):
        raise DataError(f"{where}: field {name!r} is {quoted(value)}; it must be a whole number and "
                        f"{domain.describe()}")
    return value


def record_id(record: dict, where: str, *, required: bool, layout: str = DOCUMENT_LAYOUTS) -> str | None:
    """The id of a JSON record (`_id`, else `id`), checked by the id rule; None when it has none and none is
    `required`."""
    for name in ("_id", "id"):
        if record.get(name) is not None:
            return check_id(record[name], where, f"field {name!r}")
    if required:
        raise missing_field(record, where, ("_id", "id"), layout)
    return None


def document_fields(record: Any, where: str, *, id_required: bool) -> tuple[str | None, str, str]:
    """(id, title, text) of one corpus record (a JSON line or a table row): the text in `text` or, as Pyserini
    writes it, `contents` (one of them, a string), `title` a string or null (optional), the id by `record_id`. The
    one reading of a corpus record, for retrieval corpora (the id required) and pre-training corpora (the id
    optional) alike."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object; {DOCUMENT_LAYOUTS}; got {json_type(record)}")
    given = [name for name in TEXT_FIELDS if name in record]
    if not given:
        raise missing_field(record, where, TEXT_FIELDS, DOCUMENT_LAYOUTS)
    if len(given) > 1:
        raise DataError(f"{where}: both 'text' and 'contents' given; {DOCUMENT_LAYOUTS}: give one of them")
    text = string_field(record, given[0], where)
    title = string_field(record, "title", where, required=False) or ""
    return record_id(record, where, required=id_required), title, text


def tsv_columns(path: Path, number: int, line: str, kind: str) -> tuple[dict[str, int], bool]:
    """(column of "id", "text" and, in a corpus, "title"; whether `line` is a header row) for a .tsv corpus or
    queries file (`kind`), from its first line: a header names its columns (its first field one of ID_COLUMNS, every
    field a known name), else a corpus has 'id<TAB>text' or 'id<TAB>title<TAB>text' and queries 'id<TAB>text'."""
    fields = [field.strip() for field in line.split("\t")]
    if fields[0].lower() not in ID_COLUMNS:
        count = len(fields)
        if kind == "corpus" and count == 3:
            return {"id": 0, "title": 1, "text": 2}, False
        return {"id": 0, "text": 1}, False
    roles = {**dict.fromkeys(ID_COLUMNS, "id"), **dict.fromkeys(TEXT_COLUMNS, "text"),
             **(dict.fromkeys(TITLE_COLUMNS, "title") if kind == "corpus" else {})}
    columns: dict[str, int] = {}
    for position, name in enumerate(fields):
        role = roles.get(name.lower())
        if role is None or role in columns:
            problem = f"a second {role} column" if role else "no column a .tsv " + kind + " file holds"
            raise DataError(f"{path}:{number}: a header row (its first column {quoted(fields[0])} names the ids) "
                            f"names {quoted(name)}, {problem}; a header names an id ({', '.join(ID_COLUMNS)}), a text "
                            f"({', '.join(TEXT_COLUMNS)})" + (" and optionally a title" if kind == "corpus" else ""))
        columns[role] = position
    if "text" not in columns:
        raise DataError(f"{path}:{number}: a header row names no text column ({', '.join(TEXT_COLUMNS)})")
    return columns, True


def tsv_fields(path: Path, number: int, line: str, columns: dict[str, int], kind: str) -> tuple[str, str, str]:
    """(id, title, text) of one line of a .tsv corpus or queries file laid out as `tsv_columns` decided."""
    fields = line.split("\t")
    if len(fields) != max(columns.values()) + 1:
        raise DataError(f"{path}:{number}: expected {TSV_LAYOUTS[kind]}, found {len(fields)} tab-separated fields "
                        f"(as many as the file's first line: a .tsv {kind} file holds {TSV_LAYOUTS[kind]} lines, "
                        "after an optional header row naming the columns)")
    title = fields[columns["title"]] if "title" in columns else ""
    return fields[columns["id"]].strip(), title, fields[columns["text"]]


def repeated_id(value: str, where: str, first: str, what: str = "id") -> DataError:
    """The refusal of an id met again at `where` (FILE:LINE) after `first` (FILE:LINE of its first occurrence)."""
    return DataError(f"{where}: {what} {quoted(value)} was given before, at {first}; each {what} names one text (a "
                     "repeated one would stand for two, and one of them would vanish from every result): make them "
                     "unique")


class UniqueIds:
    """Ids met so far and where (FILE:LINE, or a row); `add` refuses one met before (`repeated_id`)."""

    def __init__(self, what: str = "id") -> None:
        self.what, self.places = what, {}

    def add(self, value: str, where: str) -> None:
        first = self.places.setdefault(value, where)
        if first != where:
            raise repeated_id(value, where, first, self.what)


def read_id_lines(path: Path) -> list[str]:
    """The ids of a file holding one id a line (ids.txt), split at line feeds only (never at the other characters
    `str.splitlines` knows); each checked by the id rule (its length limit bounds a line), an error naming the file
    and line."""
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
    if "" in ids or WHITESPACE.search(text.replace("\n", "")) \
            or max(map(len, ids), default=0) > MAX_ID_CHARACTERS:  # rare: name the first bad line
        for number, value in enumerate(ids, start=1):
            check_id(value, f"{path}:{number}")
    if len(set(ids)) != len(ids):  # rare: name both lines of the first repeated id
        seen = UniqueIds()
        for number, value in enumerate(ids, start=1):
            seen.add(value, f"{path}:{number}")
    return ids
