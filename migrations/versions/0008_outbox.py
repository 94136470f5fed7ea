"""Events: the transactional outbox and the enqueuer's trace context.

- `jobsup_outbox`: events written in the transaction of the change they announce, until a
  relay in a supervisor delivered them (`jobsup.events`); `locked_by`/`locked_until` is a
  relay's lapsing claim on a row. Indexed by (job_id, id): a relay delivers a job's events
  in order, so it asks whether an earlier event of the job is still waiting.
- `jobsup_job.traceparent`: the W3C trace context of the code that enqueued the job (null
  without OpenTelemetry), so the worker's span joins the enqueuer's trace.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME = sa.Unicode(200)


def upgrade() -> None:
    op.add_column("jobsup_job", sa.Column("traceparent", sa.Unicode(55)))
    op.create_table(
        "jobsup_outbox",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger),
        sa.Column("type", sa.Unicode(40), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("locked_by", NAME),
        sa.Column("locked_until", UTCDateTime),
        sqlite_autoincrement=True,
    )
    op.create_index("jobsup_outbox_job", "jobsup_outbox", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("jobsup_outbox_job", table_name="jobsup_outbox")
    op.drop_table("jobsup_outbox")
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("traceparent")
