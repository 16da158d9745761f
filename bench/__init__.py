"""tidelog's benchmarks (``python -m bench``); see ``bench/README.md``.

Not part of the installed packages and not part of the test run (one smoke test runs it at
a tiny scale). Four parts: :mod:`bench.harness` (the registry, runner, child processes,
report and command line), :mod:`bench.references` (the raw references and the alternative
libraries), :mod:`bench.workloads` (one module per workload family, named by its W-ids)
and :mod:`bench.probes` (one-off measurements, each run on its own).
"""
