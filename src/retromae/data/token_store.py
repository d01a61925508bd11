"""Tokenise a corpus once into a memory-mapped store of packed blocks, cached and reused by later runs.

Owns: the on-disk token store (format, cache key, atomic build, memory-mapped loading, the check of a store found
on disk) and the packing rule. Does not own reading formats (see `corpus`), special tokens or padding (see `collate`),
masking, or models.

Layout of a store folder (all flat little-endian arrays, read with `np.memmap`):
  ids.int32            token ids of every kept block, back to back, without special tokens
  word_starts.uint8    1 where the token starts a word (from the fast tokenizer's `word_ids()`)
  block_offsets.int64  num_blocks + 1 offsets into ids: block i is ids[offsets[i]:offsets[i + 1]]
  block_documents.int32  the document each block came from (0 .. num_documents - 1, in corpus order)
  meta.json            sources, tokenizer, max_length, counts, format version, each array's fingerprint (written last)

A store is opened checked (`TokenStore.__init__`), since the cache is shared and its key is a hash anyone holding the
corpus and the tokenizer can compute: meta.json is read by the checked readers, each array is a file of the store's
own of exactly the size meta.json's counts make and of the content its fingerprint records (a file edited in place
is found), and the blocks are what the writer makes (`check_blocks`). `build_or_load` tokenises again, with a note,
over a store that fails.

Packing: each document is cut into consecutive blocks of at most `max_length - num_special_tokens` tokens;
blocks never cross documents. A cut that would fall inside a word moves back to the word's start (unless
the word alone is longer than a block), and the first token of every block counts as a word start. The
last, shorter block of a document is kept when it has at least `MIN_BLOCK_TOKENS` tokens (or the whole
block length when blocks are shorter), or when it is the whole document and has at least
`MIN_DOCUMENT_TOKENS`; otherwise its tokens are dropped. Documents with no kept block are not counted.

Long documents: a document longer than `PIECE_CHARACTERS` is tokenised in pieces cut before a whitespace
character at which the tokenizer always splits words (`retromae.data.long_texts.split_characters`: space, tab and
newline for WordPiece and byte-level BPE, the space alone for Metaspace), read in pieces too from a `.txt` file of
one document per line (`iter_corpus_pieces`), and packed as the pieces arrive (`_StoreWriter`), so memory does not
grow with the length of one document (docs/reliability.md); the tokens are those of the whole text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from retromae.data.corpus import HF_PREFIX, corpus_files, iter_corpus_pieces, parse_hf_source
from retromae.data.fields import string_field, whole_number_field
from retromae.data.long_texts import split_characters
from retromae.runtime.cache_entries import cached_folder
from retromae.runtime.console import progress
from retromae.runtime.errors import DataError, FileSystemError
from retromae.runtime.input_files import folder_inputs, hf_folder
from retromae.runtime.io import CACHE_ENV, cache_folder, write_text_atomic
from retromae.runtime.lines import check_own_file, check_regular_file, quoted, read_json_file
from retromae.runtime.options import POSITIVE, require
from retromae.runtime.run_folder import file_fingerprint

logger = logging.getLogger(__name__)

# 2: long documents cut only where the tokenizer splits; 3: meta.json records each array's fingerprint (stores of
# an older version are not found: the version is part of the key)
FORMAT_VERSION = 3
BATCH_PIECES = 1000
BATCH_CHARACTERS = 2_000_000
PIECE_CHARACTERS = 100_000  # a longer document is tokenised in pieces (`retromae.data.corpus.cut_pieces`)
MIN_BLOCK_TOKENS = 8
MIN_DOCUMENT_TOKENS = 2
FILES = {
    "ids": ("ids.int32", np.int32),
    "word_starts": ("word_starts.uint8", np.uint8),
    "offsets": ("block_offsets.int64", np.int64),
    "documents": ("block_documents.int32", np.int32),
}
COUNTS = ("max_length", "block_tokens", "num_blocks", "num_tokens", "num_documents", "vocab_size")  # each at least 1


def usable_cache(cache_dir: Path | None) -> Path:
    """The token-store folder under `cache_dir` (default `runtime.io.cache_folder`), created and checked writable before
    any tokenising: FileSystemError naming it and the setting it came from (a file there, a read-only disk)."""
    given = Path(cache_dir) if cache_dir else None
    setting = "--cache-dir" if given else f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the default cache"
    folder = (given or cache_folder()) / "token_stores"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        cause = f"{blocking} is a file, not a folder" if blocking else error.strerror or str(error)
        raise FileSystemError(f"{folder.parent}: unusable as the token cache ({setting}): {cause}") from None
    return folder


def plain_backend(tokenizer: PreTrainedTokenizerFast) -> Tokenizer:
    """A copy of the fast tokenizer's Rust backend with no truncation, no padding, special strings kept as text."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(f"{type(tokenizer).__name__} is not a fast tokenizer; the token store needs one")
    plain = Tokenizer.from_str(backend.to_str())
    plain.no_truncation()
    plain.no_padding()
    return plain


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """sha256 of the backend tokenizer's JSON (truncation and padding settings left out)."""
    return hashlib.sha256(plain_backend(tokenizer).to_str().encode("utf-8")).hexdigest()


