"""Events: the transactional outbox and the enqueuer's trace context.

- `jobsup_outbox`: events written in the transaction of the change they announce, until a
  relay in a supervisor delivered them (`jobsup.events`); `locked_by`/`locked_until` is a
  relay's lapsing claim on a row. A relay delivers each object's events in order, so it
  asks whether an earlier event of the same object is still waiting: indexed by (job_id,
  id) for a job's events, and by (subject, id) for the events of no job, whose `subject`
  names their object (`breaker:NAME`, `queue:NAME`, `batch:ID`, `workflow:ID`).
- `jobsup_workflow.finished_at`: when the last of a workflow's steps ended (the
  compare-and-set that announces `workflow.finished` once); set for the workflows already
  finished, so they are not announced on upgrade.
- `jobsup_job.traceparent`: the W3C trace context of the code that enqueued the job (null
  without OpenTelemetry), so the worker's span joins the enqueuer's trace.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from jobsup.store.dialects.types import LongText, Name, UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME = Name(200)


def _where(condition: str) -> dict[str, Any]:
    clause = sa.text(condition)
    return {"postgresql_where": clause, "sqlite_where": clause, "mssql_where": clause}


def upgrade() -> None:
    op.add_column("jobsup_job", sa.Column("traceparent", Name(55)))
    op.create_table(
        "jobsup_outbox",
        sa.Column("id", ID, sa.Identity(), primary_key=True),
        sa.Column("job_id", sa.BigInteger),
        sa.Column("subject", Name(220)),
        sa.Column("type", Name(40), nullable=False),
        sa.Column("payload", LongText, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("locked_by", NAME),
        sa.Column("locked_until", UTCDateTime),
        sqlite_autoincrement=True,
    )
    op.create_index("jobsup_outbox_job", "jobsup_outbox", ["job_id", "id"])
    op.create_index("jobsup_outbox_subject", "jobsup_outbox", ["subject", "id"], **_where("subject IS NOT NULL"))
    op.add_column("jobsup_workflow", sa.Column("finished_at", UTCDateTime))
    op.create_index("jobsup_workflow_unfinished", "jobsup_workflow", ["id"], **_where("finished_at IS NULL"))
    op.execute(
        "UPDATE jobsup_workflow SET finished_at = created_at WHERE NOT EXISTS (SELECT 1 FROM jobsup_job"
        " WHERE jobsup_job.workflow_id = jobsup_workflow.id AND jobsup_job.status IN ('waiting', 'pending', 'running'))"
    )


def downgrade() -> None:
    op.drop_index("jobsup_workflow_unfinished", table_name="jobsup_workflow")
    with op.batch_alter_table("jobsup_workflow") as batch:
        batch.drop_column("finished_at")
    op.drop_index("jobsup_outbox_subject", table_name="jobsup_outbox")
    op.drop_index("jobsup_outbox_job", table_name="jobsup_outbox")
    op.drop_table("jobsup_outbox")
    with op.batch_alter_table("jobsup_job") as batch:
        batch.drop_column("traceparent")
