"""The assign jobs' wing: one module per part of a job's life, each calling only those
below it (import-linter's second contract in pyproject.toml; top to bottom):

- ``schedules``: periodic jobs (a job queued at each tick); ``claims``: a worker's next
  due jobs become running, under the assign limits; ``worker``: the worker's calls on a
  job it holds (touch, finish_assign) and cancel; ``listing``: list and page jobs, and
  why a queued one waits.
- ``rescue``: jobs past their deadline timed out (the sweep, and the claims' rescue).
- ``reports``: a worker's reports (one or a batch), the finish that retries a failure
  with retries left, an operator's retry.
- ``creating``: creating jobs (with their handoff) and reading one.
- ``handoffs``: the handoff message to the worker and the events to the supervisor.
- ``moves``: the state machine's moves as SQL, reviewable line by line against
  hubstore/assign_rules.py, and the general locked move.
- ``rows``: the job row: read, lock, insert, compare-and-set, and its announcement.
- ``limits``: provider quotas (assign limits); ``batches``: the batch calls' bounds.
"""
