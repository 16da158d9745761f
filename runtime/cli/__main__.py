"""``python -m runtime``: the ``tidelog`` command (see :mod:`runtime.cli`)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
