"""Workload families, one module each, named by the W-ids whose rows it registers.
Importing a module registers its cases and rows.

The table groups rows by workload (W1, W1b, W2, ..., W12) and keeps registration order
within a workload, i.e. the order of the imports below: W9's idle baseline first (its
rows head W9, before the W9 rows that W2 and W4 register), then the SQLite workloads by
id, then the same workloads on the JSONL file store and on PostgreSQL. Add a family by
adding a module and importing it here.
"""

# isort: off
from . import w9_baseline
from . import w1_single_session
from . import w2_group_commit
from . import w2_multiprocess
from . import w3_cold_load
from . import w4_read_while_write
from . import w5_disk
from . import w6_tail_latency
from . import w7_fork_projection
from . import w8_scale
from . import w10_agent_turn
from . import w11_per_append
from . import w12_cold_start
from . import jsonl_w1_w2_w3_w5
from . import pg_w1_w2_w9
from . import pg_w3_w4_w6
from . import w13_inspector
from . import w14_integrations

# isort: on

__all__ = [
    "jsonl_w1_w2_w3_w5",
    "pg_w1_w2_w9",
    "pg_w3_w4_w6",
    "w1_single_session",
    "w2_group_commit",
    "w2_multiprocess",
    "w3_cold_load",
    "w4_read_while_write",
    "w5_disk",
    "w6_tail_latency",
    "w7_fork_projection",
    "w8_scale",
    "w9_baseline",
    "w10_agent_turn",
    "w11_per_append",
    "w12_cold_start",
    "w13_inspector",
    "w14_integrations",
]
