"""The harness: the registry of cases and rows, the runner, the child processes, the
report and the command line (``python -m bench``). It knows no store: the workloads
register what they measure, the references what they are measured against.
"""
