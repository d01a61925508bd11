"""The checks that no NaN or infinity leaves a model: in its weights, or in the vectors it makes.

Owns `nonfinite_parameters` (the names of a module's parameters holding a NaN or infinity, found with one read from
the device), `check_weights` (refuse a model with such weights, naming it) and `check_vectors` (refuse vectors with
such values, or, where they are searched, values so large that their products overflow float32: `VECTOR_LIMIT`,
naming where they came from and the first bad row). Numbers read from files are checked where they are
parsed (`retromae.runtime.lines`), options where they are validated (`retromae.runtime.options.check_fields`), training
losses by the loop (`retromae.training.loop`). Does not own what a caller does about it: each raises `NonFiniteError`.
Imports torch only to read weights.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from retromae.runtime.errors import NonFiniteError

if TYPE_CHECKING:
    from torch import nn

NAMES_SHOWN = 3
CHECK_ROWS = 65_536  # rows of vectors checked at a time
# The largest magnitude a component of a searched vector may have: with at most 2**16 components (`vector_files.
# MAX_DIM`) a vector's norm stays below 2**62, so the inner product and the squared distance of two such vectors stay
# below 2**126, within float32 (about 2**128): a larger one's scores overflow to infinity and vanish from results.
VECTOR_LIMIT = 2.0**54


def nonfinite_parameters(module: nn.Module) -> list[str]:
    """Names of `module`'s parameters that hold a NaN or an infinity (one device read for all of them)."""
    import torch  # here: reading vectors (`check_vectors`, e.g. by `retromae index`) needs no torch

    named = [(name, parameter) for name, parameter in module.named_parameters() if parameter.numel()]
    if not named:
        return []
    finite = torch.stack([torch.isfinite(parameter.detach()).all() for _, parameter in named]).cpu()  # (P,)
    return [name for (name, _), ok in zip(named, finite.tolist(), strict=True) if not ok]


def check_weights(module: nn.Module, source: str) -> None:
    """NonFiniteError naming `source` (a model folder or run) when any weight of `module` is NaN or infinite."""
    bad = nonfinite_parameters(module)
    if bad:
        shown = ", ".join(bad[:NAMES_SHOWN]) + (", ..." if len(bad) > NAMES_SHOWN else "")
        raise NonFiniteError(f"{source}: {len(bad)} weight tensors hold NaN or infinite values ({shown}); the model "
                             "diverged or the file is damaged: nothing can be encoded, scored or exported with it")


def check_vectors(vectors: np.ndarray, source: str, ids: list[str] | None = None, limit: float = math.inf) -> None:
    """NonFiniteError naming `source` and the first row (its id when `ids` are given) holding a NaN or infinity, or
    (`limit`: `VECTOR_LIMIT` for vectors that are searched) a value of that magnitude or more. Read in blocks of rows,
    so that a memory-mapped file is checked without a copy of its size."""
    bad = 0
    first: int | None = None
    for start in range(0, len(vectors), CHECK_ROWS):
        block = np.asarray(vectors[start:start + CHECK_ROWS])
        flat = block.reshape(len(block), -1)
        largest = np.maximum(flat.max(axis=1), -flat.min(axis=1)).astype(np.float64)  # (B,): NaN where one is
        rows = np.flatnonzero(~(largest < limit))  # a NaN compares false
        if len(rows) and first is None:
            first = start + int(rows[0])
        bad += len(rows)
    if first is not None:
        where = f"id {ids[first]!r}" if ids is not None else f"row {first}"
        beyond = f", or values of magnitude 2**{math.log2(limit):g} or more (products overflow float32)" if (
            limit < math.inf) else ""
        raise NonFiniteError(f"{source}: {bad} of {len(vectors)} vectors hold NaN or infinite values{beyond} (the "
                             f"first: {where})")
