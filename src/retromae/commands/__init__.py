"""Subcommands of the `retromae` CLI, one thin module each: parse → config → library call.

Each module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`; `retromae.cli` discovers them.
"""
