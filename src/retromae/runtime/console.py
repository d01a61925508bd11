"""What a user sees on the terminal: named stages, one progress display each, summaries, and quiet libraries.

Owns: the progress bar every long step uses (`progress`: its name, count, rate and expected remaining time),
numbered stages of multi-stage commands (`Stages`: "2/5 pre-training RetroMAE (200 steps)"), short status
lines for steps too quick or too opaque for a bar (`step`), the end-of-training summary (`TrainingSummary`:
final losses, wall time, tokens/s) and the closing line of what a command wrote (`wrote`), and silencing the
libraries' own output around one command (`library_output`): transformers' and huggingface_hub's progress
bars, load reports and warnings, accelerate's and DeepSpeed's notices, bm25s's and tokenizers' per-call bars, Python
warnings raised inside those libraries. `--verbose` leaves all of it on.

Nothing happens at import. `library_output(verbose)` is a context manager the CLI enters around one command;
it restores every switch it turned on exit. The Python API's entry points (`retromae.pretrain(...)` and the others
`retromae/__init__.py` lists) are wrapped in `quiet_by_default` (by `run_folder.quiet_entry_point`, which also
releases their outputs), which enters `library_output(False)` for the call
unless the caller chose already (the CLI, or `with library_output(True):` around the call to see everything), so
a notebook sees what the CLI shows; code that calls deeper functions (the tests) sees the libraries as they are.
Whether libraries may speak is a context variable read by `verbose()`, so that code deep in a call (the BM25
wrapper) can pass `show_progress=verbose()` to the libraries without a parameter threaded through every caller.
Progress bars and stage lines go to stderr; summaries and results to stdout, a character its encoding lacks
escaped (`fitted`).

The one library module that prints. A command's run returns a `Result` (what the Python API returns, and the lines
the command prints, through `out`); lines a long run writes as it goes (a plan, the end-of-training summary) go through
`say` (standard output; silent within a Python API call unless the caller asks, `with speaking(True):`), warnings and
notes through `notice` (standard error, always); each of them, and the log records and Python warnings within a
command (`_printable_reports`), as the terminal should show them (`shown`, `runtime.errors.printable`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from retromae.runtime.errors import FileSystemError, os_error_line, printable

# Whether the libraries may print their own bars and reports: None until a command or an API call chooses (the
# libraries are then left as they are).
_VERBOSE: ContextVar[bool | None] = ContextVar("retromae_verbose", default=None)
# Whether `say` prints: None until an API call or a caller chooses (then it prints).
_SPEAKING: ContextVar[bool | None] = ContextVar("retromae_speaking", default=None)
Function = TypeVar("Function", bound=Callable[..., Any])
QUIET_LOGGERS = ("transformers", "accelerate", "sentence_transformers", "huggingface_hub", "bm25s", "torch",
                 "DeepSpeed")
QUIET_WARNING_MODULES = r"(transformers|accelerate|sentence_transformers|huggingface_hub|bm25s|torch)(\.|$)"
VERBOSITY_ENV = "TRANSFORMERS_VERBOSITY"
NOT_LOSSES = ("step", "lr", "head_lr", "tokens_per_s", "tokens")
# The tool's own symbols in what it shows, and what a stream whose encoding lacks one shows instead (`fitted`)
STAND_INS = {"·": "-", "→": "->", "←": "<-", "×": "x", "≤": "<=", "≥": ">=", "…": "...", "−": "-", "–": "-", "—": "--"}


def verbose() -> bool:
    """Whether the libraries' own progress bars and reports are wanted (False inside a quiet command)."""
    return _VERBOSE.get() is not False


def quiet_by_default(function: Function) -> Function:
    """An entry point of the Python API, run as the CLI runs a command: within `library_output(False)` (as without
    --verbose) unless a caller up the stack chose already (the CLI; `with library_output(True):`), its `say` lines
    silent unless asked (`speaking`). `run_folder.quiet_entry_point` adds the release of its outputs."""

    @functools.wraps(function)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        with (contextlib.nullcontext() if _VERBOSE.get() is not None else library_output(False)), \
                (contextlib.nullcontext() if _SPEAKING.get() is not None else speaking(False)):
            return function(*args, **kwargs)

    return entry_point  # type: ignore[return-value]


