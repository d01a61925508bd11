"""The error types users see: each message names the file, line or option at fault.

Owns: the exception hierarchy and the one-line form of an operating-system error (`os_error_line`). The CLI prints
any `RetroMAEError` as one line and exits with code 2; a `FileSystemError` or any other `OSError` as one line
naming the path, with code 1.
"""

from __future__ import annotations

import os


class RetroMAEError(Exception):
    """Base of every error the CLI reports without a traceback."""


class DataError(RetroMAEError, ValueError):
    """Bad input data: the message names the file and, where there is one, the line."""


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
    return f"{' -> '.join(paths)}: {cause}" if paths else cause
