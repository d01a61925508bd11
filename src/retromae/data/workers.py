"""How DataLoader worker processes start, so that they start quietly and safely beside tokenizers and jax.

Owns the start method of the workers (`worker_context`: forkserver once jax is loaded, whose threads a fork would
copy half-alive, and which warns of deadlock when forked; the platform's default otherwise) and the environment
they are started in (`started_workers`: tokenizers' parallelism switched off for them, so that a fork after the
parent's parallel tokenisation neither warns nor risks its thread pool's locks; off even where the user turned it
on, which tokenizers obeys in a forked child, whose copy of the pool has no threads: its first batch hung). Does not
own datasets or collation.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from torch.utils.data import DataLoader

TOKENIZERS_SWITCH = "TOKENIZERS_PARALLELISM"


def worker_context() -> str | None:
    """The multiprocessing start method for DataLoader workers: forkserver where jax is loaded, else the default."""
    return "forkserver" if "jax" in sys.modules and sys.platform != "win32" else None


@contextlib.contextmanager
def _tokenizers_parallelism_off() -> Iterator[None]:
    """Workers inherit TOKENIZERS_PARALLELISM=false, whatever the user set; the parent keeps its own setting."""
    before = os.environ.get(TOKENIZERS_SWITCH)
    os.environ[TOKENIZERS_SWITCH] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ[TOKENIZERS_SWITCH]
        else:
            os.environ[TOKENIZERS_SWITCH] = before


def started_workers(loader: DataLoader) -> Iterator:
    """`iter(loader)`, which starts its worker processes, with tokenizers' parallelism off in the workers."""
    with _tokenizers_parallelism_off():
        return iter(loader)