@dataclass(frozen=True)
class Result:
    """What a command's run produced: `value`, what the Python API returns (the folder or file written, the hits of
    `search --query`, the metrics), and `lines`, what the command prints on standard output."""

    value: Any
    lines: tuple[str, ...] = ()


def say(line: str, main_process: bool = True) -> None:
    """A line of what a long run is doing or did (a plan, a summary, the checkpoint it resumed from, a choice it made
    for the run) on standard output, `shown` and `fitted` to its encoding (a caller's stream is written as it is set,
    never reconfigured), unless within a Python API call that did not ask for it (`speaking`), or said by a process of
    a distributed run other than the main one (`main_process` False: the line is said once)."""
    if main_process and _SPEAKING.get() is not False:
        print(fitted(shown(line), sys.stdout), flush=True)


def out(text: str, end: str = "\n") -> None:
    """A command's lines for a reader on standard output (what it did, wrote or found, a table), `shown`."""
    print(shown(text), end=end)


def shown(text: str) -> str:
    """`text` as the terminal shows it: each of its lines `printable` (a path the user typed or a record holds, with an
    ESC or a carriage return in it), its line breaks kept. What every line for a reader goes through: a status line
    or table on standard output (`say`, `out`), a log record or a Python warning on standard error
    (`_printable_reports`); never a file a command writes."""
    return "\n".join(printable(line) for line in text.split("\n"))


def notice(line: str) -> None:
    """A warning or a note on standard error: the line as given ("retromae: warning: ..."), `printable`."""
    print(printable(line), file=sys.stderr, flush=True)


def fitted(text: str, stream: Any) -> str:
    """`text` as `stream` can encode it (ASCII, Latin-1, as PYTHONIOENCODING, an ISO-8859 locale or a Windows
    console's code page set it): each of the tool's own symbols its encoding lacks as its ASCII stand-in
    (`STAND_INS`: `·` as `-`, `→` as `->`, `…` as `...`), any other character it lacks written as its backslash escape
    (`é` as `\\xe9`), as Python writes standard error; unchanged for a stream that names no encoding. A user's text
    in a line (`given`) is escaped before, so that its characters are never stood in for.

    The one rule of what standard output can hold (`standard_output`, `say`). An escape, not a refusal: every line
    there is for a person, and loses nothing (the escape names the character); what a program reads (a TREC run,
    results.json, mined negatives, scores) goes to files, always UTF-8."""
    encoding = getattr(stream, "encoding", None)
    return _escaped(text.translate(_stand_ins(encoding)), encoding) if encoding else text


def given(text: Any) -> str:
    """A path, a query, an id or a document's text (what a user gave or a file holds) as a line for the terminal
    holds it: on one line (`printable`: a newline in a path stays in its line), each character standard output's
    encoding lacks escaped now (`données·✓` as `donn\\xe9es\\xb7\\u2713` under ASCII), so that `fitted` stands in
    for the tool's own symbols only, never for a user's. The one rule of what a user's text looks like inside a
    status line, a result line or a progress bar's name; never for a file a command writes."""
    return _escaped(printable(str(text)), getattr(sys.stdout, "encoding", None))


def _escaped(text: str, encoding: str | None) -> str:
    """`text` with each character `encoding` lacks as its backslash escape."""
    return text.encode(encoding, "backslashreplace").decode(encoding) if encoding else text


@functools.cache
def _stand_ins(encoding: str) -> dict[int, str]:
    """The `str.translate` table of the `STAND_INS` that `encoding` cannot encode."""
    return str.maketrans({symbol: ascii_form for symbol, ascii_form in STAND_INS.items()
                          if _escaped(symbol, encoding) != symbol})


def keep_standard_error() -> None:
    """Standard error closed (`2>&-`: Python's `sys.stderr` is None) is read as sent to /dev/null: the descriptor 2
    is taken by /dev/null, so that neither a line meant for standard error lands on standard output (`print` to a
    None file writes there) nor a file the command opens takes descriptor 2 (a library writing to it would write
    into that file)."""
    if sys.stderr is not None:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    if null != 2:
        os.dup2(null, 2)
        os.close(null)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)


