"""The `retromae` command line: one subcommand per module in `retromae.commands`.

Owns: discovering subcommands, parsing, and turning library errors into a one-line message and exit
code 2. Each command module defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`;
this file knows none of them by name. A command's `-h` comes last, after its required inputs and options.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from retromae import commands
from retromae.errors import RetroMAEError


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every discovered subcommand."""
    parser = argparse.ArgumentParser(
        prog="retromae",
        description="Pre-train, fine-tune, index, search and evaluate retrieval encoders (RetroMAE and peers).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"retromae.commands.{info.name}")
        name = getattr(module, "NAME", info.name.replace("_", "-"))
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP, add_help=False)
        module.add_arguments(sub)
        sub.add_argument_group("help").add_argument("-h", "--help", action="help", help="show this help and exit")
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    handler = args.__dict__.pop("handler")
    args.__dict__.pop("command")
    try:
        return handler(args) or 0
    except RetroMAEError as error:
        print(f"retromae: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