def id_limit(tokenizer: PreTrainedTokenizerFast) -> int:
    """One more than the largest id the tokenizer gives (of its vocabulary and added tokens): every id of a store
    made with it lies below (`len(tokenizer)` counts the tokens, and ids may skip some numbers)."""
    return max(tokenizer.get_vocab().values(), default=-1) + 1


def source_fingerprint(source: str | Path) -> list[Any]:
    """What identifies a source's content: resolved path and content fingerprint (size and a hash of every byte,
    `retromae.runtime.run_folder.file_fingerprint`) of each file it reads (`corpus_files`; a local `hf:` folder's
    by `runtime.input_files.folder_inputs`), or the hf: name."""
    local = hf_folder(source)
    if local is not None:
        return [HF_PREFIX, local[1], *_files_fingerprint(folder_inputs(local[0]))]
    if isinstance(source, str) and source.startswith(HF_PREFIX):
        return [HF_PREFIX + parse_hf_source(source)[0], parse_hf_source(source)[1]]
    path = Path(source)
    if not path.exists():
        raise DataError(f"{path}: corpus file or folder not found")
    if not path.is_dir():
        check_regular_file(path, "corpus file")  # /dev/zero would be hashed forever
    return _files_fingerprint(corpus_files(path))


def _files_fingerprint(paths: Iterable[Path]) -> list[Any]:
    return [[str(path.resolve()), file_fingerprint(path)] for path in paths]


