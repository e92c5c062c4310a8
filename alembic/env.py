"""Alembic environment: all the work is in hubstore.migrations (shared with the CLI)."""

from alembic import context

from hubstore.migrations import run_env

run_env(context)
