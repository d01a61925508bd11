"""One output belongs to one run: claiming output folders and files, and telling runs apart.

Owns: the marker `retromae-run.json` a command leaves in its output folder (the command, one of `MARKER_COMMANDS`, and
the run's identity: the options that define its result plus fingerprints of its input files), the rule that a folder
holding another run's outputs is refused unless `--resume` continues that same run or `--overwrite` clears it (only the
files the command itself writes, and only where a run of the same command wrote them: never another command's outputs,
nor files no run recorded; anything else a user keeps there stays), the same rule for single-file outputs, and the list
of options that differ between two runs; that an output never overlaps a command's inputs, given or named by the records
of an input folder (`check_apart`, `recorded_inputs`; before anything is deleted); that a run which fails before its
lasting work began (`mark_started`: a training's first step; the whole of a command whose outputs are kept only whole,
such as `index` and `report`) leaves its folder as it found it for the corrected command: what it wrote there removed
and its claim taken back (`abandon`, which the CLI and the Python API run when a command fails; a killed run's leftovers
are cleared by the next run of the command); and that one process at a time writes an output: claiming one takes an
operating-system lock (`fcntl.flock` on `.retromae.lock` in a folder, `.NAME.lock` beside a file; in a distributed run
the main process holds it) until the command ends (the CLI) or the process exits (a library user); the system releases
it when the process dies, however it dies, so a killed run's `--resume` is never blocked. Claiming also checks first
that the output can be written (a folder where a folder should be, writable), and that the lock and the marker there are
regular files (`runtime.lines.check_own_file`: a symbolic link is never followed, a FIFO never opened). Does not own
what the outputs hold, nor checkpoints (`retromae.training.checkpoints`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import fnmatch
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from retromae.runtime.broadcast import from_main
from retromae.runtime.console import quiet_by_default
from retromae.runtime.errors import DataError, FileSystemError, tokenizer_panics
from retromae.runtime.input_files import HF_PREFIX, folder_inputs, hf_folder, hidden
from retromae.runtime.io import (
    clear_leftovers,
    named_os_errors,
    own_prefix,
    replaced_file,
    replaced_folder,
    write_text_atomic,
)
from retromae.runtime.lines import check_own_file, loads_finite, open_own_file, quoted
from retromae.runtime.options import ConfigError, Options, config_to_dict, option, path_options, reading_options
from retromae.runtime.precision import note_unresolved, precision_change, resolved_precision, unresolved

MARKER = "retromae-run.json"
# The commands whose runs leave a marker (`claim_folder`, `training.setup.claim_output`), `retromae.Encoder.save` and a
# training checkpoint's own: what a marker may record (`read_marker`)
MARKER_COMMANDS = ("adapt", "encode", "evaluate", "finetune", "index", "init-model", "pretrain", "quickstart",
                   "report", "train-reranker", "Encoder.save", "checkpoint")
HASH_CHUNK = 1 << 20  # bytes read per step of a fingerprint: memory stays flat on any file
_HASHED: dict[tuple, str] = {}  # (path, size, mtime, ctime, inode) -> fingerprint, for this process's life
LOCK_FILE = ".retromae.lock"
_HELD: dict[Path, tuple[int, int]] = {}  # lock file -> (descriptor, pid of the process that took it)
_CLAIMED: dict[Path, tuple[tuple[str, ...], bool]] = {}  # folder claimed here -> (names it writes, made by the claim)
# Options that say how long, how verbosely or where a training runs, not what it computes: a resumed run may change
# them (a larger --max-steps trains longer; the learning-rate schedule then follows the new length). The probes'
# sample and metric stay part of a run, so that its probe scores (and its best probe) compare across a resume.
# What a folder keeps that is made from its other files, skipped by its fingerprint (`input_fingerprint`): our training
# checkpoints, and the inference exports kept beside a model (`retromae.models.backends`), so that exporting a model
# does not change its identity.
DERIVED_FOLDERS = ("checkpoints", "onnx", "openvino")
RUN_NEUTRAL = frozenset({"output", "max_steps", "epochs", "log_every", "save_every", "keep_checkpoints", "resume",
                         "overwrite", "num_workers", "cache_dir", "gradient_checkpointing", "compile",
                         "progress", "probe_every", "probe_batch_size", "report_to", "distributed_timeout"})
# What the readers of an input folder read in it (a retrieval set, a model, an encoding, an index): an output file
# may be written into an input folder beside them (a run file beside its data set), never over one of them.
READ_IN_FOLDERS = ("corpus.jsonl", "queries.jsonl", "collection.tsv", "corpus.tsv", "queries.tsv", "qrels",
                   "sts-*.csv", "ids.txt", "embeddings.npy", "encode.json", "index.faiss", "index.json", "config.json",
                   "*.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "modules.json", "*.npy",
                   "params.json", "vocab.json", MARKER)  # *.npy, params.json, vocab.json: an index's and its bm25/'s
# The records an input folder may hold that name further inputs by absolute path: an index's and an encoding's
# description (written by `retrieval.index` and `retrieval.encode`: the model, the corpus or queries file) and a
# run's marker (its identity's inputs). What a command reads through them is an input as much as what it names.
RECORDS = ("index.json", "encode.json", MARKER)
RECORD_BYTES = 1 << 22  # a record larger than this is no record of ours: its paths are not followed


@dataclasses.dataclass(frozen=True)
class Naming:
    """How the refusals of a claim name what its caller was given: the command line's options (`COMMAND_LINE`), or a
    Python method's arguments (`Encoder.save`: `path`, `overwrite=True`), so that each refusal speaks its caller's
    words. Every message of `claim_folder`, `claim_file` and `check_apart` that names an option takes it from here."""

    output: str = "--output"
    overwrite: str = "--overwrite"
    resume: str = "--resume"


COMMAND_LINE = Naming()


@dataclasses.dataclass(kw_only=True)
class OutputOptions(Options):
    """`--overwrite`, shared by every command that writes an output folder or file."""

    overwrite: bool = option(False, "replace the outputs of an earlier run of this command at --output (only the "
                                    "files it writes; other files, another command's outputs and inputs are kept)")


def file_fingerprint(path: Path) -> str:
    """Size plus a sha256 of every byte, read in chunks (sha256 is the fastest hash of the standard library on CPUs
    with SHA instructions: about 2 GB/s, docs/benchmarks.md). A file is hashed once per process while its size,
    modification and change times and inode stay the same (any write changes the change time, which no one can set
    back), so that a run's identity and its token store's key share one pass."""
    path = Path(path)
    stat = path.stat()
    seen = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    if seen not in _HASHED:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
        _HASHED[seen] = f"{stat.st_size}:{digest.hexdigest()[:32]}"
    return _HASHED[seen]


def input_fingerprint(source: str | Path) -> str:
    """A file's fingerprint, a folder's over the files its readers may reach (`runtime.input_files.folder_inputs`:
    linked folders entered, hidden names and `DERIVED_FOLDERS` left out; each relative name hashed as the bytes the
    system gives, so that any name, UTF-8 or not, is fingerprinted), an `hf:` local folder's as that folder's with
    its config, or the name itself for what is not on disk (a hub model, `hf:DATASET`)."""
    if not source:
        return ""
    local = hf_folder(source)
    if local is not None:
        return f"{HF_PREFIX}{local[1] or ''}:{input_fingerprint(local[0])}"
    path = Path(source)
    if path.is_file():
        return file_fingerprint(path)
    if not path.is_dir():
        return str(source)
    digest = hashlib.sha1()
    for file in folder_inputs(path, DERIVED_FOLDERS):
        digest.update(os.fsencode(file.relative_to(path)) + f"={file_fingerprint(file)}\n".encode())
    return digest.hexdigest()[:16]


def fingerprinted(relative: PurePath) -> bool:
    """Whether a folder's fingerprint (`input_fingerprint`) covers what lies at `relative` in it: not what is hidden
    (`runtime.input_files.hidden`, `..` too) nor what is in `DERIVED_FOLDERS`. Whatever a reader of the folder reads
    must be covered (a model's modules: `models.model_source.module_path`)."""
    return not any(hidden(part) or part in DERIVED_FOLDERS for part in relative.parts)


def run_identity(config: Any, neutral: Iterable[str] = RUN_NEUTRAL) -> dict[str, Any]:
    """The options of `config` that define its result, its precision options as they resolve on this machine
    (`runtime.precision.resolved_precision`: what ran, never `auto`), plus `NAME content` fingerprints of its input
    options (those whose field declares what it reads, `runtime.options.reading_options`)."""
    paths = path_options(config)
    values = {key: resolved_paths(value, key) if key in paths else value
              for key, value in config_to_dict(config).items() if key not in set(neutral)}
    values.update({key: value for key, value in resolved_precision(config).items() if key in values})
    for name in reading_options(config):
        given = values.get(name)
        if given:
            sources = given if isinstance(given, list) else [given]
            values[f"{name} content"] = [input_fingerprint(source) for source in sources]
    return values


def resolved_paths(value: Any, name: str) -> Any:
    """The value of the path option `name` (`path_options`) with every string that names an existing file or folder
    made absolute, so that `data/x` given from the repository and `/abs/repo/data/x` given from elsewhere are the same
    run; a name the system cannot look up (a part longer than 255 bytes) refused in one line naming the option. Free
    text (a title, a prefix) is never a path: it stays as given."""
    if isinstance(value, list):
        return [resolved_paths(item, name) for item in value]
    if not (isinstance(value, str) and value):
        return value
    try:
        return str(Path(value).resolve()) if Path(value).exists() else value
    except OSError as error:
        raise ConfigError(f"--{name.replace('_', '-')}: cannot look up {quoted(value)}: "
                          f"{error.strerror or error}") from None


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The option names whose values differ between two identities (a precision `saved` recorded as `auto` before
    precision was resolved matches any: `runtime.precision.unresolved`)."""
    return sorted(key for key in set(saved) | set(current)
                  if saved.get(key) != current.get(key) and not unresolved(key, saved.get(key)))


def differ(changed: list[str], saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """" (a, b differ)" for the options `changed` between identities `saved` and `current`, with what a precision
    among them ran in and would now (`runtime.precision.precision_change`)."""
    detail = precision_change(saved, current)
    return f" ({', '.join(changed)} differ{': ' + detail if detail else ''})" if changed else ""


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of `folder` (command and identity), or None when there is none or it is no marker of ours:
    unreadable, or not an object recording one of `MARKER_COMMANDS` and an identity object (what the messages about
    a folder's run say of it, never a file's text); DataError naming it when something other than a regular file is
    there (`check_own_file`: a FIFO would block)."""
    path = Path(folder) / MARKER
    check_own_file(path)
    try:
        marker = loads_finite(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(marker, dict) and marker.get("command") in MARKER_COMMANDS and isinstance(marker.get("identity"),
                                                                                             dict):
        return marker
    return None


def write_marker(folder: Path, command: str, identity: Mapping[str, Any], started: bool = True) -> None:
    """Record the run of `command` (one of `MARKER_COMMANDS`, as `read_marker` reads it back) with `identity` in
    `folder`; `started` False: it has done no lasting work yet (`mark_started`), so that its folder is free again
    when it fails before then."""
    if command not in MARKER_COMMANDS:
        raise ValueError(f"write_marker: {command!r} is not one of MARKER_COMMANDS")
    record = {"command": command, "identity": identity, **({} if started else {"started": False})}
    write_text_atomic(Path(folder) / MARKER, json.dumps(record, indent=2) + "\n")


def mark_started(folder: str | Path, processes: Any = None) -> None:
    """Record that the run claiming `folder` (with `claim_folder(..., started=False)`) began its lasting work (its
    first training step): from now on its outputs are kept as any run's. Before, a failed run's folder is taken by
    the next run of the same command as if empty. Only the main process of `processes` writes."""
    marker = read_marker(Path(folder))
    if marker is not None and not _started(marker) and (processes is None or processes.is_main_process):
        marker.pop("started")
        write_text_atomic(Path(folder) / MARKER, json.dumps(marker, indent=2) + "\n")


def _read_in(relative: Path) -> bool:
    """Whether a file at `relative` in an input folder is one its readers read (`READ_IN_FOLDERS`)."""
    name = relative.name.removesuffix(".gz")
    return any(Path(relative.parts[0]).match(pattern) or Path(name).match(pattern) for pattern in READ_IN_FOLDERS)


def _started(marker: Mapping[str, Any]) -> bool:
    return marker.get("started", True) is not False


def input_paths(config: Any) -> list[str]:
    """Every file or folder on disk that an input option of `config` names: the options whose field declares what it
    reads (`runtime.options.reading_options`: inputs, models and tokenizers given as folders)."""
    values = config_to_dict(config)
    given = [values.get(name) for name in reading_options(config)]
    return [item for value in given for item in (value if isinstance(value, list) else [value])
            if isinstance(item, str) and item and os.path.exists(item)]


def check_apart(output: str | Path, inputs: Iterable[str | Path], ours: Iterable[str] = (), kind: str = "folder",
                naming: Naming = COMMAND_LINE) -> None:
    """ConfigError when an output overlaps an input, given or named by an input's record (`recorded_inputs`): the
    same path, an output folder inside an input folder (it would change what the command reads), an output file
    over one an input folder is read by (`READ_IN_FOLDERS`), or an input where the command writes (`ours`, the
    names it writes in an output folder, `outputs_in`: --overwrite would delete it), or inside such a place. Checked
    before anything is deleted or written; said in the caller's words (`naming`)."""
    out = Path(os.path.realpath(output))
    for given, record in recorded_inputs(inputs):
        source = Path(os.path.realpath(given))
        inside = out == source or (source in out.parents and (kind == "folder" or _read_in(out.relative_to(source))))
        replaced = kind == "folder" and out in source.parents and _written(source.relative_to(out).parts[0], ours)
        if inside or replaced:
            named = f" (named in {record})" if record else ""
            raise ConfigError(f"{naming.output} {output}: overlaps {given}, which this command reads{named}; write "
                              f"its outputs elsewhere (another {naming.output})")


def outputs_in(folder: Path, ours: Iterable[str]) -> list[Path]:
    """What `folder` holds of the names a command writes there (`ours`: names, or patterns of names such as a sharded
    model's `model-*-of-*.safetensors`, `model_source.SAVED_FILES`): what a claim finds of an earlier run, deletes with
    --overwrite and takes back when its run fails (`claim_folder`, `abandon`)."""
    ours = tuple(ours)
    try:
        return [folder / name for name in sorted(os.listdir(folder)) if _written(name, ours)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _written(name: str, ours: Iterable[str]) -> bool:
    """Whether a command that writes `ours` (names and patterns of names, `outputs_in`) writes the name `name`."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ours)


def recorded_inputs(inputs: Iterable[str | Path]) -> list[tuple[str, Path | None]]:
    """Each input on disk with None, then each file or folder on disk that a record of an input folder names
    (`RECORDS`: the model and corpus of an index or an encoding, a run's inputs), with that record, followed through
    the records of those in turn: everything a command reads, directly or through a record."""
    found: list[tuple[str, Path | None]] = []
    queue: list[tuple[str, Path | None]] = [(str(given), None) for given in inputs if given]
    seen: set[str] = set()
    while queue:
        path, record = queue.pop(0)
        if not os.path.exists(path) or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        found.append((path, record))
        if os.path.isdir(path):
            for name in RECORDS:
                queue += [(named, Path(path) / name) for named in _named_paths(_recorded(Path(path) / name))]
    return found


def _recorded(path: Path) -> Any:
    """What of a record names inputs: all of an index's or an encoding's description, the input options of a run's
    marker (its other options are no paths, though a value such as a split may read as one)."""
    record = _read_record(path)
    if path.name != MARKER or not isinstance(record, dict) or not isinstance(record.get("identity"), dict):
        return None if path.name == MARKER else record
    identity = record["identity"]  # its input options are those fingerprinted in it (`run_identity`)
    return {name: value for name, value in identity.items() if f"{name} content" in identity}


def _read_record(path: Path) -> Any:
    """The JSON value of a record file, or None when it is absent, too large or unreadable (its reader says why)."""
    try:
        if not path.is_file() or path.stat().st_size > RECORD_BYTES:
            return None
        return loads_finite(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _named_paths(value: Any) -> list[str]:
    """Every absolute path to something on disk among the strings of a JSON value (records store paths absolute)."""
    if isinstance(value, dict):
        return [path for item in value.values() for path in _named_paths(item)]
    if isinstance(value, list):
        return [path for item in value for path in _named_paths(item)]
    return [value] if isinstance(value, str) and os.path.isabs(value) and os.path.exists(value) else []


def shown_command(command: Any) -> str:
    """How a message names the command a marker records (`MARKER_COMMANDS`): a method of the Python API as it is
    called (`retromae.Encoder.save`), a command of the CLI as it is typed (`retromae pretrain`)."""
    return f"`retromae.{command}`" if "." in str(command) else f"`retromae {command}`"


def check_same_run(where: Path, command: str, saved: Mapping[str, Any] | None, identity: Mapping[str, Any],
                   naming: Naming = COMMAND_LINE) -> None:
    """ConfigError unless `saved` (a marker) records this command with this identity; lists the differing options."""
    instead = f"use {naming.overwrite} to replace them, or another {naming.output}"
    if saved is None:
        raise ConfigError(f"{where}: holds outputs with no record of the run that wrote them; cannot check it is "
                          f"the same run: {instead}")
    if saved.get("command") != command:
        raise ConfigError(f"{where}: holds the outputs of {shown_command(saved.get('command'))}, not of "
                          f"{shown_command(command)}: {instead}")
    changed = differences(saved.get("identity", {}), identity)
    if changed:
        raise ConfigError(f"{where}: belongs to another run{differ(changed, saved.get('identity', {}), identity)}; "
                          f"give the same options, or use {naming.overwrite} to replace it, or another {naming.output}")


def claim_folder(folder: str | Path, command: str, identity: Mapping[str, Any], ours: Iterable[str], *,
                 resume: bool = False, overwrite: bool = False, resumable: bool = True, processes: Any = None,
                 inputs: Iterable[str | Path] = (), started: bool = True, naming: Naming = COMMAND_LINE,
                 unrecorded: Callable[[Path], bool] | None = None) -> None:
    """Make `folder` this run's before any work: none of `ours` there (only unrelated files): take it; the same run with
    `resume`: continue; with `overwrite`: delete `ours` (the names this command writes) where an earlier run of this
    command wrote them, and take it; else refuse. `inputs` (the paths the command reads) must lie apart from it
    (`check_apart`). `started` False: the run marks itself started later (`mark_started`); until then, a failure
    leaves the folder free for the next run of this command. Once taken, a killed run's temporary files of `ours` and
    of the marker are removed (`clear_leftovers`). `ours` may hold patterns of names (`outputs_in`). `naming`: the
    words of the refusals (`Naming`). `unrecorded`: whether a folder holding no marker at all is as an earlier run of
    this command left it before its runs were recorded (`scratch.unrecorded_init_model`): replaced with `overwrite`.

    Every process checks; only the main one of `processes` (an Accelerator or PartialState) takes the folder's lock
    (`hold`) and then writes."""
    ours = tuple(ours)
    check_apart(folder, inputs, ours, naming=naming)
    made = not os.path.exists(folder)
    main = processes is None or processes.is_main_process
    refusal = hold(Path(folder), Path(folder) / LOCK_FILE, resumable) if main else None
    if processes is not None and processes.num_processes > 1:
        refusal = _from_main(refusal, processes)
    if refusal is not None:
        raise refusal
    stale, continued = _check_folder(Path(folder), command, identity, ours, resume, overwrite, resumable, naming,
                                     unrecorded)
    if processes is not None:
        processes.wait_for_everyone()
    if processes is None or processes.is_main_process:
        if continued:
            note_unresolved(Path(folder), (read_marker(Path(folder)) or {}).get("identity", {}), identity)
        _remove(stale)
        for name in (*ours, MARKER):
            clear_leftovers(Path(folder) / name)
        write_marker(folder, command, identity, started=started or continued)
        _CLAIMED[Path(os.path.abspath(folder))] = (ours, made)
    if processes is not None:
        processes.wait_for_everyone()


def check_claim(folder: str | Path, command: str, identity: Mapping[str, Any], ours: Iterable[str], *,
                overwrite: bool = False, resumable: bool = True, inputs: Iterable[str | Path] = (),
                naming: Naming = COMMAND_LINE, unrecorded: Callable[[Path], bool] | None = None) -> None:
    """Refuse now what `claim_folder` given the same arguments would refuse of the folder and the inputs, writing and
    taking nothing: for a command that has work to do before it may claim (`init-model` trains its tokenizer, then
    checks the sizes it makes), so that its refusals come before that work and it claims only once nothing can refuse
    but the folder's lock and the file system. `claim_folder` checks all again when it takes the folder."""
    ours = tuple(ours)
    check_apart(folder, inputs, ours, naming=naming)
    if os.path.isdir(folder):
        _check_folder(Path(folder), command, identity, ours, False, overwrite, resumable, naming, unrecorded)


def _remove(paths: Iterable[Path]) -> None:
    for path in paths:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def abandon(keep: Collection[Path] = ()) -> None:
    """After a command failed: each folder this process claimed whose run had not begun its lasting work (its marker
    says not started, `mark_started`) is left as the command found it for the next run: the names its command writes
    there (`ours`) removed, its marker too, and the folder when the claim made it and it is left empty; a started
    run's folder (checkpoints to resume, finished shards) is kept.
    Then the claims are released (`release`); those whose lock files are in `keep` (held before a call of the Python
    API) are left alone. Run by the CLI and the Python API when a command raises."""
    unstarted = []
    for folder, (ours, made) in list(_CLAIMED.items()):
        marker = read_marker(folder)
        if folder / LOCK_FILE not in keep and marker is not None and not _started(marker):
            with contextlib.suppress(OSError):  # the failure being reported may be the disk's: say that one
                _remove(outputs_in(folder, ours))
                (folder / MARKER).unlink()
            unstarted += [folder] if made else []
    release(keep)
    for folder in unstarted:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty


def _check_folder(folder: Path, command: str, identity: Mapping[str, Any], ours: Iterable[str], resume: bool,
                  overwrite: bool, resumable: bool, naming: Naming = COMMAND_LINE,
                  unrecorded: Callable[[Path], bool] | None = None) -> tuple[list[Path], bool]:
    """The outputs to delete before taking `folder` (none unless `overwrite`, or an earlier run of this command that
    failed before its first step), and whether this run continues a started one; ConfigError when it is not ours."""
    present = outputs_in(folder, ours)
    marker = read_marker(folder)
    if marker is not None and marker.get("command") != command and (present or _started(marker)):
        raise ConfigError(f"{folder}: holds the outputs of {shown_command(marker.get('command'))}; "
                          f"{shown_command(command)} never writes over another command's outputs (not even with "
                          f"{naming.overwrite}): choose another {naming.output}")
    if not present:  # nothing of an earlier run (at most the marker of one that failed at once)
        return [], False
    if marker is None:
        return _unrecorded_outputs(folder, command, present, overwrite, naming, unrecorded), False
    if not _started(marker):  # an earlier run of this command failed before its first step: nothing to keep
        same = resume and not differences(marker.get("identity", {}), identity)
        return ([] if same else present), False
    if overwrite:
        return present, False
    if resume:
        check_same_run(folder, command, marker, identity, naming)
        return [], True
    changed = differences(marker.get("identity", {}), identity)
    # --resume is named only where it would work: the same command with the same options.
    ways = f"{naming.overwrite} replaces it"
    ways = f"{naming.resume} continues it, {ways}" if resumable and not changed else ways
    which = differ(changed, marker.get("identity", {}), identity) if changed else \
        " with these options" + ("" if resumable else ", which does not resume")
    raise ConfigError(f"{folder}: holds the outputs of {'another' if changed else 'an earlier'} run of "
                      f"{shown_command(command)}{which}; {ways}, or choose another {naming.output}")


def _unrecorded_outputs(folder: Path, command: str, present: list[Path], overwrite: bool, naming: Naming,
                        unrecorded: Callable[[Path], bool] | None) -> list[Path]:
    """The outputs to delete from `folder`, which holds `present` of this command's names and no marker of ours:
    those of an earlier run of this command made before its runs were recorded (`unrecorded` says so of a folder
    holding no marker file at all), with `overwrite`; ConfigError otherwise (files no run recorded are kept)."""
    if unrecorded is not None and not os.path.lexists(folder / MARKER) and unrecorded(folder):
        if overwrite:
            return present
        raise ConfigError(f"{folder}: holds the outputs of an earlier run of {shown_command(command)}, made before its "
                          f"runs were recorded; {naming.overwrite} replaces them, or choose another {naming.output}")
    names = ", ".join(path.name for path in present[:3])
    raise ConfigError(f"{folder}: holds {names}, which no retromae run recorded writing (not outputs of "
                      f"{shown_command(command)}), so even {naming.overwrite} keeps them: move them, or choose another "
                      f"{naming.output}")


def claim_file(path: str | Path | None, overwrite: bool, option_name: str = "output",
               inputs: Iterable[str | Path] = ()) -> None:
    """Refuse to replace an existing output file unless `overwrite` (the write itself is atomic, `retromae.runtime.io`),
    a folder in its place, anything else that is not a regular file (a device, a FIFO, a socket, a link to nothing:
    `replaced_file`, the rule every write meets, checked here before the work), a file another process is writing
    (its lock `.NAME.lock`, `hold`, named by `io.own_prefix`), and a file among `inputs` (the paths the command reads,
    `check_apart`). Once claimed, a killed earlier write's temporary files beside it are removed (`clear_leftovers`)."""
    if path is None:
        return
    naming = dataclasses.replace(COMMAND_LINE, output=f"--{option_name.replace('_', '-')}")
    check_apart(path, inputs, kind="file", naming=naming)
    path = Path(path)
    if path.is_dir():
        raise FileSystemError(f"{path}: is a folder; {naming.output} takes a file name")
    replaced_file(path, naming.output)
    refusal = hold(path, path.parent / f"{own_prefix(path)}lock", resumable=False)
    if refusal is not None:
        raise refusal
    if path.exists() and not overwrite:
        raise ConfigError(f"{path}: exists; add {naming.overwrite} to replace it, or choose another {naming.output}")
    clear_leftovers(path)


def hold(output: Path, lock: Path, resumable: bool = True) -> Exception | None:
    """Take the lock file `lock` of `output` (a folder, created here, or a file) until `release`; the error to
    raise when another process holds it or the place cannot be written, else None (its advice names --resume only
    for a `resumable` command). The same process may claim an output again (a library user running twice)."""
    lock = Path(os.path.abspath(lock))
    if lock in _HELD:
        return None
    try:
        _make_folder(lock.parent)
        descriptor = _locked(lock)
    except (FileSystemError, DataError) as error:
        return error
    except BlockingIOError:
        holder = _holder(lock)
        then = "stop it, then --resume" if resumable else "stop it"
        return ConfigError(f"{output}: in use by another retromae process{holder}; wait for it to end (or {then}), "
                           "or choose another output")
    except OSError as error:
        return FileSystemError(f"{output}: cannot write here: {error.strerror or error}")
    _HELD[lock] = (descriptor, os.getpid())
    return None


def _make_folder(folder: Path) -> None:
    """Create `folder` and its parents; a file in its place (or in a parent's) is named."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in (folder, *folder.parents) if os.path.lexists(p) and not p.is_dir()), folder)
        if not os.path.isfile(blocking):
            replaced_folder(blocking)  # a FIFO, a device, a link to nothing: named as what it is
        raise FileSystemError(f"{blocking}: is a file, not a folder") from None


def _locked(lock: Path) -> int:
    """A descriptor of `lock` holding its exclusive lock (BlockingIOError when another process holds it), opened as a
    file of our own (`open_own_file`: DataError for a symbolic link, a FIFO, anything but a regular file there, so
    that no other file is truncated to our pid). Taken again when the file was removed meanwhile by the process that
    released it (`release`), so that two processes never hold locks on two different files of one name."""
    while True:
        descriptor = open_own_file(lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.exists(lock) and os.path.samestat(os.fstat(descriptor), os.stat(lock)):
                os.ftruncate(descriptor, 0)
                os.write(descriptor, f"{os.getpid()}\n".encode())
                return descriptor
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)


def _holder(lock: Path) -> str:
    """" (pid N)" for the process that wrote its id into `lock`, or "" when it cannot be read."""
    try:
        pid = int(lock.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})"


def held_here(lock: str | Path) -> bool:
    """Whether this process holds the lock file `lock` (it claimed the folder: its own outputs, readable)."""
    return Path(os.path.abspath(lock)) in _HELD


@atexit.register
def release(keep: Collection[Path] = ()) -> None:
    """Remove and unlock this process's lock files (but those in `keep`): when a command of the CLI or a call of the
    Python API ends, and when the process exits (a killed process leaves its files, unlocked). Not in forked
    children (data loader workers), whose copies of the descriptors close with them."""
    for lock, (descriptor, pid) in list(_HELD.items()):
        if pid == os.getpid() and lock not in keep:
            with contextlib.suppress(OSError):
                lock.unlink()
            os.close(descriptor)
            del _HELD[lock]
            _CLAIMED.pop(lock.parent, None)


@contextlib.contextmanager
def released_after() -> Iterator[None]:
    """The outputs claimed within the block are released when it ends (those held before stay): a call of the Python
    API frees its outputs when it returns, as a command of the CLI does; when it raises, what it wrote before its
    lasting work began is removed first (`abandon`)."""
    held = set(_HELD)
    try:
        yield
    except BaseException:
        abandon(keep=held)
        raise
    finally:
        release(keep=held)


def quiet_entry_point(function: Callable[..., Any]) -> Callable[..., Any]:
    """An entry point of the Python API (`console.quiet_by_default`: the libraries quiet, no `say` lines unless
    asked), its outputs released when it returns (`released_after`), so that a later command may continue them; a
    panic of the tokenizers library raised as a ModelLoadError (`errors.tokenizer_panics`) and an OSError naming a
    path as a FileSystemError (`io.named_os_errors`), as the CLI reports them."""
    quiet = quiet_by_default(function)

    @functools.wraps(function)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        with released_after(), tokenizer_panics(), named_os_errors():
            return quiet(*args, **kwargs)

    return entry_point


def _from_main(refusal: Exception | None, processes: Any) -> Exception | None:
    """The main process's refusal, on every process of `processes` (a collective: all call it, `from_main`), so that
    none waits for a main process that stopped."""
    received = from_main("" if refusal is None else f"{type(refusal).__name__}\t{refusal}", processes)
    if not received:
        return None
    kind, message = received.split("\t", 1)
    return (FileSystemError if kind == FileSystemError.__name__ else ConfigError)(message)
