"""The error types users see: each message names the file, line or option at fault.

Owns: the exception hierarchy, the one-line form of an operating-system error (`os_error_line`) and that of a panic
of the tokenizers library (`tokenizer_panics`, naming the tokenizer read last: `tokenizer_read`), and that a message
is one line of text that shows as written (`printable`: the text of every `RetroMAEError`, an `os_error_line`, and
each warning or note, `runtime.console.notice`; each line of what a command shows, `runtime.console.shown`). The CLI
prints any `RetroMAEError` as one line and exits with code 2; a `FileSystemError` or any other `OSError` as one line
naming the path, with code 1.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

# Where the tokenizer read last came from (`tokenizer_read`): what a panic of the tokenizers library names
_TOKENIZER_READ: list[str] = []
PANIC_SHOWN = 200  # characters of a panic's message shown (a Rust panic may quote the whole text it failed on)
# What a terminal acts on instead of showing, or shows out of order: C0 controls (ESC starts colour, title and
# clear-screen sequences; BEL, CR, newline), DEL, C1 controls (CSI, NEL), line and paragraph separators and the
# bidirectional controls (U+202E shows a name reversed)
UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with each character a terminal would act on rather than show (`UNSHOWABLE`) written as Python escapes
    it (`\\x1b`, `\\n`, `\\u202e`): the one rule of what a message may hold, whatever it names (a path from a record
    such as index.json or a folder's listing, a value of a marker), so that a file's name cannot clear the screen or
    make a one-line error two."""
    return UNSHOWABLE.sub(lambda match: ascii(match.group())[1:-1], text)


class RetroMAEError(Exception):
    """Base of every error the CLI reports without a traceback; its text is `printable`."""

    def __str__(self) -> str:
        return printable(super().__str__())


class DataError(RetroMAEError, ValueError):
    """Bad input data: the message names the file and, where there is one, the line."""


class ConfigError(RetroMAEError, ValueError):
    """A config file, option or environment setting that cannot be used; the message names the file, field or
    variable."""


class ModelLoadError(RetroMAEError, OSError):
    """A model name or path that cannot be loaded."""


class NonFiniteError(RetroMAEError, ArithmeticError):
    """A NaN or infinity in a model's weights, its vectors or a training loss: the message names the model folder,
    file or step, so that no such model is exported, encoded with or evaluated."""


class FileSystemError(RetroMAEError, OSError):
    """The operating system refused a file or folder (read-only, full, missing, a file where a folder should be):
    the message names the path and the cause."""


def os_error_line(error: OSError) -> str:
    """`PATH: cause` for an OSError (both paths of a rename); its own text when it names no path."""
    cause = error.strerror or (os.strerror(error.errno) if error.errno else str(error))
    paths = [str(os.fsdecode(name)) for name in (error.filename, error.filename2) if name is not None]
    return printable(f"{' -> '.join(paths)}: {cause}" if paths else cause)


def tokenizer_read(where: str) -> None:
    """Note `where` (a model folder's tokenizer.json, the folder, or a hub name) as the tokenizer read last: the one
    a panic of the tokenizers library names (`tokenizer_panics`)."""
    _TOKENIZER_READ[:] = [where]


@contextlib.contextmanager
def tokenizer_panics() -> Iterator[None]:
    """Within: a panic of the tokenizers library raised as a ModelLoadError naming the tokenizer read last. A panic
    (pyo3's PanicException) is a BaseException, which `except Exception` misses: a regular expression of a
    tokenizer.json's normalizer or pre-tokenizer that backtracks past Oniguruma's limit on some text raises one
    wherever that text is tokenised, so the CLI enters this around a command, the Python API around each entry point
    and `Encoder.tokenize`, and `model_source.check_tokenizer_reads` around its sample text."""
    try:
        yield
    except BaseException as error:
        if type(error).__name__ != "PanicException" or not _TOKENIZER_READ:
            raise
        text = " ".join(str(error).split())[:PANIC_SHOWN]
        raise ModelLoadError(f"{_TOKENIZER_READ[0]}: the tokenizers library failed reading a text with this "
                             f"tokenizer ({text}), as a regular expression of its normalizer or pre-tokenizer that "
                             "backtracks does; use the tokenizer files of the model it was made from") from None
