"""Atomic file writing shared by every command: a killed process never leaves a half-written file.

Owns: writing text, JSON lines, numpy arrays and whole directories through a temporary name and a rename, with
the permissions an ordinary write would give under the user's umask (the temporary names start private: 0600
files, 0700 folders, and a colleague could not read an exported model); appending a line whole or not at all; and
turning a failed write into one `FileSystemError` naming the path the user asked for and the cause (`writing`; any
other OSError naming a path, at the API's entry points: `named_os_errors`),
also where the library that wrote (torch, safetensors, numpy) reports a full disk in its own words; the names of
retromae's own files beside an output (`own_prefix`: its temporary files and its lock, any legal output name fitting
them) and the clearing of a killed write's temporary files (`clear_leftovers`); the one writer through a memory map
(`atomic_array`: its blocks reserved first, so that a full disk is an error, not a SIGBUS); and the rule of
what a write may replace (`replaced_file`, `replaced_folder`): a file output only a regular file (through a symbolic
link to one, which stays), a folder output only a folder, never a device, a FIFO, a socket or a link to nothing;
the environment's path variables (`path_variable`), the cache folder (`cache_folder`, `check_cache_setting`) and
whether a folder takes a new file (`refused_write`, `check_writable`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from retromae.runtime.errors import UNSHOWABLE, ConfigError, FileSystemError, RetroMAEError, os_error_line
from retromae.runtime.lines import check_own_file, file_kind, open_own_file, quoted

CACHE_ENV = "RETROMAE_CACHE"  # the folder of retromae's caches (`cache_folder`)
# Every environment variable retromae reads a path from itself (`path_variable`): its cache, and where
# huggingface_hub caches models (`preflight.hub_cache`)
PATH_VARIABLES = (CACHE_ENV, "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")

FULL_BELOW = 1 << 20  # free bytes under which a failed write is put down to a full disk
RUST_OS_ERROR = re.compile(r"\(os error ([0-9]+)\)")  # how Rust libraries (safetensors, tokenizers) quote errno
TEMPORARY = re.compile(r"[a-z0-9_]{8}\.tmp")  # what `tempfile` puts after our prefix: 8 random characters and .tmp
OWN_EXTRA = len(".") + len(".XXXXXXXX.tmp")  # the most characters our own names beside a file add to its name
NAME_MAX = 255  # the limit of a name in bytes, where the file system does not say (`os.pathconf`)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Raise a failure of the operating system while writing `path` (or its temporary name) as a FileSystemError
    naming `path` and the cause. A library's error holding a system error number in its text (safetensors' "(os
    error 28)") has that cause; one without (torch's "unexpected pos", numpy's "requested and written") on a file
    system with less than FULL_BELOW bytes free is a full disk. An OSError naming another file goes through as it
    is (it names its path), and so does every other error (not the file system's)."""
    try:
        yield
    except Exception as error:
        if isinstance(error, RetroMAEError) or not _writer_error(error):
            raise
        named = getattr(error, "filename", None)
        if named is not None and not os.fsdecode(named).startswith(str(Path(path).parent / own_prefix(path))):
            raise
        cause = error.strerror if isinstance(error, OSError) and error.errno else None
        if cause is None and (number := RUST_OS_ERROR.search(str(error))):
            cause = os.strerror(int(number.group(1)))
        if cause is None and _nearly_full(Path(path)):
            cause = os.strerror(errno.ENOSPC)
        if cause is None:
            raise
        raise FileSystemError(f"{path}: cannot write: {cause}") from error


@contextlib.contextmanager
def named_os_errors() -> Iterator[None]:
    """Within: an OSError naming a path that no retromae error stands for (a write of a library, a folder made inside
    a claimed output) raised as a FileSystemError of the one line the CLI prints for it (`errors.os_error_line`: the
    path and the cause), so that a caller of the Python API catches every refusal of the file system as one class.
    Entered by the API's entry points (`run_folder.quiet_entry_point`)."""
    try:
        yield
    except OSError as error:
        if isinstance(error, RetroMAEError) or error.filename is None:
            raise
        raise FileSystemError(os_error_line(error)) from error


def _writer_error(error: Exception) -> bool:
    """Whether `error` is the kind a writer raises when the file system fails it (torch raises RuntimeError,
    safetensors its own SafetensorError, recognised by name so that `retromae --help` need not import it)."""
    return isinstance(error, (OSError, RuntimeError)) or type(error).__name__ == "SafetensorError"


def _nearly_full(path: Path) -> bool:
    """Whether the file system holding `path` (or its nearest existing folder) has less than FULL_BELOW bytes free."""
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    try:
        return shutil.disk_usage(existing).free < FULL_BELOW
    except OSError:
        return False


