"""Running the Alembic migrations: upgrade, downgrade, current, and adopting legacy files.

The package is split as Alembic splits its own:

- ``commands``: :func:`upgrade`, :func:`downgrade`, :func:`current` and the reads that
  HubStore.open makes with them;
- ``runtime``: env.py's body (:func:`run_env`), the migration lock, the connection and
  transaction a run holds, its search path and call bound;
- ``versions``: the version tables, where hubstore's revision is kept and how it moves;
- ``adoption``: recognising a legacy triflux file and stamping its revision;
- ``filters``: what autogenerate and drift checks compare, for hubstore and for an
  application that shares its database;
- ``config``: the scripts, their Config, the head, the options' checks.

Every name is imported from here (``hubstore.migrations.upgrade``), as before the split.
"""

from __future__ import annotations

from hubstore.migrations.adoption import (
    HUB_TABLES,
    HUBSTORE_MADE,
    LEGACY_REVISIONS,
    META_TABLE,
    V4_COLUMNS,
    legacy_revision,
)
from hubstore.migrations.commands import (
    current,
    current_version,
    downgrade,
    hub_errors,
    not_current,
    require_current,
    revision_at,
    run_upgrade,
    upgrade,
    upgrade_and_report,
)
from hubstore.migrations.config import (
    alembic_config,
    checked_options,
    head,
    is_known,
    script_directory,
    script_location,
)
from hubstore.migrations.filters import (
    HUBSTORE_TABLES,
    MIGRATION_OWNED,
    include_app_name,
    include_app_object,
    include_object,
    render_item,
)
from hubstore.migrations.runtime import (
    ADVISORY_LOCK_KEY,
    LOOKING_COMMANDS,
    MIGRATION_BUSY_TIMEOUT_MS,
    MigrationReport,
    env_options,
    env_url,
    locked_connection,
    run_env,
)
from hubstore.migrations.versions import (
    DEFAULT_VERSION_TABLE,
    HUB_VERSION_TABLE,
    Located,
    VersionTables,
    locate_revision,
    look,
    read_revision,
)

__all__ = [
    "ADVISORY_LOCK_KEY",
    "DEFAULT_VERSION_TABLE",
    "HUBSTORE_MADE",
    "HUBSTORE_TABLES",
    "HUB_TABLES",
    "HUB_VERSION_TABLE",
    "LEGACY_REVISIONS",
    "LOOKING_COMMANDS",
    "META_TABLE",
    "MIGRATION_BUSY_TIMEOUT_MS",
    "MIGRATION_OWNED",
    "V4_COLUMNS",
    "Located",
    "MigrationReport",
    "VersionTables",
    "alembic_config",
    "checked_options",
    "current",
    "current_version",
    "downgrade",
    "env_options",
    "env_url",
    "head",
    "hub_errors",
    "include_app_name",
    "include_app_object",
    "include_object",
    "is_known",
    "legacy_revision",
    "locate_revision",
    "locked_connection",
    "look",
    "not_current",
    "read_revision",
    "render_item",
    "require_current",
    "revision_at",
    "run_env",
    "run_upgrade",
    "script_directory",
    "script_location",
    "upgrade",
    "upgrade_and_report",
]
