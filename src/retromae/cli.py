"""The `retromae` command line: one subcommand per module in `retromae.commands`.

Owns: discovering subcommands, parsing, the global `--verbose` (the libraries' own output, see
`retromae.console`), and turning library errors into a one-line message and exit
code 2. Each command module defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`;
this file knows none of them by name.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from retromae import commands
from retromae.console import library_output
from retromae.errors import RetroMAEError

VERBOSE_HELP = ("also show the libraries' own output (transformers' loading bars and reports, bm25s bars, "
                "warnings), hidden by default; before or after the command name")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every discovered subcommand."""
    parser = argparse.ArgumentParser(
        prog="retromae",
        description="Pre-train, fine-tune, index, search and evaluate retrieval encoders (RetroMAE and peers).",
    )
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"retromae.commands.{info.name}")
        name = getattr(module, "NAME", info.name.replace("_", "-"))
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP,
                                    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(sub)
        sub.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    handler = args.__dict__.pop("handler")
    args.__dict__.pop("command")
    verbose = args.__dict__.pop("verbose")
    try:
        with library_output(verbose):
            return handler(args) or 0
    except RetroMAEError as error:
        print(f"retromae: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
