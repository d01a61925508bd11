"""One output belongs to one run: claiming output folders and files, and telling runs apart.

Owns: the marker `retromae-run.json` a command leaves in its output folder (the command and the run's identity:
the options that define its result plus fingerprints of its input files), the rule that a folder holding another
run's outputs is refused unless `--resume` continues that same run or `--overwrite` clears it (only the files the
command itself writes; anything else a user keeps there stays), the same rule for single-file outputs, and the
list of options that differ between two runs. Does not own what the outputs hold, nor checkpoints (`train.py`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from retromae.config import ConfigError, config_to_dict, option
from retromae.io import write_text_atomic

MARKER = "retromae-run.json"
FINGERPRINT_BYTES = 1 << 20  # head and tail of each file read for its fingerprint
# Options that say how long, how verbosely or where a training runs, not what it computes: a resumed run may change
# them (a larger --max-steps trains longer; the learning-rate schedule then follows the new length). The probes'
# sample and metric stay part of a run, so that its probe scores (and its best probe) compare across a resume.
RUN_NEUTRAL = frozenset({"output", "max_steps", "epochs", "log_every", "save_every", "keep_checkpoints", "resume",
                         "overwrite", "num_workers", "cache_dir", "gradient_checkpointing", "compile",
                         "progress", "probe_every", "probe_batch_size", "report_to", "distributed_timeout"})
# Options naming input files or folders, fingerprinted by content so that a changed file is a different run.
INPUT_OPTIONS = ("model", "init_from", "corpus", "queries", "pairs", "data", "input", "embeddings")


@dataclasses.dataclass(kw_only=True)
class OutputOptions:
    """`--overwrite`, shared by every command that writes an output folder or file."""

    overwrite: bool = option(False, "replace the outputs of an earlier run at --output (only the files this command "
                                    "writes; other files there are kept)")


def file_fingerprint(path: Path) -> str:
    """Size plus a hash of the first and last MiB: cheap on large corpora, changed by any edit that shifts bytes."""
    size = path.stat().st_size
    digest = hashlib.sha1(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            handle.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(handle.read())
    return f"{size}:{digest.hexdigest()[:16]}"


def input_fingerprint(source: str | Path) -> str:
    """A file's fingerprint, a folder's over its files (hidden ones and our own checkpoints skipped), or the name
    itself for what is not on disk (a hub model, `hf:DATASET`)."""
    if not source:
        return ""
    path = Path(source)
    if path.is_file():
        return file_fingerprint(path)
    if not path.is_dir():
        return str(source)
    digest = hashlib.sha1()
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path)
        if file.is_file() and not any(part.startswith(".") or part == "checkpoints" for part in relative.parts):
            digest.update(f"{relative}={file_fingerprint(file)}\n".encode())
    return digest.hexdigest()[:16]


def run_identity(config: Any, neutral: Iterable[str] = RUN_NEUTRAL) -> dict[str, Any]:
    """The options of `config` that define its result, plus `NAME content` fingerprints of its input options."""
    values = {key: resolved_paths(value) for key, value in config_to_dict(config).items() if key not in set(neutral)}
    for name in INPUT_OPTIONS:
        given = values.get(name)
        if given:
            sources = given if isinstance(given, list) else [given]
            values[f"{name} content"] = [input_fingerprint(source) for source in sources]
    return values


def resolved_paths(value: Any) -> Any:
    """`value` with every string that names an existing file or folder made absolute, so that `data/x` given from
    the repository and `/abs/repo/data/x` given from elsewhere are the same run."""
    if isinstance(value, list):
        return [resolved_paths(item) for item in value]
    if isinstance(value, str) and value and Path(value).exists():
        return str(Path(value).resolve())
    return value


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The option names whose values differ between two identities."""
    return sorted(key for key in set(saved) | set(current) if saved.get(key) != current.get(key))


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of `folder` (command and identity), or None when there is none or it is unreadable."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def write_marker(folder: Path, command: str, identity: Mapping[str, Any]) -> None:
    write_text_atomic(Path(folder) / MARKER, json.dumps({"command": command, "identity": identity}, indent=2) + "\n")


def check_same_run(where: Path, command: str, saved: Mapping[str, Any] | None, identity: Mapping[str, Any]) -> None:
    """ConfigError unless `saved` (a marker) records this command with this identity; lists the differing options."""
    if saved is None:
        raise ConfigError(f"{where}: holds outputs with no record of the run that wrote them; cannot check it is "
                          "the same run: use --overwrite to replace them, or another --output")
    if saved.get("command") != command:
        raise ConfigError(f"{where}: holds the outputs of `retromae {saved.get('command')}`, not of `retromae "
                          f"{command}`: use --overwrite to replace them, or another --output")
    changed = differences(saved.get("identity", {}), identity)
    if changed:
        raise ConfigError(f"{where}: belongs to another run ({', '.join(changed)} differ); give the same options, "
                          "or use --overwrite to replace it, or another --output")


def claim_folder(folder: str | Path, command: str, identity: Mapping[str, Any], ours: Iterable[str], *,
                 resume: bool = False, overwrite: bool = False, resumable: bool = True, processes: Any = None) -> None:
    """Make `folder` this run's before any work: none of `ours` there (only unrelated files): take it; the same run with
    `resume`: continue; with `overwrite`: delete `ours` (the names this command writes) and take it; else refuse.

    Every process checks; only the main one of `processes` (an Accelerator or PartialState) then writes."""
    stale = _check_folder(Path(folder), command, identity, ours, resume, overwrite, resumable)
    if processes is not None:
        processes.wait_for_everyone()
    if processes is None or processes.is_main_process:
        for path in stale:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        write_marker(folder, command, identity)
    if processes is not None:
        processes.wait_for_everyone()


def _check_folder(folder: Path, command: str, identity: Mapping[str, Any], ours: Iterable[str], resume: bool,
                  overwrite: bool, resumable: bool) -> list[Path]:
    """The outputs to delete before taking `folder` (none unless `overwrite`); ConfigError when it is not ours."""
    present = [folder / name for name in ours if (folder / name).exists()]
    if overwrite or not present:  # nothing of an earlier run (at most the marker of one that failed at once)
        return present
    marker = read_marker(folder)
    if resume:
        check_same_run(folder, command, marker, identity)
        return []
    saved = marker or {}
    changed = differences(saved.get("identity", {}), identity) if saved.get("command") == command else []
    # --resume is named only where it would work: the same command with the same options.
    same = saved.get("command") == command and not changed
    ways = "--resume continues it, --overwrite replaces it" if resumable and same else "--overwrite replaces it"
    which = f" ({', '.join(changed)} differ)" if changed else ""
    raise ConfigError(f"{folder}: holds the outputs of another run of `retromae {saved.get('command', '?')}`{which}"
                      f"; {ways}, or choose another --output")


def claim_file(path: str | Path | None, overwrite: bool, option_name: str = "output") -> None:
    """Refuse to replace an existing output file unless `overwrite` (the write itself is atomic, `retromae.io`)."""
    if path is not None and Path(path).exists() and not overwrite:
        raise ConfigError(f"{path}: exists; add --overwrite to replace it, or choose another "
                          f"--{option_name.replace('_', '-')}")
