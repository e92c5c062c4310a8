"""Alembic environment: all the work is in hubstore.migrations (shared with the CLI).

``-x url=``, ``-x version_table=`` and ``-x schema=`` are read there (hubstore.migrations
.env_url and env_options); hubstore's own calls pass the same through the Config's
attributes, and an application's env.py hands its connection over the same way
(hubstore.migrations.upgrade(connection, ...)).
"""

from logging.config import fileConfig

from alembic import context

from hubstore.migrations import run_env

# Run from alembic.ini (the `alembic` command): its [loggers] sections say what to print.
# hubstore's own calls pass no file and leave the application's logging alone.
if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

# `alembic.context` is a module whose functions forward to the EnvironmentContext running
# this script; that instance has no public name, so the module stands in for it. run_env's
# parameter names the class, which a module is not (a Protocol there would accept both).
run_env(context)  # type: ignore[arg-type]
