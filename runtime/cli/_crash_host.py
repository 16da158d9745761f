"""The demo's crashing host: ``python -m runtime.cli._crash_host --db DB --workspace DIR``.

It starts the demo's nightly-report run, whose ``send_email`` tool kills the process
with SIGKILL after the email went out -- the crash that ``tidelog demo`` then recovers
from in a new host.
"""

from __future__ import annotations

import argparse
import sys

from ._demo import crash_host


def main(argv: list[str] | None = None) -> int:
    """Parse ``--db`` and ``--workspace`` and run the crashing host (it never returns
    normally: reaching the end means the crash did not happen, status 1)."""
    parser = argparse.ArgumentParser(prog="python -m runtime.cli._crash_host")
    parser.add_argument("--db", required=True)
    parser.add_argument("--workspace", required=True)
    args = parser.parse_args(argv)
    return crash_host(args.db, args.workspace)


if __name__ == "__main__":
    sys.exit(main())
