"""Atomic file writing shared by every command: a killed process never leaves a half-written file.

Owns: writing text, JSON lines, numpy arrays and whole directories through a temporary name and a rename, with
the permissions an ordinary write would give under the user's umask (the temporary names start private: 0600
files, 0700 folders, and a colleague could not read an exported model).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        share_as_umask_allows(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back: the only way the OS offers)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_as_umask_allows(path: Path) -> None:
    """Give `path` (and everything under a folder) the read and write bits a plain create would: 0666 for files and
    0777 for folders, less the umask; bits already set are kept."""
    allowed = ~current_umask()
    for item in [path, *(path.rglob("*") if path.is_dir() else ())]:
        if not item.is_symlink():
            wanted = (0o777 if item.is_dir() else 0o666) & allowed
            item.chmod(item.stat().st_mode & 0o7777 | wanted)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; on success it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        share_as_umask_allows(tmp)
        old = path.with_name(f".{path.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