def replaced_file(path: Path, what: str = "output") -> Path:
    """The file a write to `path` replaces: `path` when nothing or a regular file is there; the regular file a
    symbolic link at `path` points to (the write goes through the link, which stays, as a shell's `>` would write).
    FileSystemError naming `path` for anything else there (a device, a FIFO, a socket, a folder, a link to nothing),
    which a rename would destroy; its advice names `what` (an option, e.g. --output)."""
    path = Path(path)
    kind = _kind_there(path)
    if kind is not None:
        raise FileSystemError(f"{path}: is {kind}, not a regular file; a write replaces only a regular file: choose "
                              f"another {what}")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def replaced_folder(path: Path, what: str = "output") -> None:
    """FileSystemError naming `path` when something other than a folder is there (a file, a device, a FIFO, a
    socket, a link to nothing): a folder output replaces only a folder."""
    kind = _kind_there(Path(path))
    if os.path.lexists(path) and kind != "a folder":
        raise FileSystemError(f"{path}: is {kind or 'a file'}, not a folder; choose another {what}")


def check_folder_option(path: str | Path, writes: bool = True) -> None:
    """The check of an option naming a folder a command writes in (a cache): ValueError when something other than a
    folder is there (`replaced_folder`) or where it would be made (a file among its parents), or, unless `writes` is
    False, when the folder (else the nearest folder above, where it would be made) refuses a new file
    (`refused_write`); so that it is refused with the other options, before any work."""
    path = Path(path)
    try:
        replaced_folder(path, "folder")
    except FileSystemError as error:
        raise ValueError(str(error)) from None
    blocking = next((parent for parent in path.parents if os.path.lexists(parent) and not parent.is_dir()), None)
    if blocking is not None:
        raise ValueError(f"{path}: cannot be made: {blocking} is {_kind_there(blocking) or 'a file'}, not a folder")
    existing = next(folder for folder in (path, *path.parents) if os.path.lexists(folder))
    if writes and (cause := refused_write(existing)) is not None:
        where = "" if existing == path else f" (it would be made in {existing})"
        raise ValueError(f"{path}: cannot be written{where}: {cause}; choose another folder")


def refused_write(folder: Path) -> str | None:
    """Why the folder `folder` takes no new file (the operating system's words: "Permission denied", "Read-only file
    system"), None when it takes one. Asked of the system by making a file there and dropping it (unnamed where the
    system can, O_TMPFILE: nothing shows in the folder): permission bits do not answer it, which root passes whatever
    they say while a read-only mount, an ACL or a network file system's mapping of root still refuses (`os.access`
    says yes to root)."""
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        return error.strerror or str(error)
    return None


def path_variable(name: str) -> Path | None:
    """The path the environment variable `name` holds, None when it is unset or empty. ConfigError naming the variable
    when its value begins or ends with white space or holds a character a terminal acts on (`errors.UNSHOWABLE`: a
    newline, ESC), which no folder a user means has (a shell's quoting, a pasted line's end): a path ending in a space
    or a newline is made as given, where no one looks. The one reader of every path variable retromae reads itself
    (`PATH_VARIABLES`)."""
    value = os.environ.get(name, "")
    if value != value.strip() or UNSHOWABLE.search(value):
        raise ConfigError(f"${name}={quoted(value)}: begins or ends with white space, or holds a control character, "
                          "which a path keeps (a folder made where no one looks); fix or unset it")
    return Path(value) if value else None


def cache_folder() -> Path:
    """The folder retromae keeps its caches in (token stores, exports, measurements): $RETROMAE_CACHE, else
    ~/.cache/retromae."""
    return path_variable(CACHE_ENV) or Path.home() / ".cache" / "retromae"


def check_cache_setting(writes: bool = False) -> None:
    """ConfigError for a malformed path variable (`PATH_VARIABLES`, `path_variable`); FileSystemError naming
    $RETROMAE_CACHE when it is set to a place no folder can be, and, for a command that `writes` in the cache, naming
    the cache (the setting or the default) when it refuses a new file (`check_folder_option`). Asked before any work
    (`preflight.check_settings`: by the CLI before a command's options, by `check_config` with `writes`), so that no
    command claims its output first."""
    for name in PATH_VARIABLES:
        path_variable(name)
    if os.environ.get(CACHE_ENV) or writes:
        check_writable(cache_folder(), writes)


def check_writable(folder: Path, writes: bool = True) -> None:
    """FileSystemError when the folder `folder` cannot be (made and) written (`check_folder_option`), naming the
    cache's setting ($RETROMAE_CACHE, else the default cache) where `folder` lies in the cache folder. The one
    wording of a cache that takes no file: the preflight's (`check_cache_setting`) and that of a cache entry about
    to be built (`cache_entries.private_folder`: an export, a token store)."""
    try:
        check_folder_option(folder, writes)
    except ValueError as error:
        cache = cache_folder()
        setting = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the default cache"
        raise FileSystemError(f"{setting}: {error}" if Path(folder).is_relative_to(cache) else str(error)) from None


