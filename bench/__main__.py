"""Entry point: ``python -m bench --help``."""

from bench.harness.cli import main

raise SystemExit(main())
