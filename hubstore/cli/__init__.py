"""The command line: ``hubstore db ...`` (migrations, check, backup, prune) and the
read-only inspection commands ``hubstore stats|agents|jobs|messages|reflexion``,
``hubstore jobs retry|cancel``, ``hubstore limits`` and ``hubstore schedules`` (provider
quotas and periodic jobs), and ``hubstore web`` (the console).

Every command and group takes ``-h``/``--help``; every command takes ``--url`` (default:
$HUBSTORE_URL, else the embedded default). A failure prints one line on stderr saying
what failed and why, and exits with status 1; a bad argument or URL exits with status 2.
"""

from hubstore.cli import db, inspect, jobs, quotas, web
from hubstore.cli.common import main

__all__ = ["db", "inspect", "jobs", "main", "quotas", "web"]
