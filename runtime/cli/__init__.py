"""The ``tidelog`` command line: browse, export and import, check, back up, prune and
edit databases, and the demo (see ``tidelog --help`` and ``docs/cli.md``). Also
``python -m runtime.cli``.

A client of the public runtime API (``runtime``, ``runtime.agents``) and of the Store
contract (``stores``): it never imports ``actors`` or a private ``runtime._*`` module.
"""

from ._errors import CliError
from ._main import main
from ._parsing import build_parser

__all__ = ["CliError", "build_parser", "main"]
