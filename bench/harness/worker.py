"""Child-process entry point: ``python -m bench.harness.worker NAME ARGS_JSON``.

Imports the harness (every workload module, hence tidelog, trio and apsw) before running
worker ``NAME`` (see :mod:`bench.harness.procs`), and prints its metrics as one JSON line.
"""

from __future__ import annotations

import json
import sys

from .. import workloads as _workloads  # registers the workers
from . import runner as _runner  # registers the "case" worker
from .procs import WORKERS

assert _workloads and _runner


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in WORKERS:
        print(
            f"usage: python -m bench.harness.worker {{{','.join(WORKERS)}}} ARGS_JSON",
            file=sys.stderr,
        )
        return 2
    metrics = WORKERS[argv[0]](json.loads(argv[1]))
    print(json.dumps(metrics), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
