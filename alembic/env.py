"""Alembic environment: all the work is in hubstore.migrations (shared with the CLI)."""

from alembic import context

from hubstore.migrations import run_env

# `alembic.context` is a module whose functions forward to the EnvironmentContext running
# this script; that instance has no public name, so the module stands in for it. run_env's
# parameter names the class, which a module is not (a Protocol there would accept both).
run_env(context)  # type: ignore[arg-type]
