"""The `retromae` command line: one subcommand per module in `retromae.commands`.

Owns: discovering subcommands, parsing, the global `--verbose` (the libraries' own output, see
`retromae.runtime.console`) and `--threads` (the CPU threads, `retromae.runtime.threads`, set before a command imports
torch), turning library errors into a one-line message and exit code 2 (a panic of the tokenizers library too,
`runtime.errors.tokenizer_panics`), failures of the operating system into one line naming the path and the cause
(exit code 1), Ctrl-C into one line (exit code 130) and SIGTERM (a scheduler's stop,
`kill`) into the same line (exit code 143), refusing a multi-process launch that started one process
(`retromae.runtime.processes`), and running the checks that need no heavy import before the command
(`retromae.preflight`: a missing input path or `--model` folder, a malformed hub or proxy URL), running each command
with its standard output checked (`retromae.runtime.console.standard_output`: closed, refused; a failed write, one
line naming it; a reader that went away, the rest dropped), and handing a failed command's outputs back
(`retromae.runtime.run_folder.abandon`). Each command module defines `HELP` (one line),
`add_arguments(parser)` and `run(args) -> int`; a command that splits its work over a multi-process launch says so with
`PROCESSES = "several"`; this file knows none of them by name. A command's `-h` comes last, after its required inputs
and options.

Start-up stays light: the command list (`retromae --help`) is read from each module's source without importing
it, and only the chosen command's module is imported and asked for its options. So no command pays for another's
libraries (torch, faiss, bm25s and the jax it imports, sentence-transformers, matplotlib).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib
import importlib.metadata
import pkgutil
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from retromae import __version__, commands
from retromae.preflight import check_arguments, check_settings
from retromae.runtime.console import keep_standard_error, library_output, standard_output
from retromae.runtime.cpu_features import bf16_override
from retromae.runtime.errors import ConfigError, FileSystemError, RetroMAEError, os_error_line, tokenizer_panics
from retromae.runtime.lines import INTEGER_TEXT
from retromae.runtime.options import StoreOnce, check_command_line, store_once
from retromae.runtime.processes import check_launch
from retromae.runtime.threads import configure_threads

VERBOSE_HELP = ("also show the libraries' own output (transformers' loading bars and reports, bm25s bars, "
                "warnings), hidden by default; before or after the command name")
THREADS_BEFORE = "threads_before_command"  # --threads given before the command's name (`_threads`)
THREADS_HELP = ("CPU threads to compute with (default: OMP_NUM_THREADS when set, else the cores this process may use: "
                "its affinity and cgroup quota; docs/scaling.md); before or after the command name")

INTERRUPTED = ("retromae: {}; finished checkpoints, shards and output files are kept (written atomically): "
               "`--resume` continues a training run, the same `encode` or `evaluate` command continues an encoding")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that it unwinds as on Ctrl-C (temporary files removed)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` (in the main thread, the only one that may set a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class CommandInfo:
    """A subcommand as the top-level parser lists it: its name, module and one-line help."""

    name: str
    module: str
    help: str


def _literal_constants(path: Path) -> dict[str, str]:
    """The string constants a module assigns at top level (HELP, NAME), read from its source, not imported."""
    constants = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str):
                constants[node.targets[0].id] = value
    return constants


def discover_commands() -> list[CommandInfo]:
    """Every subcommand module, sorted by module name; one whose HELP is not a literal string is imported."""
    found = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module_name = f"retromae.commands.{info.name}"
        constants = _literal_constants(Path(commands.__path__[0]) / f"{info.name}.py")
        if "HELP" not in constants:
            module = importlib.import_module(module_name)
            constants = {"HELP": module.HELP, "NAME": getattr(module, "NAME", None) or constants.get("NAME")}
        name = constants.get("NAME") or info.name.replace("_", "-")
        found.append(CommandInfo(name, module_name, constants["HELP"]))
    return found


def _chosen_command(argv: list[str]) -> str | None:
    """The subcommand named in `argv`: its first argument that is neither an option nor the value of `--threads`
    (the top level's one option that takes a value)."""
    values = {i + 1 for i, arg in enumerate(argv) if arg == "--threads"}
    return next((arg for i, arg in enumerate(argv) if not arg.startswith("-") and i not in values), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser listing every subcommand; the one `argv` names (all, when None) gets its options."""
    parser = argparse.ArgumentParser(
        prog="retromae",
        allow_abbrev=False,  # `--thr 2 bm25` would be parsed, and `2` taken for the command (`_chosen_command`)
        description="Pre-train, fine-tune, index, search and evaluate retrieval encoders (RetroMAE and peers).",
    )
    parser.add_argument("-V", "--version", action="version", version=f"retromae {version()}",
                        help="print the version and exit")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--threads", type=_positive, metavar="N", action=_ThreadsBeforeCommand,
                        default=argparse.SUPPRESS, dest=THREADS_BEFORE, help=THREADS_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = None if argv is None else _chosen_command(argv)
    for command in discover_commands():
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help, add_help=False)
        if argv is None or command.name == chosen:
            module = importlib.import_module(command.module)
            module.add_arguments(sub)
            sub.set_defaults(handler=module.run, options_class=getattr(sub, "config_class", None))
        general = sub.add_argument_group("help")
        general.add_argument("-h", "--help", action="help", help="show this help and exit")
        general.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        general.add_argument("--threads", type=_positive, metavar="N", action=StoreOnce, default=argparse.SUPPRESS,
                             help=THREADS_HELP)
    return parser


def version() -> str:
    """The installed package's version (its metadata: no module of the package is imported for it)."""
    try:
        return importlib.metadata.version("retromae")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return __version__


def _positive(text: str) -> int:
    """--threads: a whole number of 1 or more in plain decimal notation (`lines.INTEGER_TEXT`, as an option's)."""
    if not INTEGER_TEXT.fullmatch(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return int(text)


def parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line; an option the command does not know is refused with the command's own usage and
    the nearest option it has (`--hybird`: "did you mean --hybrid?"), not the top level's usage."""
    parser = build_parser(argv)
    _check_before_command(parser, argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = _subparsers(parser)[args.command]
        flags = [flag for action in sub._actions if action.help != argparse.SUPPRESS for flag in action.option_strings
                 if flag.startswith("--")]
        shown = " ".join(unknown)
        mistyped = next((word.split("=")[0] for word in unknown if word.startswith("-")), None)
        near = difflib.get_close_matches(mistyped.replace("_", "-"), flags, n=1, cutoff=0.6) if mistyped else []
        hint = f" (did you mean {near[0]}?)" if near else f"; `retromae {args.command} --help` lists its options"
        sub.error(f"unrecognized arguments: {shown}{hint}")
    return args


def _check_before_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """ConfigError naming the first word before the command's name (`_chosen_command`) that looks like an option and
    is none of the top level's: an abbreviation (`--thr`, which argparse, abbreviations off, would pass over and then
    take `2` for the command's name) named with the options it could stand for, any other with those options."""
    known = parser._option_string_actions
    values = {i + 1 for i, arg in enumerate(argv) if arg == "--threads"}
    for i, arg in enumerate(argv):
        if arg == "--" or (not arg.startswith("-") and i not in values):
            return
        name = arg.split("=")[0]
        if i in values or name in known:
            continue
        full = [flag for flag in known if name.startswith("--") and flag.startswith(name)]
        if full:
            raise ConfigError(f"{name}: give the option's full name {' or '.join(full)}")
        raise ConfigError(f"{name}: not an option of retromae before a command ({', '.join(known)}); a command's own "
                          "options come after its name")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(action for action in parser._actions if action.dest == "command").choices


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    status = None
    keep_standard_error()
    try:
        with standard_output():  # closed: refused first; a failed write named
            status = _run(argv)
        return status
    except FileSystemError as error:
        print(f"retromae: error: {error}", file=sys.stderr)
        return 1
    except RetroMAEError as error:
        print(f"retromae: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # one the code did not expect: it still names its path
        print(f"retromae: error: {os_error_line(error)}", file=sys.stderr)
        return 1
    except Terminated:
        print(INTERRUPTED.format("stopped by SIGTERM"), file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(INTERRUPTED.format("interrupted"), file=sys.stderr)
        return 130
    finally:
        if (claims := sys.modules.get("retromae.runtime.run_folder")) is not None:
            # the command's outputs are free for the next one (without importing it for --help); a failed run's, as
            # it found them, unless its lasting work began (checkpoints, shards)
            claims.release() if status == 0 else claims.abandon()


class _ThreadsBeforeCommand(StoreOnce):
    """--threads before the command's name, kept apart from the command's own (`_threads` holds the two together)."""

    shown_as = "--threads"


def _threads(args: argparse.Namespace) -> int | None:
    """--threads, given before the command's name or after it: the top level's parser and the command's each keep
    their own, so the two are held to the one rule of an option given twice (`runtime.options.store_once`)."""
    given = argparse.Namespace()
    for dest in (THREADS_BEFORE, "threads"):
        if (value := args.__dict__.pop(dest, None)) is not None:
            store_once(given, "threads", value, "--threads")
    return getattr(given, "threads", None)


def _run(argv: list[str]) -> int:
    """The command `argv` names, its settings, options and inputs checked first; its exit code."""
    args = parse(argv)  # an option given twice with two values is refused here (`runtime.options.store_once`)
    handler = args.__dict__.pop("handler")
    options_class = args.__dict__.pop("options_class")
    name = args.__dict__.pop("command")
    verbose = args.__dict__.pop("verbose")
    configure_threads(_threads(args))
    bf16_override()  # the environment's own settings, named before any option or path
    check_settings()
    check_launch(name, getattr(sys.modules[handler.__module__], "PROCESSES", "one") == "several")
    if options_class is not None:
        check_command_line(options_class, args)  # each value in its option's domain, before any path
    check_arguments(args, options_class)  # a missing input path or --model folder, answered before torch
    with sigterm_as_interrupt(), library_output(verbose), tokenizer_panics():
        return handler(args) or 0


if __name__ == "__main__":
    sys.exit(main())
