"""Workload families, one module each. Importing a module registers its cases and rows.

The table groups rows by workload (W1, W2, ..., W9), and keeps registration order within a
workload, i.e. the order of the imports below. Add a family by adding a module and
importing it here.
"""

from . import (
    agent_turn,
    baseline,
    cold_load,
    cold_start,
    disk,
    fork_projection,
    group_commit,
    integrations,
    jsonl_files,
    multiprocess,
    per_append,
    pg_reads,
    pg_writes,
    read_while_write,
    scale,
    single_session,
    tail_latency,
)

__all__ = [
    "agent_turn",
    "baseline",
    "cold_load",
    "cold_start",
    "disk",
    "fork_projection",
    "group_commit",
    "integrations",
    "jsonl_files",
    "multiprocess",
    "per_append",
    "pg_reads",
    "pg_writes",
    "read_while_write",
    "scale",
    "single_session",
    "tail_latency",
]
