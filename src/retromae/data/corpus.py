"""Reading pre-training corpora as a stream of documents.

Owns: the corpus formats (.txt, JSON lines, .tsv, .parquet, a folder, a Hugging Face dataset) and their errors,
each naming the file and line (or row); the one rule of what a corpus argument may name, for every command
(`corpus_files`: a file, or a folder holding one corpus file by name, `CORPUS_NAMES`, or else corpus files: those
a file named alone is read as, hidden ones skipped, `folder_files`), read alike by the retrieval readers
(`retrieval_sets.load_corpus`); that several corpus arguments never reach one file twice (`corpus_sources`); the
rule by which a folder stands for the file of a role by its name, one file per role (`named_file`: a corpus
folder's corpus file, a retrieval set's queries and qrels); and the refusal of a corpus without a document
(`empty_corpus`). Does not own tokenisation (see `token_store`) and never imports torch.
Every reader streams: memory does not grow with the size of the file. `iter_corpus_pieces` gives the same
documents as text pieces of a bounded size, and reads a `.txt` file of one document per line in pieces too, so
that memory does not grow with the length of one document either (the token store reads through it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retromae.data.fields import document_fields, tsv_columns, tsv_fields
from retromae.data.long_texts import last_cut
from retromae.runtime.console import notice
from retromae.runtime.errors import DataError
from retromae.runtime.input_files import HF_PREFIX, hidden, parse_hf_source, read_once
from retromae.runtime.lines import check_regular_file, clean_text, numbered_line_pieces, numbered_lines, parse_json_line
from retromae.runtime.options import check_listed_name

JSON_SUFFIXES = (".jsonl", ".json")
CORPUS_SUFFIXES = (".txt", *JSON_SUFFIXES, ".tsv", ".parquet")
# What wraps a corpus file whole (`a.jsonl.gz`, `a.jsonl.zst`): in a folder, such a file is a corpus file, read as it
# would be named alone or refused (`folder_files`), never skipped
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".lzma", ".br", ".zip", ".7z")
# The corpus file of a retrieval set's folder (BEIR; MS MARCO; a .tsv one of ours), each also gzip-compressed: a
# folder holding one of them stands for it (its queries and qrels are never read as documents).
CORPUS_NAMES = ("corpus.jsonl", "collection.tsv", "corpus.tsv")
RETRIEVAL_SET_FILES = ("queries.jsonl", "queries.tsv", "qrels")  # beside a corpus file: a retrieval set's folder
PARQUET_BATCH_ROWS = 1024
LINE_PIECE_BYTES = 1 << 20  # a .txt line is read this much at a time by `iter_corpus_pieces`


@dataclass(frozen=True)
class Document:
    """One document: `text` is the title and the body joined with a space when a title exists; `title` is the title
    alone (empty when the source gives none); `where` the file and line (or row) it was read from."""

    doc_id: str
    text: str
    title: str = ""
    where: str = field(default="", compare=False)


def iter_corpus(sources: Sequence[str | Path]) -> Iterator[Document]:
    """The documents of several sources, one source after the other, in order (`corpus_sources`); `empty_corpus`
    when none has text."""
    found = False
    for source, files in corpus_sources(sources):
        for document in _read_hf(source) if files is None else _read_files(files):
            found = found or bool(document.text.strip())
            yield document
    if not found:
        raise empty_corpus(sources)


def corpus_sources(sources: Sequence[str | Path] | str | Path) -> list[tuple[str | Path, list[Path] | None]]:
    """Each corpus argument with the files it reads (`corpus_files`; None for `hf:NAME`), all resolved before one
    is read: the one resolution of every reader of several sources. A file reached by two of them (named twice,
    through `./` or a link, or beside its own folder) is refused naming both (`runtime.input_files.read_once`):
    it would be read, and trained on, twice."""
    if isinstance(sources, (str, Path)):
        sources = [sources]
    if not sources:
        raise DataError("no corpus given: pass at least one file, folder or hf:NAME")
    resolved = [(source, None if _hub(source) else corpus_files(source)) for source in sources]
    read_once(((str(source), file) for source, files in resolved for file in files or ()), "corpus file")
    return resolved


def _hub(source: str | Path) -> bool:
    return isinstance(source, str) and source.startswith(HF_PREFIX)


def empty_corpus(sources: Sequence[str | Path] | str | Path) -> DataError:
    """The one refusal of a corpus without a document holding text, for every reader."""
    names = ", ".join(map(str, sources)) if isinstance(sources, list | tuple) else str(sources)
    return DataError(f"{names}: empty corpus: no document holds any text; give a corpus with documents")


def corpus_format(path: Path) -> str:
    """The format of a corpus file by its name (a trailing .gz ignored for JSON lines and .tsv): txt, jsonl, tsv or
    parquet; DataError naming the formats read otherwise."""
    name = path.name.lower()
    for suffix, kind in ((".txt", "txt"), (".jsonl", "jsonl"), (".json", "jsonl"), (".tsv", "tsv"),
                         (".parquet", "parquet")):
        if name.endswith(suffix) or (kind in ("jsonl", "tsv") and name.endswith(f"{suffix}.gz")):
            return kind
    raise DataError(f"{path}: unknown corpus format {path.suffix or '(no extension)'!r}; use .txt, .jsonl, .json, "
                    ".tsv, .parquet (.jsonl and .tsv also .gz), a folder holding them, or hf:NAME")


def corpus_files(source: str | Path) -> list[Path]:
    """The files a corpus argument names, by one rule for every command: a file is itself; a folder holding a
    retrieval set's corpus file (`CORPUS_NAMES`, or its .gz) stands for that file, and must hold only one; any other
    folder stands for its corpus files (`folder_files`: each read as it would be named alone, hidden ones skipped, in
    name order), unless it holds a retrieval set's other files (then its corpus file is missing). What is not a
    regular file is named, never skipped or opened."""
    path = Path(source)
    if not path.exists():
        raise DataError(f"{path}: corpus file or folder not found")
    if not path.is_dir():
        check_regular_file(path, "corpus file")
        corpus_format(path)
        return [path]
    named = named_file(path, CORPUS_NAMES, "corpus", "a corpus folder holds one corpus file",
                       "name the file to read in place of the folder")
    if named is not None:
        return [named]
    beside = [name for name in RETRIEVAL_SET_FILES if (path / name).exists()]
    if beside:
        raise DataError(f"{path}: holds {', '.join(beside)} but no corpus file: a retrieval set's folder holds one of "
                        f"{', '.join(CORPUS_NAMES)} (also .gz)")
    return folder_files(path)


def named_file(folder: Path, names: Sequence[str], role: str, rule: str, remedy: str) -> Path | None:
    """The file of `folder` that one of `names` (each also .gz) names, or None when none is there: the one rule by
    which a folder stands for the file of a role by its name (a corpus folder's corpus file, `corpus_files`; a
    retrieval set's queries and qrels, `data.retrieval_sets`). Two present are refused naming both, in one line
    saying the `rule` and the `remedy`: which one was meant cannot be told, and reading the first would leave the
    other unread without a word. What is there must be a regular file (`role` names it otherwise)."""
    present = [folder / f"{name}{gz}" for name in names for gz in ("", ".gz") if (folder / f"{name}{gz}").exists()]
    if len(present) > 1:
        raise DataError(f"{folder}: holds {' and '.join(file.relative_to(folder).as_posix() for file in present)}; "
                        f"{rule} ({', '.join(names)}, each also .gz): {remedy}")
    if present:
        check_regular_file(present[0], f"{role} file")
    return present[0] if present else None


def iter_documents(source: str | Path) -> Iterator[Document]:
    """The documents of one source: a file (.txt, .jsonl/.json, .tsv, .parquet, the two text ones also .gz), a
    folder (`corpus_files`), or `hf:NAME[:CONFIG]`."""
    return _read_hf(str(source)) if _hub(source) else _read_files(corpus_files(source))


def _read_files(files: Iterable[Path]) -> Iterator[Document]:
    """The documents of corpus files, one after the other, each read by its format's reader (`corpus_format`)."""
    readers = {"txt": _read_txt, "jsonl": _read_jsonl, "tsv": _read_tsv, "parquet": _read_parquet}
    return itertools.chain.from_iterable(readers[corpus_format(file)](file) for file in files)


class CorpusTexts:
    """The texts of `iter_corpus(sources)`, read afresh on each iteration (a tokenizer's trainer reads them twice)."""

    def __init__(self, sources: Sequence[str | Path] | str | Path):
        self.sources = sources

    def __iter__(self) -> Iterator[str]:
        return (document.text for document in iter_corpus(self.sources))


def iter_corpus_pieces(sources: Sequence[str | Path], size: int, splits: str) -> Iterator[tuple[str, bool]]:
    """(text, whether it ends its document) per piece of the documents of `iter_corpus(sources)`, in order: a
    document of up to `size` characters is one piece, a longer one is cut before one of the characters `splits`
    (those the tokenizer always splits words at, `retromae.data.long_texts.split_characters`; at `size` characters in a
    run without any; `cut_pieces`). A `.txt` file of one document per line is read a piece of a line at a time, so
    a long line is never held whole."""
    found = False
    for source, files in corpus_sources(sources):
        for file in [source] if files is None else files:
            if isinstance(file, Path) and file.suffix.lower() == ".txt" and file.is_file() \
                    and not _has_paragraph_break(file):
                fragments = _txt_line_fragments(file)
            else:
                fragments = ((document.text, True) for document in iter_documents(file))
            for text, ends in cut_pieces(fragments, size, splits):
                found = found or bool(text.strip())
                yield text, ends
    if not found:
        raise empty_corpus(sources)


def cut_pieces(fragments: Iterable[tuple[str, bool]], size: int, splits: str) -> Iterator[tuple[str, bool]]:
    """Re-cut a stream of (text, ends its document) fragments into pieces of at most `size` characters, each cut
    at the last cut in its `size` characters (`retromae.data.long_texts.last_cut`: before one of the characters `splits`
    that follows a non-whitespace character; at `size` when there is none): the same pieces whatever the fragments,
    so a document read whole and one read in pieces tokenise alike, tokens and words. `splits` must be characters the
    tokenizer always splits a word at (Metaspace keeps a tab or a newline inside its word), and a cut inside a
    whitespace run would make a word of the run's end (byte-level BPE keeps a run in one pre-token)."""
    buffer, start = "", 0
    for text, ends in fragments:
        buffer, start = buffer[start:] + text, 0
        while len(buffer) - start > size:
            window = start + size
            end = last_cut(buffer, window - 1, splits, low=start + 1) or window
            yield buffer[start:end], False
            start = end
        if ends:
            yield buffer[start:], True
            buffer, start = "", 0


def _txt_line_fragments(path: Path) -> Iterator[tuple[str, bool]]:
    """The documents of a one-document-per-line .txt file (its non-blank lines, stripped as `_read_txt` strips
    them) as (fragment, ends its document) pairs, read LINE_PIECE_BYTES at a time."""
    started, held = False, ""  # held: trailing whitespace, kept back until text follows it on the line
    for _, text, ends in numbered_line_pieces(path, LINE_PIECE_BYTES):
        if not started:
            text = text.lstrip()
            started = bool(text)
        if started and text:
            body = held + text
            kept = body.rstrip()
            held = body[len(kept):]
            if kept:
                yield kept, False
        if ends:
            if started:
                yield "", True
            started, held = False, ""


def folder_files(folder: Path) -> list[Path]:
    """The corpus files of a folder without a retrieval set's corpus file (`corpus_files`), in name order: each file
    a corpus suffix (`CORPUS_SUFFIXES`) names, also under a compression suffix (`COMPRESSED_SUFFIXES`), read as it
    would be named alone (`corpus_format`: .jsonl.gz and .tsv.gz read, a .jsonl.zst refused naming it, never skipped:
    a shard left out would be a corpus cut short without a word); one not a regular file (a FIFO, a device), not
    UTF-8 text (`check_listed_name`) or reaching a file listed before (a link, `read_once`) is an error naming it.
    Hidden files (`runtime.input_files.hidden`: '.notes.jsonl', macOS's '._a.jsonl') are no corpus, as a shell's
    `*` leaves them out: skipped, with a note saying how many (`_note_hidden`)."""
    listed = sorted(p for p in folder.iterdir() if _corpus_name(p.name) and not p.is_dir())
    files = [file for file in listed if not hidden(file.name)]
    for file in files:
        check_listed_name(file)
        check_regular_file(file, "corpus file")
        corpus_format(file)
    read_once(((str(folder), file) for file in files), "corpus file")
    if not files:
        raise DataError(f"{folder}: no corpus file: a corpus folder holds one of {', '.join(CORPUS_NAMES)} (a "
                        f"retrieval set's), or corpus files ({', '.join(CORPUS_SUFFIXES)}; .jsonl and .tsv also .gz)")
    _note_hidden(folder, len(listed) - len(files))
    return files


def _corpus_name(name: str) -> bool:
    """Whether a file named `name` in a corpus folder is a corpus file: a corpus suffix, or one under a compression
    suffix (`folder_files`)."""
    name = name.lower()
    stem = next((name[:-len(suffix)] for suffix in COMPRESSED_SUFFIXES if name.endswith(suffix)), name)
    return stem.endswith(CORPUS_SUFFIXES)


_NOTED: set[Path] = set()  # corpus folders whose hidden files were noted in this process


def _note_hidden(folder: Path, count: int) -> None:
    """Say once per folder and process that `count` hidden corpus files in it were skipped (a folder is listed
    again to fingerprint and to read it)."""
    if count and folder.resolve() not in _NOTED:
        _NOTED.add(folder.resolve())
        notice(f"retromae: note: {folder}: {count} hidden file{'s' if count > 1 else ''} (names starting with '.') "
               "skipped: hidden files are no corpus")


def _join(title: str, text: str) -> str:
    """Title and text joined with a space when there is a title."""
    if title:
        return f"{title} {text}" if text else title
    return text


def _has_paragraph_break(path: Path) -> bool:
    """Whether a blank line separates two non-blank lines (then the file holds paragraphs, not lines); each line is
    read LINE_PIECE_BYTES at a time."""
    seen_text, pending_blank, blank = False, False, True  # blank: the line read so far is
    with path.open("rb") as handle:
        while raw := handle.readline(LINE_PIECE_BYTES):
            blank = blank and not raw.strip()
            if not raw.endswith(b"\n"):
                continue
            if not blank:
                if pending_blank and seen_text:
                    return True
                seen_text, pending_blank = True, False
            else:
                pending_blank = True
            blank = True
    return not blank and pending_blank and seen_text


def _read_txt(path: Path) -> Iterator[Document]:
    """One document per line, or per blank-line separated paragraph when the file has a blank line inside. A line
    is bounded by the file's size only: a .txt corpus is never compressed, and one may be a single line (text8)."""
    lines = numbered_lines(path, keep_blank=True, line_bytes=path.stat().st_size)
    if not _has_paragraph_break(path):
        for number, line in lines:
            if line.strip():
                yield Document(f"{path}:{number}", line.strip())
        return
    yield from _paragraphs(path, lines)


def _paragraphs(path: Path, lines: Iterable[tuple[int, str]]) -> Iterator[Document]:
    """Group consecutive non-blank lines into one document (lines joined by newlines), id = its first line."""
    first, buffer = 0, []
    for number, line in lines:
        if line.strip():
            first = first or number
            buffer.append(line.strip())
        elif buffer:
            yield Document(f"{path}:{first}", "\n".join(buffer))
            first, buffer = 0, []
    if buffer:
        yield Document(f"{path}:{first}", "\n".join(buffer))


def _read_jsonl(path: Path) -> Iterator[Document]:
    """JSON lines: one object per line with `text` (required), `title` (optional), `_id` or `id` (optional)."""
    for number, line in numbered_lines(path):
        where = f"{path}:{number}"
        yield _record_document(parse_json_line(path, number, line), where, default_id=where)


def _read_tsv(path: Path) -> Iterator[Document]:
    """A .tsv corpus: 'id<TAB>text' or 'id<TAB>title<TAB>text' lines, after an optional header row
    (`data.fields.tsv_columns`)."""
    columns = None
    for number, line in numbered_lines(path):
        if columns is None:
            columns, header = tsv_columns(path, number, line, "corpus")
            if header:
                continue
        doc_id, title, text = tsv_fields(path, number, line, columns, "corpus")
        yield _record_document({"_id": doc_id, "title": title, "text": text}, f"{path}:{number}", "")


def _record_document(record: Any, where: str, default_id: str) -> Document:
    """A Document from one JSON object or table row (`data.fields.document_fields`: typed fields, the id rule);
    `where` names the file and line (or row) for errors."""
    doc_id, title, text = document_fields(record, where, id_required=False)
    title = clean_text(title).strip()
    return Document(default_id if doc_id is None else doc_id, _join(title, clean_text(text)), title, where)


def _read_parquet(path: Path) -> Iterator[Document]:
    """A parquet table with a `text` column (+ `title`, `_id`/`id`), read one batch of rows at a time."""
    # pyarrow: only for a parquet corpus
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from None
    names = set(table.schema_arrow.names)
    if "text" not in names:
        raise DataError(f"{path}: missing column 'text' (columns: {', '.join(sorted(names))})")
    columns = [name for name in ("text", "title", "_id", "id") if name in names]
    row = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        for record in batch.to_pylist():
            yield _record_document(record, f"{path}: row {row}", default_id=f"{path}:{row}")
            row += 1


def _read_hf(source: str) -> Iterator[Document]:
    """The `train` split of a Hugging Face dataset (hub name or local folder), streamed."""
    # datasets: only for a Hugging Face dataset corpus
    import datasets

    name, config = parse_hf_source(source)
    try:
        dataset = datasets.load_dataset(name, config, split="train", streaming=True)
    except (OSError, ValueError) as err:
        raise DataError(f"{source}: cannot load the dataset ({err})") from None
    columns = dataset.column_names
    if columns is not None and "text" not in columns:
        raise DataError(f"{source}: missing column 'text' (columns: {', '.join(columns)})")
    for row, record in enumerate(dataset):
        yield _record_document(record, f"{source}: row {row}", default_id=f"{source}:{row}")
