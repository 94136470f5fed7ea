"""Alembic environment: run by `jobsup.store.migrate`, never by the `alembic` command directly.

Online, `jobsup.store.migrate.upgrade` passes a connection that already holds the migration lock
inside its transaction; offline (``jobsup db upgrade --sql``) it passes a dialect name and
the DDL is printed.
"""

from __future__ import annotations

from alembic import context

from jobsup.store.schema import VERSION_TABLE, metadata

config = context.config

if context.is_offline_mode():
    context.configure(
        dialect_name=config.attributes["dialect_name"],
        literal_binds=True,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    context.configure(
        connection=config.attributes["connection"],
        target_metadata=metadata,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()
