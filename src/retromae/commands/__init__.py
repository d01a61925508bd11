"""Subcommands of the `retromae` CLI, one thin module each: parse → config → library call → print.

Each module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`; `retromae.cli` discovers them. The
library's run functions print nothing: they return a `retromae.runtime.console.Result`, whose lines the command prints
(`show`).
"""

from __future__ import annotations

from typing import Any

from retromae.runtime.console import out


def show(result: Any) -> Any:
    """Print the lines of a command's `Result` on standard output (`runtime.console.out`); returns its value."""
    for line in result.lines:
        out(line)
    return result.value