@contextlib.contextmanager
def standard_output() -> Iterator[None]:
    """Within (one command of the CLI): standard output as a command's results need it. Closed (`>&-`: Python's
    `sys.stdout` is None, and `print` drops every line without a word) is refused at once; a write to it that fails
    is a FileSystemError naming it (a full disk, /dev/full: what was printed is lost), but for a reader that went
    away (`| head -1`, EPIPE), which chose to read no more: the rest is dropped and the command goes on. A character
    its encoding cannot hold is written as its escape (`fitted`). Flushed on the way out, so that a failure is said
    here, not by the interpreter's own flush at exit (a traceback, exit code 120); after one, what is left goes to
    /dev/null for the same reason."""
    if sys.stdout is None:
        raise FileSystemError("standard output is closed (`>&-`): the command prints what it found or wrote there; "
                              "redirect it to a file, or to /dev/null to drop it")
    stream = sys.stdout
    sys.stdout = output = _Output(stream)
    try:
        yield
    except SystemExit as done:  # argparse's --help and --version: printed (a failed write ignored), then exit 0
        if not done.code:
            output.flush()
            if output.lost is not None:  # their text lost is said, as a command's
                raise output.lost from None
        raise
    except BaseException:
        with contextlib.suppress(FileSystemError):  # the command's own failure is the one said
            output.flush()
        raise
    finally:
        sys.stdout = stream
    output.flush()


