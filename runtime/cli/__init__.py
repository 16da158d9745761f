"""The ``tidelog`` command line: the demo, and commands that inspect and maintain a
database (see ``tidelog --help``). Also ``python -m runtime.cli``."""

from ._commands import CliError, build_parser, main

__all__ = ["CliError", "build_parser", "main"]