def _kind_there(path: Path) -> str | None:
    """What is at `path` when it is neither nothing nor a regular file (`file_kind`; a symbolic link followed, one
    to nothing said so); None for nothing there or a regular file."""
    if not os.path.lexists(path):
        return None
    try:
        kind = file_kind(path)
    except OSError as error:  # a loop of symbolic links, a folder that may not be searched
        raise FileSystemError(f"{path}: cannot be written: {error.strerror}") from error
    return f"a dangling symbolic link (to {os.readlink(path)})" if kind == "missing" else kind


@contextlib.contextmanager
def atomic_path(path: Path, own: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside the file `path` names (`replaced_file`); on success it replaces that file in
    one rename. `own`: a file retromae keeps for itself in a folder it manages (a run's config.json): anything but a
    regular file there is refused (`runtime.lines.check_own_file`), a symbolic link never written through."""
    if own:
        check_own_file(path)
    path = replaced_file(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=own_prefix(path), suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            yield tmp
            share_as_umask_allows(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def own_prefix(path: Path) -> str:
    """How the names of retromae's own files beside `path` begin: `.NAME.` (its temporary files while writing it,
    `atomic_path` and `atomic_directory`; a file output's lock, `run_folder.claim_file`), NAME a digest of the name
    where the longest of them (`.NAME.XXXXXXXX.tmp`) would pass the file system's limit on a name though the name
    itself does not, so that any name a file may have can be claimed and written (a name past the limit keeps
    NAME, so that its claim fails before the work)."""
    path = Path(path)
    size = len(os.fsencode(path.name))
    if size <= _name_max(path.parent) < size + OWN_EXTRA:
        return f".{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:32]}."
    return f".{path.name}."


def _name_max(folder: Path) -> int:
    """The longest name in bytes the file system of `folder` (or of its nearest existing parent) takes."""
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("."))
    try:
        return os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def clear_leftovers(path: Path) -> None:
    """Remove the temporary files (or folders) that a killed write of `path` left beside it: the names `own_prefix`
    and `tempfile` make, exactly, and nothing else. Called by the holder of `path`'s claim (no other write of it can
    be under way), so that a killed run's leftovers go with its next run."""
    path = Path(path)
    prefix = own_prefix(path)
    with contextlib.suppress(OSError):
        for name in os.listdir(path.parent):
            if name.startswith(prefix) and TEMPORARY.fullmatch(name[len(prefix):]):
                found = path.parent / name
                shutil.rmtree(found) if found.is_dir() and not found.is_symlink() else found.unlink()


@contextlib.contextmanager
def atomic_array(path: Path, shape: tuple[int, ...], dtype: str = "<f4") -> Iterator[Any]:
    """Yield a writable memory map of a new .npy file of `shape` and `dtype` at a temporary name beside `path`
    (`atomic_path`), every block of it reserved first (`reserve`): a full disk is then a FileSystemError before
    anything is written, never a SIGBUS through the map (which ends the process with no message and its claim and
    temporary file left). Flushed and put in place of `path` when the block ends without error. The one way retromae
    writes a file through a memory map."""
    import numpy as np  # here: io is read by every command's --help

    with atomic_path(path) as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.dtype(dtype), shape=shape)  # sparse: no page yet
        reserve(tmp)
        yield array
        array.flush()


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


def write_text_atomic(path: Path, text: str, own: bool = False) -> None:
    """Write `text` to `path` atomically (UTF-8); `own` as `atomic_path` says."""
    with atomic_path(path, own) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; on success it replaces `path` (a folder, `replaced_folder`)."""
    path = Path(path)
    replaced_folder(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=own_prefix(path), suffix=".tmp", dir=path.parent))
        try:
            yield tmp
            share_as_umask_allows(tmp)
            old = path.with_name(f"{own_prefix(path)}old")
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to `path`, a file retromae keeps for itself in a folder it manages (a run's
    metrics.jsonl: `runtime.lines.open_own_file`, so never through a link nor into a FIFO), in one write; a write cut
    short (a full disk) is taken back, so the file ends with the record whole or without it. (A kill inside that one
    write may still tear it: readers of appended files drop a torn last line.)"""
    data = (line + "\n").encode("utf-8")
    path = Path(path)
    with writing(path):
        fd = open_own_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            start = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
            except OSError:
                os.ftruncate(fd, start)
                raise
            if written < len(data):
                os.ftruncate(fd, start)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(fd)


def check_free_space(folder: Path, needed: int, what: str) -> None:
    """FileSystemError naming `folder` when its file system has less than `needed` bytes free for `what` (checked
    before the work, so that a full disk is not found after it)."""
    folder = Path(folder)
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise FileSystemError(f"{folder}: {free / 1e6:,.1f} MB free, {what} needs about {needed / 1e6:,.1f} MB; "
                              "free some space or choose another output")


def reserve(path: Path) -> None:
    """Give every byte of the file `path` its blocks on disk now: a file written through a memory map would
    otherwise meet a full disk as a SIGBUS that kills the process, not as an error."""
    descriptor = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(descriptor, 0, os.fstat(descriptor).st_size)
    finally:
        os.close(descriptor)