class _Output:
    """`sys.stdout` within `standard_output`: writes (`fitted` to it) and flushes pass to `stream` until one fails."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.failed = False
        self.lost: FileSystemError | None = None  # what a failed write said (argparse's printing ignores it)

    def write(self, text: str) -> int:
        self._attempt(self.stream.write, fitted(text, self.stream))
        return len(text)

    def flush(self) -> None:
        self._attempt(self.stream.flush)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, buffer: the stream's
        return getattr(self.stream, name)

    def _attempt(self, call: Callable[..., Any], *args: Any) -> None:
        if self.failed:
            return
        try:
            call(*args)
        except OSError as error:
            self.failed = True
            with contextlib.suppress(OSError, ValueError):  # a stream with no descriptor (a test's capture)
                descriptor, devnull = self.stream.fileno(), os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, descriptor)
                os.close(devnull)
            if error.errno != errno.EPIPE:
                self.lost = FileSystemError(f"standard output: {os_error_line(error)}; what the command printed "
                                            "there is lost")
                raise self.lost from None


@contextlib.contextmanager
def speaking(on: bool) -> Iterator[None]:
    """Within the block, `say` prints only if `on`."""
    token = _SPEAKING.set(on)
    try:
        yield
    finally:
        _SPEAKING.reset(token)


@contextlib.contextmanager
def library_output(verbose: bool) -> Iterator[None]:
    """Within the block: the libraries' bars, reports and warnings off unless `verbose`, those shown `printable`
    (`_printable_reports`, `_printable_transformers`); all restored on exit."""
    token = _VERBOSE.set(verbose)
    try:
        with _printable_reports():
            if verbose:
                with _printable_transformers():
                    yield
            else:
                # huggingface_hub sets its logger's level when its logging module is first imported (by
                # `_quiet_hub_bars`): its retry warnings ("Retrying in 8s") stay quiet only with the loggers raised
                # after.
                with _quiet_hub_bars(), _quiet_loggers(), _quiet_transformers():
                    warnings.filterwarnings("ignore", module=QUIET_WARNING_MODULES)
                    yield
    finally:
        _VERBOSE.reset(token)


@contextlib.contextmanager
def _printable_reports() -> Iterator[None]:
    """Within: the Python warnings shown (`warnings.showwarning`) and the log records no handler takes
    (`logging.lastResort`: our modules' warnings, and those of the libraries that set no handler of their own)
    written `printable` on standard error (transformers' own handler: `_printable_transformers`)."""
    last_resort = logging.lastResort
    logging.lastResort = _PrintableStandardError(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            yield
    finally:
        logging.lastResort = last_resort


class _PrintableStandardError(logging.Handler):
    """A log record on the standard error of the moment, as `logging.lastResort` writes it (`_Printable`)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(_Printable().format(record) + "\n")
        except Exception:  # logging's own rule: a failed report never fails the program
            self.handleError(record)


class _Printable(logging.Formatter):
    """What a log record shows on the terminal: its message one `printable` line, a traceback it carries `shown`
    below."""

    def format(self, record: logging.LogRecord) -> str:
        trace = shown(self.formatException(record.exc_info)) if record.exc_info else ""
        return "\n".join(filter(None, (printable(record.getMessage()), trace)))


@contextlib.contextmanager
def _printable_transformers() -> Iterator[None]:
    """Within (`--verbose`): transformers' own handlers, which it gives its loggers when first used (its records do
    not reach `logging.lastResort`), write each record as ours are written (`_Printable`); their formats restored on
    exit. Imports transformers' logging (half a second, under --verbose only): the handler is made there."""
    from transformers.utils import logging as transformers_logging

    handlers = list(transformers_logging.get_logger("transformers").handlers)
    formats = [handler.formatter for handler in handlers]
    for handler in handlers:
        handler.setFormatter(_Printable())
    try:
        yield
    finally:
        for handler, format_ in zip(handlers, formats, strict=True):
            handler.setFormatter(format_)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """`warnings.showwarning` writing the warning's message as one `printable` line, the rest `shown`."""
    text = warnings.formatwarning(printable(str(message)), category, filename, lineno, line)
    with contextlib.suppress(OSError, AttributeError):  # as Python's own: no standard error, or a closed one
        (file or sys.stderr).write(shown(text))


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """Raise the libraries' loggers to ERROR (accelerate's "Removed shared tensor" notice is a warning), and drop
    their records below it with a filter: DeepSpeed, which transformers imports when it saves a model, sets its
    logger's level when first imported (undoing the first) and writes "Setting accelerator to CPU" to stdout."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
        logger.addFilter(_errors_only)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
            logger.removeFilter(_errors_only)


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextlib.contextmanager
def _quiet_hub_bars() -> Iterator[None]:
    """huggingface_hub's bars off; transformers, imported later in the block, takes its bar switch from them."""
    # huggingface_hub: only when a library's output is silenced
    import huggingface_hub.utils.logging  # noqa: F401  (sets the hub logger's level; see `library_output`)
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings and bars off, whether it is loaded already or first imported inside the block.

    transformers sets its logger's level from $TRANSFORMERS_VERBOSITY when first imported (undoing
    `_quiet_loggers`), hence the variable for the block; importing it here just to silence it would cost
    commands that never load it (index, bm25) seconds. Its switches are restored (or reset) on exit."""
    name = "transformers.utils.logging"
    loaded = sys.modules.get(name)
    saved = (loaded.get_verbosity(), loaded.is_progress_bar_enabled()) if loaded else None
    if loaded:
        loaded.set_verbosity_error()
        loaded.disable_progress_bar()
    previous_env = os.environ.get(VERBOSITY_ENV)
    os.environ[VERBOSITY_ENV] = "error"
    try:
        yield
    finally:
        if previous_env is None:
            os.environ.pop(VERBOSITY_ENV, None)
        else:
            os.environ[VERBOSITY_ENV] = previous_env
        module = sys.modules.get(name)
        if module is not None:
            verbosity, bars = saved or (logging.WARNING, True)
            module.set_verbosity(verbosity)
            (module.enable_progress_bar if bars else module.disable_progress_bar)()


def progress(description: str, total: int | None = None, unit: str = "it", *, initial: int = 0,
             enabled: bool = True) -> tqdm:
    """The one progress display of a step: its name (`printable`: it may name a file), count, rate and (with a
    total) the expected time left."""
    return tqdm(total=total, initial=initial, desc=printable(description), unit=unit, disable=not enabled,
                dynamic_ncols=True, file=sys.stderr)


@contextlib.contextmanager
def step(description: str, enabled: bool = True) -> Iterator[None]:
    """A status line for a step without a bar: "description ..." (`printable`) then "done in 1.2 s" when it ends."""
    started = time.perf_counter()
    if enabled:
        print(f"{printable(description)} ...", end="", file=sys.stderr, flush=True)
    ended = " failed"
    try:
        yield
        ended = f" done in {format_seconds(time.perf_counter() - started)}"
    finally:
        if enabled:
            print(ended, file=sys.stderr, flush=True)


class Stages:
    """Numbered stages of a multi-stage command: `start("pre-training RetroMAE")` prints "2/5 pre-training ...".

    Built with `Stages.planned([(description, expected seconds), ...])`, `next()` announces the planned stages in
    turn with the time left: the plan's remaining seconds, scaled by how long the finished stages took against
    their plan (once at least a minute of the plan is done)."""

    MIN_PACE_SAMPLE_SECONDS = 60.0

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.plan: Sequence[tuple[str, float]] = ()
        self.started = time.perf_counter()

    @classmethod
    def planned(cls, plan: Sequence[tuple[str, float]], enabled: bool = True) -> Stages:
        stages = cls(len(plan), enabled)
        stages.plan = plan
        return stages

    def start(self, description: str) -> str:
        """Announce the next stage on stderr; returns its label ("k/n description")."""
        label = f"{self.done + 1}/{self.total} {description}"
        if self.plan:
            label += f" (about {format_seconds(self._seconds_left())} left)"
        self.done += 1
        if self.enabled:
            print(f"\n{printable(label)}", file=sys.stderr, flush=True)
        return label

    def next(self) -> str:
        """Announce the next planned stage."""
        return self.start(self.plan[self.done][0])

    def _seconds_left(self) -> float:
        planned_so_far = sum(seconds for _, seconds in self.plan[:self.done])
        # Rescale only once the finished stages are a fair sample: a few seconds of set-up say little about the
        # pace of training.
        enough = planned_so_far >= self.MIN_PACE_SAMPLE_SECONDS
        pace = (time.perf_counter() - self.started) / planned_so_far if enough else 1.0
        return pace * sum(seconds for _, seconds in self.plan[self.done:])


@dataclass
class TrainingSummary:
    """Numbers of a finished training run, taken from the loop's logged records; `line()` says them in one line."""

    description: str
    records: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, record: Mapping[str, float]) -> None:
        self.records.append(dict(record))

    @property
    def losses(self) -> dict[str, float]:
        """The loss components of the last logged record, "loss" first."""
        last = self.records[-1] if self.records else {}
        names = sorted((k for k in last if k not in NOT_LOSSES and not k.startswith("probe_")),
                       key=lambda k: (k != "loss", k))
        return {name: last[name] for name in names}

    @property
    def tokens_per_s(self) -> float | None:
        """Mean of the logged windows' tokens/s (each window a run of equal steps; the first holds the warm-up)."""
        rates = [r["tokens_per_s"] for r in self.records if "tokens_per_s" in r]
        return sum(rates) / len(rates) if rates else None

    def line(self) -> str:
        """E.g. "pre-training RetroMAE (200 steps): loss 12.31 (decoder 6.20, encoder_mlm 6.11) · 3m02s · 4,120
        tokens/s"."""
        losses = self.losses
        parts = []
        if "loss" in losses:
            others = ", ".join(f"{name} {_number(value)}" for name, value in losses.items() if name != "loss")
            parts.append(f"loss {_number(losses['loss'])}" + (f" ({others})" if others else ""))
        parts.append(format_seconds(self.seconds))
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:,.0f} tokens/s")
        return f"{self.description}: " + " · ".join(parts)


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def format_seconds(seconds: float) -> str:
    """"4.2 s", "3m02s" or "1h05m"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def written(output: Path, optional: Mapping[str, str]) -> dict[str, Path]:
    """Of the outputs a run writes only with some options (label → name under `output`: `best-probe/`,
    `negatives/`, `tensorboard/`), those that are there, for `wrote`."""
    return {label: Path(output) / name for label, name in optional.items() if (Path(output) / name).exists()}


def wrote(outputs: Mapping[str, Path | str], started: float | None = None) -> str:
    """The closing lines of a command: its wall time since `started` and what it wrote where, one per line (each path
    `given`: a newline in it stays in its line)."""
    took = f" in {format_seconds(time.perf_counter() - started)}" if started is not None else ""
    width = max((len(name) for name in outputs), default=0)
    return f"done{took}; wrote:\n" + "\n".join(f"  {name:<{width}}  {given(path)}"
                                                for name, path in outputs.items())
