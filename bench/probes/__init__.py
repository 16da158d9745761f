"""One-off measurements behind a design choice, each run on its own (``python -m
bench.probes.NAME``) and not part of the table of ``python -m bench``: ``layout`` (the
events-table layout), ``per_append`` (W11's program, also under callgrind),
``jsonl_thread`` (the JSONL store thread's cost per op) and ``pg_paths`` (how to send a
batch of appends to PostgreSQL). Their results are in ``bench/HISTORY.md``.
"""
