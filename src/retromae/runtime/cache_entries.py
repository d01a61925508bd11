"""How an entry of retromae's caches (`io.cache_folder`: token stores, model exports) is built where other processes
may build or read the same entry at the same time, and how a builder that was killed is cleaned up after.

Owns the rule every cache entry follows: a builder writes into a private temporary folder beside the entry
(`private_folder`, named with its process and host) and moves its work into place in one rename; the first to
do so wins, and a builder that finds the entry made meanwhile drops its own work and uses the winner's, checked as
any entry found is. An entry that is one folder (`cached_folder`: a token store) appears whole or not at all; one
whose files share a folder with others (`entry_lock`: an export's files beside its record) is checked and moved
into place under that folder's lock. A temporary folder is never read; one left by a killed builder of this host is
removed by the next builder there (`clear_debris`). Does not own what an entry holds nor its check.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from retromae.runtime.console import notice
from retromae.runtime.errors import DataError
from retromae.runtime.io import check_writable, share_as_umask_allows, writing
from retromae.runtime.lines import open_own_file

T = TypeVar("T")
ATTEMPTS = 3  # builds of one entry before its check's error is raised (each lost to a damaged or vanished entry)
LOCK_NAME = ".retromae-entries.lock"
# A builder's temporary folder as named before round nine (`tempfile.mkdtemp` beside a token store: `.KEY.XXXXXXXX.tmp`)
OLD_TEMPORARY = re.compile(r"^\.[0-9a-f]{64}\.[a-z0-9_]{8}\.tmp$")
OLD_IDLE = 3600  # seconds without a change after which such a folder no process is seen holding is abandoned
REFUSED = (errno.EROFS, errno.EACCES, errno.EPERM)  # a folder that takes no file: read-only, not ours


def _tag() -> str:
    """What names this process in its temporary folders: `pid<N>@<host>`."""
    return f"pid{os.getpid()}@{socket.gethostname()}"


def _temporary_folder(beside: Path) -> Path:
    """A new folder of this process beside `beside`: `.NAME.pid<N>@<host>.XXXXXXXX.tmp`, the name `clear_debris`
    recognises."""
    return Path(tempfile.mkdtemp(prefix=f".{beside.name}.{_tag()}.", suffix=".tmp", dir=beside.parent))


def clear_debris(folder: Path) -> None:
    """Remove the temporary folders in `folder` (`private_folder`) of builders of this host whose process is gone
    (killed while building); those of live processes, and of other hosts, stay. So do the folders of the naming
    before process tags (`OLD_TEMPORARY`: a token store's key and 8 random characters), whose builder is known gone
    by `_abandoned`."""
    pattern = re.compile(rf"^\..*\.pid([0-9]+)@{re.escape(socket.gethostname())}\.[^.]*\.tmp$")
    with contextlib.suppress(OSError):
        for item in Path(folder).iterdir():
            match = pattern.match(item.name)
            if match and not _alive(int(match.group(1))):
                shutil.rmtree(item, ignore_errors=True)
            elif OLD_TEMPORARY.match(item.name) and _real_folder(item) and _abandoned(item):
                shutil.rmtree(item, ignore_errors=True)


def _real_folder(path: Path) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _abandoned(folder: Path) -> bool:
    """Whether the builder of the old-named `folder` is gone: nothing in it changed for `OLD_IDLE` seconds (what a
    builder whose files cannot be looked at, another user's, would show) and no process of this host whose files
    can be read holds a file in it open or memory-mapped (`/proc/PID/fd`, `maps`), as a builder held its arrays."""
    inside = f"{os.path.realpath(folder)}/"
    try:
        changed = max(entry.stat(follow_symlinks=False).st_mtime for entry in [*os.scandir(folder), folder])
        processes = [item for item in Path("/proc").iterdir() if item.name.isdigit()]
    except OSError:
        return False
    if time.time() - changed < OLD_IDLE:
        return False
    return not any(inside in held for process in processes for held in _held_files(process))


def _held_files(process: Path) -> Iterator[str]:
    """The paths `process` (a /proc/PID folder) holds open and the text of its memory maps; nothing for what cannot
    be read (a process ended meanwhile, another user's, a descriptor closed while listed)."""
    with contextlib.suppress(OSError):
        yield (process / "maps").read_text(errors="replace")
        for descriptor in (process / "fd").iterdir():
            with contextlib.suppress(OSError):
                yield os.readlink(descriptor) + "/"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def private_folder(beside: Path) -> Iterator[Path]:
    """A fresh temporary folder of this process in the folder `beside` lies in, removed on leaving (what was moved
    out of it stays where it went); the debris of dead builders there is cleared first (`clear_debris`). A folder
    that cannot be made or written is refused first, naming it and the cache's setting (`io.check_writable`)."""
    beside = Path(beside)
    check_writable(beside.parent)
    beside.parent.mkdir(parents=True, exist_ok=True)
    clear_debris(beside.parent)
    tmp = _temporary_folder(beside)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_folder(path: Path, build: Callable[[Path], None], load: Callable[[Path], T], again: str) -> T:
    """The cache entry that is the folder `path`: `load(path)` (which checks it: DataError when it is damaged) when
    it is there, else `build(folder)` into a private folder (`private_folder`) renamed to `path` whole. A rename
    refused because `path` appeared meanwhile lost the race: the winner's entry is loaded (checked) and ours
    dropped. A damaged entry is moved aside (only the one found damaged, not one another process has put there
    since) and built again, with a note naming its file and what is wrong, then `again` (what is done about it)."""
    damaged = None
    for attempt in range(ATTEMPTS):
        if os.path.lexists(path):
            try:
                return load(path)
            except DataError as error:
                if attempt == ATTEMPTS - 1:
                    raise
                notice(f"retromae: note: {error}; {again}")
                damaged = _identity(path)
        with writing(path), private_folder(path) as tmp:
            build(tmp)
            share_as_umask_allows(tmp)
            if damaged is not None:
                _move_aside(path, damaged)
            _rename_unless_there(tmp, path)
    return load(path)


def _identity(path: Path) -> tuple[int, int] | None:
    with contextlib.suppress(OSError):
        status = os.lstat(path)
        return status.st_dev, status.st_ino
    return None


def _move_aside(path: Path, identity: tuple[int, int] | None) -> None:
    """Remove the entry `path` when it is still the one of `identity` (found damaged): renamed to a private name
    first, so that no one finds it half deleted."""
    if identity is None or _identity(path) != identity:
        return
    aside = _temporary_folder(path)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, aside / "damaged")
    shutil.rmtree(aside, ignore_errors=True)


def _rename_unless_there(tmp: Path, path: Path) -> None:
    """Rename the folder `tmp` to `path` unless a folder is there already (another builder won: ours is dropped)."""
    try:
        os.rename(tmp, path)
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not path.is_dir():
            raise


@contextlib.contextmanager
def entry_lock(folder: Path, shared: bool = False) -> Iterator[None]:
    """Hold the lock of the cache folder `folder` (`LOCK_NAME` in it, created with the folder): exclusive while
    entries' files are moved into place and recorded there, `shared` while they are checked, so that no check sees
    a file moved in before its record. A `shared` lock of a folder that takes no file (a cache shared read-only) is
    taken on its lock file opened to read, or none where it has none (no builder has locked it)."""
    descriptor = _lock_file(Path(folder), shared)
    try:
        if descriptor is not None:
            fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _lock_file(folder: Path, shared: bool) -> int | None:
    """A descriptor of `folder`'s lock file, made with the folder; for a `shared` lock where they cannot be made,
    the lock file opened to read, None where there is none."""
    path = folder / LOCK_NAME
    try:
        with writing(path):
            folder.mkdir(parents=True, exist_ok=True)
            return open_own_file(path, os.O_RDWR | os.O_CREAT)
    except OSError as error:
        if not shared or error.errno not in REFUSED:
            raise
    return open_own_file(path, os.O_RDONLY) if os.path.lexists(path) else None