def cache_key(sources: Sequence[str | Path], tokenizer: PreTrainedTokenizerFast, max_length: int) -> str:
    """sha256 over the format version, each source's fingerprint, the tokenizer's fingerprint and max_length."""
    payload = {
        "format_version": FORMAT_VERSION,
        "sources": [source_fingerprint(source) for source in sources],
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "max_length": max_length,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def word_starts_of(word_ids: Sequence[int | None]) -> np.ndarray:
    """(n,) bool: True where a token's word differs from the previous token's (tokens without a word start one)."""
    words = np.array([-1 if word is None else word for word in word_ids], dtype=np.int64)  # (n,)
    starts = np.ones(len(words), dtype=bool)
    starts[1:] = (words[1:] != words[:-1]) | (words[1:] < 0)
    return starts


def block_ends(word_starts: np.ndarray, block_tokens: int) -> list[int]:
    """End positions of the kept blocks of one document, following the packing rule in the module docstring."""
    ends = full_block_ends(word_starts, block_tokens)
    start = ends[-1] if ends else 0
    if keeps_tail(len(word_starts) - start, start == 0, block_tokens):
        ends.append(len(word_starts))
    return ends


def full_block_ends(word_starts: np.ndarray, block_tokens: int) -> list[int]:
    """The ends of the full blocks cut from the start of `word_starts` while more than a block's tokens remain (a
    cut that would fall inside a word moves back to its start). The same cuts whether the tokens that follow are
    known yet or not: each cut looks only at the tokens up to the next one."""
    length, start, ends = len(word_starts), 0, []
    while length - start > block_tokens:
        end = start + block_tokens
        if not word_starts[end]:
            inside = np.flatnonzero(word_starts[start + 1:end])
            end = start + 1 + int(inside[-1]) if inside.size else end
        ends.append(end)
        start = end
    return ends


def keeps_tail(tail: int, whole_document: bool, block_tokens: int) -> bool:
    """Whether the last, shorter block of a document (`tail` tokens; the whole document when `whole_document`) is
    kept."""
    return tail >= min(MIN_BLOCK_TOKENS, block_tokens) or (whole_document and tail >= MIN_DOCUMENT_TOKENS)


class _StoreWriter:
    """Appends packed blocks to the store's flat files, one tokenised batch of pieces at a time. A document may
    come in several pieces: the tokens after its last full block wait (at most one block's worth) for the next
    piece, so its blocks are those `block_ends` cuts from the whole document."""

    def __init__(self, directory: Path, block_tokens: int) -> None:
        self.directory, self.block_tokens = directory, block_tokens
        self.handles: dict[str, BinaryIO] = {}
        self.num_tokens = self.num_blocks = self.num_documents = self.documents_read = self.dropped_tokens = 0
        self.pending_ids, self.pending_starts = np.zeros(0, np.int32), np.zeros(0, bool)
        self.document_blocks = 0  # blocks written so far of the document in progress

    def __enter__(self) -> _StoreWriter:
        self.handles = {key: (self.directory / name).open("wb") for key, (name, _) in FILES.items()}
        self._write("offsets", np.zeros(1, dtype=np.int64))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self.handles.values():
            handle.close()

    def _write(self, key: str, array: np.ndarray) -> None:
        self.handles[key].write(np.ascontiguousarray(array, dtype=FILES[key][1]).tobytes())

    def add_batch(self, encodings: Sequence[Any], last: Sequence[bool]) -> None:
        """Pack each encoded piece into blocks and append them; `last[i]`: piece i ends its document."""
        parts: dict[str, list[np.ndarray]] = {"ids": [], "word_starts": [], "offsets": [], "documents": []}
        for encoding, ends_document in zip(encodings, last, strict=True):
            ids = np.concatenate([self.pending_ids, np.asarray(encoding.ids, dtype=np.int32)])
            starts = np.concatenate([self.pending_starts, word_starts_of(encoding.word_ids)])
            ends = full_block_ends(starts, self.block_tokens)
            done = ends[-1] if ends else 0
            if ends_document and keeps_tail(len(ids) - done, self.document_blocks + len(ends) == 0,
                                            self.block_tokens):
                ends.append(len(ids))
            if ends:
                starts[[0, *ends[:-1]]] = True
                self._add_blocks(parts, ids[:ends[-1]], starts[:ends[-1]], ends)
            kept = ends[-1] if ends else 0
            self.pending_ids, self.pending_starts = ids[kept:], starts[kept:]
            if ends_document:
                self._end_document()
        if parts["ids"]:
            for key, arrays in parts.items():
                self._write(key, np.concatenate(arrays))

    def _add_blocks(self, parts: dict[str, list[np.ndarray]], ids: np.ndarray, starts: np.ndarray,
                    ends: list[int]) -> None:
        """Queue the blocks `ids[previous end:end]` of the document in progress."""
        parts["ids"].append(ids)
        parts["word_starts"].append(starts)
        parts["offsets"].append(self.num_tokens + np.asarray(ends, dtype=np.int64))
        parts["documents"].append(np.full(len(ends), self.num_documents, dtype=np.int32))
        self.num_tokens += ends[-1]
        self.num_blocks += len(ends)
        self.document_blocks += len(ends)

    def _end_document(self) -> None:
        """Count the document just finished; its tokens after the last kept block are dropped."""
        self.documents_read += 1
        self.dropped_tokens += len(self.pending_ids)
        self.num_documents += self.document_blocks > 0
        self.pending_ids, self.pending_starts = self.pending_ids[:0], self.pending_starts[:0]
        self.document_blocks = 0


def piece_batches(pieces: Iterable[tuple[str, bool]]) -> Iterator[list[tuple[str, bool]]]:
    """Batches of up to BATCH_PIECES pieces (`retromae.data.corpus.iter_corpus_pieces`) and about BATCH_CHARACTERS
    characters: the bound on what one call of the tokenizer holds."""
    batch: list[tuple[str, bool]] = []
    characters = 0
    for piece in pieces:
        batch.append(piece)
        characters += len(piece[0])
        if len(batch) == BATCH_PIECES or characters >= BATCH_CHARACTERS:
            yield batch
            batch, characters = [], 0
    if batch:
        yield batch


def _build(directory: Path, sources: Sequence[str | Path], tokenizer: PreTrainedTokenizerFast, max_length: int,
           show_progress: bool) -> dict[str, Any]:
    """Tokenise every document of `sources` into `directory`; return the counts for meta.json."""
    backend = plain_backend(tokenizer)
    backend.encode_special_tokens = True
    block_tokens = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    with _StoreWriter(directory, block_tokens) as writer, \
            progress(f"tokenising {_names(sources)} into blocks of {max_length}", unit="doc",
                     enabled=show_progress) as bar:
        pieces = iter_corpus_pieces(sources, PIECE_CHARACTERS, split_characters(tokenizer))
        for batch in piece_batches(pieces):
            last = [ends for _, ends in batch]
            writer.add_batch(backend.encode_batch([text for text, _ in batch], add_special_tokens=False), last)
            bar.update(sum(last))
    if writer.num_blocks == 0:
        names = ", ".join(str(source) for source in sources)
        raise DataError(f"{names}: empty corpus: no document with at least {MIN_DOCUMENT_TOKENS} tokens of text")
    return {
        "num_blocks": writer.num_blocks, "num_tokens": writer.num_tokens, "num_documents": writer.num_documents,
        "documents_read": writer.documents_read, "dropped_tokens": writer.dropped_tokens,
    }


def _names(sources: Sequence[str | Path], shown: int = 3) -> str:
    names = [Path(str(source)).name or str(source) for source in sources]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def read_meta(folder: Path, made_for: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """meta.json of the store folder `folder`, a file of the store's own (`check_own_file`) read by the checked JSON
    reader: of this FORMAT_VERSION, each of COUNTS a whole number of at least 1, the sources a list of texts, a
    fingerprint for each array, and each field of `made_for` (the store wanted: its key, lengths and vocabulary) of
    the value given; DataError naming the file and the field otherwise."""
    path = folder / "meta.json"
    check_own_file(path)
    if not os.path.lexists(path):
        raise DataError(f"{path}: missing from the token store")
    meta = read_json_file(path)
    if meta.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{path}: format version {quoted(meta.get('format_version'))}, not {FORMAT_VERSION}: "
                        "written by another version of retromae")
    for name in COUNTS:
        whole_number_field(meta, name, str(path), POSITIVE)
    string_field(meta, "cache_key", str(path))
    sources, fingerprints = meta.get("sources"), meta.get("fingerprints")
    if not isinstance(sources, list) or not all(isinstance(source, str) for source in sources):
        raise DataError(f"{path}: field 'sources' is {quoted(sources)}, not a list of texts")
    if not isinstance(fingerprints, dict) or not all(isinstance(fingerprints.get(name), str)
                                                     for name, _ in FILES.values()):
        raise DataError(f"{path}: field 'fingerprints' is {quoted(fingerprints)}, not the fingerprint of each array "
                        f"({', '.join(name for name, _ in FILES.values())})")
    for name, value in (made_for or {}).items():
        if meta[name] != value:
            raise DataError(f"{path}: records {name} {quoted(meta[name])}, where this corpus, tokenizer and max_length "
                            f"make {value}")
    return meta


def open_arrays(folder: Path, meta: dict[str, Any]) -> dict[str, np.memmap]:
    """Each array of the store folder `folder`, memory-mapped once checked against `meta` (`read_meta`): a file of the
    store's own (`check_own_file`), of exactly the bytes of the entries meta.json counts, its content the one its
    fingerprint records (`file_fingerprint`: a sha256 of every byte, once per process and file); DataError naming the
    file otherwise."""
    entries = {"ids": meta["num_tokens"], "word_starts": meta["num_tokens"], "offsets": meta["num_blocks"] + 1,
               "documents": meta["num_blocks"]}
    arrays = {}
    for key, (name, dtype) in FILES.items():
        path = folder / name
        check_own_file(path)
        if not path.exists():
            raise DataError(f"{path}: missing from the token store")
        size, expected = path.stat().st_size, entries[key] * np.dtype(dtype).itemsize
        if size != expected:
            raise DataError(f"{path}: holds {size:,} bytes, not the {expected:,} of the {entries[key]:,} entries "
                            "meta.json counts")
        if file_fingerprint(path) != meta["fingerprints"][name]:
            raise DataError(f"{path}: changed since the store was written (its content is not the one the "
                            "fingerprint in meta.json records)")
        arrays[key] = np.memmap(path, dtype=dtype, mode="r")
    return arrays


def check_blocks(folder: Path, meta: dict[str, Any], arrays: dict[str, np.memmap]) -> None:
    """DataError naming the array unless the blocks are those the writer makes: offsets from 0 to num_tokens, each
    block of 1 to block_tokens tokens; the blocks' documents from 0 to num_documents - 1, each block of the document
    of the block before or of the next one; every id below vocab_size (one pass over the ids)."""
    offsets, documents = np.asarray(arrays["offsets"]), np.asarray(arrays["documents"])
    lengths, steps = np.diff(offsets), np.diff(documents)  # (num_blocks,), (num_blocks - 1,)
    path, most = folder / FILES["offsets"][0], meta["block_tokens"]
    if offsets[0] != 0:
        raise DataError(f"{path}: starts at {offsets[0]}, not 0")
    wrong = np.flatnonzero((lengths < 1) | (lengths > most))
    if wrong.size:
        block = int(wrong[0])
        raise DataError(f"{path}: block {block} holds {lengths[block]} tokens (offsets {offsets[block]} to "
                        f"{offsets[block + 1]}); a block holds 1 to {most} (meta.json's block_tokens)")
    if offsets[-1] != meta["num_tokens"]:
        raise DataError(f"{path}: ends at {offsets[-1]}, not at meta.json's num_tokens {meta['num_tokens']}")
    path = folder / FILES["documents"][0]
    if documents[0] != 0:
        raise DataError(f"{path}: its first block is of document {documents[0]}, not 0")
    wrong = np.flatnonzero((steps != 0) & (steps != 1))
    if wrong.size:
        block = int(wrong[0]) + 1
        raise DataError(f"{path}: block {block} is of document {documents[block]}, after a block of document "
                        f"{documents[block - 1]} (the blocks go through the documents in order)")
    if documents[-1] != meta["num_documents"] - 1:
        raise DataError(f"{path}: its last block is of document {documents[-1]}, not of the last of meta.json's "
                        f"num_documents {meta['num_documents']}")
    ids, limit = np.asarray(arrays["ids"]).view(np.uint32), meta["vocab_size"]  # a negative id is above any limit
    if ids.max() >= limit:
        token = int(np.argmax(ids >= limit))
        raise DataError(f"{folder / FILES['ids'][0]}: token {token:,} has the id {arrays['ids'][token]}, not below "
                        f"meta.json's vocab_size {limit} (one more than the tokenizer's largest id)")


class TokenStore:
    """Packed blocks of token ids and word starts, memory-mapped from a store folder (see the module docstring)."""

    def __init__(self, path: Path, made_for: Mapping[str, Any] | None = None) -> None:
        """The store in the folder `path`, checked (`read_meta`, with `made_for`; `open_arrays`; `check_blocks`):
        DataError naming the file and what is wrong."""
        self.path = Path(path)
        self.meta: dict[str, Any] = read_meta(self.path, made_for)
        arrays = open_arrays(self.path, self.meta)
        check_blocks(self.path, self.meta, arrays)
        self._ids, self._word_starts = arrays["ids"], arrays["word_starts"]
        self._offsets, self._documents = arrays["offsets"], arrays["documents"]
        self.num_tokens: int = self.meta["num_tokens"]
        self.num_documents: int = self.meta["num_documents"]

    @classmethod
    def build_or_load(cls, sources: Sequence[str | Path], tokenizer: PreTrainedTokenizerFast, max_length: int,
                      cache_dir: Path | None = None, show_progress: bool = True) -> TokenStore:
        """The store for (sources, tokenizer, max_length): loaded from the cache, or built there first. A store found
        there that fails the checks of `TokenStore.__init__` (a file missing, cut, edited or not a file; meta.json
        damaged or of another store) is a cache's damage: it is built again, with a note naming the file and what is
        wrong. Processes building the same store at once each build it in a private folder; the first renamed into
        place is the store all use (`runtime.cache_entries.cached_folder`)."""
        sources = [sources] if isinstance(sources, (str, Path)) else list(sources)
        if not sources:
            raise DataError("no corpus given: pass at least one file, folder or hf:NAME")
        special = tokenizer.num_special_tokens_to_add(pair=False)
        require(max_length - special >= MIN_DOCUMENT_TOKENS, "max_length",
                f"must leave room for {MIN_DOCUMENT_TOKENS} tokens besides the {special} special tokens")
        stores = usable_cache(cache_dir)
        key = cache_key(sources, tokenizer, max_length)
        path = stores / key
        made_for = {"cache_key": key, "max_length": max_length, "block_tokens": max_length - special,
                    "vocab_size": id_limit(tokenizer)}

        def build(folder: Path) -> None:
            logger.info("building token store %s", path)
            counts = _build(folder, sources, tokenizer, max_length, show_progress)
            meta = {
                "format_version": FORMAT_VERSION, "sources": [str(s) for s in sources],
                "tokenizer": tokenizer.name_or_path, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
                **made_for, **counts,
                "fingerprints": {name: file_fingerprint(folder / name) for name, _ in FILES.values()},
            }
            write_text_atomic(folder / "meta.json", json.dumps(meta, indent=2) + "\n")

        return cached_folder(path, build, lambda folder: cls(folder, made_for),
                             "tokenising the corpus again (the token store is a cache)")

    def __len__(self) -> int:
        return len(self._documents)

    def first_ids(self, count: int) -> np.ndarray:
        """The first `count` token ids of the store (fewer in a smaller one), e.g. to check the tokenizer on them."""
        return np.array(self._ids[:count])

    def _check(self, index: int) -> int:
        if not -len(self) <= index < len(self):
            raise IndexError(f"block {index} out of range for a store of {len(self)} blocks")
        return index % len(self)

    def block(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids int32 (n,), word_starts bool (n,)) of one block, without special tokens; copies, not views."""
        index = self._check(index)
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        return np.array(self._ids[start:end]), self._word_starts[start:end].astype(bool)

    def block_lengths(self) -> np.ndarray:
        """(num_blocks,) int64: the tokens of every block."""
        return np.diff(np.asarray(self._offsets))

    def block_document(self, index: int) -> int:
        """The index of the document block `index` came from; a document's blocks are contiguous and in order."""
        return int(self._documents[self._check(index)])

    def document_block_offsets(self) -> np.ndarray:
        """(num_documents + 1,) int64: document d owns blocks offsets[d] .. offsets[d + 1] - 1."""
        documents = np.asarray(self._documents)  # (num_blocks,), non-decreasing
        return np.searchsorted(documents, np.arange(self.num_documents + 1), side="left").astype(np.int64)

    def document_token_counts(self) -> np.ndarray:
        """(num_documents,) int64: the tokens each document kept, over all its blocks (no special tokens)."""
        lengths = np.diff(np.asarray(self._offsets, dtype=np.int64))  # (num_blocks,)
        documents = np.asarray(self._documents, dtype=np.int64)
        return np.bincount(documents, weights=lengths, minlength=self.num_documents).astype(np.int64)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle only the folder (DataLoader workers re-open the memory maps instead of copying the data)."""
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(Path(state["path"]))

    def __repr__(self) -> str:
        return (f"TokenStore({self.path}, blocks={len(self)}, tokens={self.num_tokens}, "
                f"documents={self.num_documents}, max_length={self.meta['max_length']})")
