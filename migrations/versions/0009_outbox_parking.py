"""Events the destination refuses for good are parked, not retried forever.

`jobsup_outbox` gains each row's failed tries (`attempts`), the last failure's words
(`last_error`), and `parked_at`: set when the publisher refused the event itself (a webhook
answering 400, 413, 415 or 422), after which no relay takes it and it no longer holds its
object's later events. An operator lists, retries or discards parked events (`jobsup events`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import Name, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobsup_outbox", sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
    op.add_column("jobsup_outbox", sa.Column("last_error", Name(500)))
    op.add_column("jobsup_outbox", sa.Column("parked_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("jobsup_outbox") as batch:
        batch.drop_column("parked_at")
        batch.drop_column("last_error")
        batch.drop_column("attempts", mssql_drop_default=True)  # SQL Server: its default is a constraint
