"""tidelog's benchmark harness (``python -m bench``); see ``bench/README.md``.

Not part of the installed packages and not part of the test run (one smoke test runs it at
a tiny scale). Workload families live in :mod:`bench.workloads`, one module each.
"""
