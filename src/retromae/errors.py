"""The error types users see: each message names the file, line or option at fault.

Owns: the exception hierarchy. The CLI prints any `RetroMAEError` as one line and exits with code 2.
"""


class RetroMAEError(Exception):
    """Base of every error the CLI reports without a traceback."""


class DataError(RetroMAEError, ValueError):
    """Bad input data: the message names the file and, where there is one, the line."""


class ModelLoadError(RetroMAEError, OSError):
    """A model name or path that cannot be loaded."""


class NonFiniteError(RetroMAEError, ArithmeticError):
    """A NaN or infinity in a model's weights, its vectors or a training loss: the message names the model folder,
    file or step, so that no such model is exported, encoded with or evaluated."""
