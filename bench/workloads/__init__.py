"""Workload families, one module each. Importing a module registers its cases and rows.

The table groups rows by workload (W2, W4, W9, ...), and keeps registration order within a
workload, i.e. the order of the imports below (alphabetical). Add a family by adding a
module and importing it here.
"""

from . import baseline, group_commit, read_while_write

__all__ = ["baseline", "group_commit", "read_while_write"]
