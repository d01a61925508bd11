"""Which files an input argument reaches, by one rule for its readers and for a run's identity.

Owns: that a hidden name (starting with '.') is no input (`hidden`: a corpus folder's listing skips it, and so does a
fingerprint); the files under a folder its readers may reach (`folder_inputs`: recursive, linked folders entered, each
real folder once); the split of `hf:NAME[:CONFIG]` and the local folder it may name (`parse_hf_source`, `hf_folder`);
and the refusal of one file or folder reached by two arguments (`read_once`: a file named twice, through `./` or a
link, or a file beside the folder holding it). Does not own what a reader makes of the files (`retromae.data.corpus`),
nor their fingerprints (`retromae.runtime.run_folder.input_fingerprint`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from retromae.runtime.errors import DataError
from retromae.runtime.lines import quoted

HF_PREFIX = "hf:"


def hidden(name: str) -> bool:
    """Whether a name found by listing a folder is hidden ('.notes.jsonl', macOS's '._a.jsonl', '.git'): no reader
    of a folder reads it, as shells, `ls` and Hugging Face's data files leave it out, so no fingerprint covers it."""
    return name.startswith(".")


def folder_inputs(folder: Path, skipped: Collection[str] = ()) -> Iterator[Path]:
    """Every file under `folder` a reader may reach, as paths under it, in name order: folders linked from inside
    entered as readers open files through them (a data set's `qrels -> ../shared/qrels`), each real folder once (a
    link to a folder above cannot loop); hidden names (`hidden`) and folders named in `skipped` left out."""
    seen: set[str] = set()

    def walk(current: Path) -> Iterator[Path]:
        real = os.path.realpath(current)
        if real in seen:
            return
        seen.add(real)
        for entry in sorted(current.iterdir()):
            if hidden(entry.name) or entry.name in skipped:
                continue
            if entry.is_dir():
                yield from walk(entry)
            elif entry.is_file():
                yield entry

    yield from walk(Path(folder))


def parse_hf_source(source: str) -> tuple[str, str | None]:
    """Split `hf:NAME` or `hf:NAME:CONFIG` into (NAME, CONFIG); a NAME that is an existing path is kept whole."""
    rest = source[len(HF_PREFIX):]
    if not rest:
        raise DataError(f"{source!r}: give a dataset name or folder after 'hf:'")
    if Path(rest).exists() or ":" not in rest:
        return rest, None
    name, config = rest.rsplit(":", 1)
    return name, config or None


def hf_folder(source: object) -> tuple[Path, str | None] | None:
    """(the local folder, its config) that an `hf:` source names, as `datasets.load_dataset` reads it; None for a
    hub name or anything else."""
    if not (isinstance(source, str) and source.startswith(HF_PREFIX)):
        return None
    name, config = parse_hf_source(source)
    return (Path(name), config) if Path(name).is_dir() else None


def read_once(reached: Iterable[tuple[str, Path]], what: str, flag: str = "") -> None:
    """The one rule that a command reads no file or folder twice: of the (argument, path it reaches) pairs, a path
    reached by two arguments (the same file or folder: named twice, through `./`, `..` or a link, or a file beside
    its own folder) refused in one line naming both and the path they reach (`flag`: the option, when the caller
    knows it); never read twice in silence (a corpus trained on twice, a data set scored twice)."""
    seen: dict[tuple[int, int], str] = {}
    for argument, path in reached:
        status = path.stat()
        key = (status.st_dev, status.st_ino)
        named = quoted(argument) + ("" if Path(argument) == path else f" (by {quoted(str(path))})")
        if key in seen:
            raise DataError(f"{flag + ': ' if flag else ''}{seen[key]} and {named} name one {what}, "
                            f"{quoted(os.path.realpath(path))}: give each once")
        seen[key] = named
