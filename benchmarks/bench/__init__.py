"""The throughput benchmark of ``benchmarks/bench_store.py``, one module per lane.

bench_store.py is the entry point (its docstring says how to run it); the modules, each
importing only those above it:

- ``workloads``: the standard workloads, one store call per operation, in running order
- ``common``: timing, statistics, the tables, the JSON line and the progress log
- ``yardstick``: the machine yardstick (Python's sqlite3 alone)
- ``databases``: the target database, emptied or fresh, and a copy of it per repeat
- ``reference``: the reference store under node, and its published figures
- ``background``: the background rows and the preloaded templates they go into
- ``raw_driver``: hubstore's own statements on the driver alone (the anchor lane)
- ``async_lane``: the workloads through hubstore.aio
- ``store_calls``: the standard run, every lane asked for, and its table
- ``scaling``: the standard workloads at growing background sizes
- ``whole_hub``: the whole-hub mix, agents served in real time (``--hub``)
- ``claim_loops``: each claim lane's loop, and the jobs it claims
- ``statement_count``: statements, round trips and commits per claimed job
- ``claims``: the claim run (``--claim``): processes, checks, report
- ``peer_systems``: the job queues of the peers run (hubstore, pgqueuer, procrastinate),
  each driven through its own API, and each one's exactly-once checks
- ``peers``: the peers run (``--peers``): the queues side by side on one PostgreSQL server
- ``cli``: the command line
"""
