"""Schema upgrades: online under a lock, or offline as printed DDL.

Many instances may start together on one fresh database; each upgrade runs in one
transaction that first takes the dialect's migration lock (a PostgreSQL advisory lock,
SQLite's BEGIN EXCLUSIVE, SQL Server's sp_getapplock), so the first does the work and the
rest find the schema already at head. A schema already at head (every start but the first)
is found by reading the version table, without the lock and without importing Alembic
(about a quarter of a `jobsup jobs list`'s CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from jobsup.errors import SchemaOutdated
from jobsup.store.database import Database
from jobsup.store.schema import SCHEMA_REVISION, VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config

DIALECT_NAMES = ("sqlite", "postgresql", "mssql", "mariadb", "mysql")


def _config(output: TextIO | None = None) -> Config:
    from alembic.config import Config

    import jobsup.migrations

    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", str(Path(jobsup.migrations.__file__).parent))
    return config


def upgrade(db: Database) -> None:
    """Bring `db`'s schema to this code's revision, safely alongside other instances."""
    # Only a version table holding exactly this revision is at head, and a schema is never
    # taken back down, so one found at head stays there. Anything else (no schema, an older or
    # a newer revision) goes through Alembic under the lock, which upgrades or refuses it.
    if _revisions(db) == [SCHEMA_REVISION]:
        return
    from alembic import command
    from alembic.util.exc import CommandError

    config = _config()
    with db.errors(), db.engine.connect() as conn:
        conn = conn.execution_options(**db.dialect.migration_options)
        with conn.begin():
            db.dialect.migration_lock(conn)
            config.attributes["connection"] = conn
            try:
                command.upgrade(config, "head")
            except CommandError as exc:
                # Typically a database upgraded by a newer jobsup (a rolled-back deploy).
                raise SchemaOutdated(
                    f"cannot upgrade {db.safe_url}: {exc}; its schema may be newer than this jobsup "
                    f"(which knows revisions up to {head_revision()}): upgrade jobsup"
                ) from None


def _revisions(db: Database) -> list[str]:
    """The revisions `db`'s version table holds; none where it has no jobsup schema."""
    from sqlalchemy import column, select, table

    version = table(VERSION_TABLE, column("version_num"))
    try:
        with db.read("schema") as conn:
            return list(conn.execute(select(version.c.version_num)).scalars())
    except SchemaOutdated:
        return []


def schema_check(db: Database) -> None:
    """Raise `SchemaOutdated` unless `db`'s schema is at this code's revision."""
    found = _revisions(db)
    if SCHEMA_REVISION not in found:
        have = ", ".join(found) or "no jobsup schema"
        raise SchemaOutdated(
            f"the database {db.safe_url} has {have}, this jobsup needs revision "
            f"{SCHEMA_REVISION}: run `jobsup db upgrade`"
        )


def upgrade_sql(dialect_name: str, output: TextIO) -> None:
    """Print the upgrade's DDL for `dialect_name` without a database."""
    from alembic import command

    config = _config(output)
    config.attributes["dialect_name"] = dialect_name
    command.upgrade(config, "head", sql=True)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head
