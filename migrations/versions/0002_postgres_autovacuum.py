"""PostgreSQL: vacuum the job tables often.

Every job is inserted, updated two or three times and eventually deleted, so the tables
churn far faster than PostgreSQL's defaults assume (vacuum after 20 % of a table is dead).
Dead rows in the claim index's range slow every claim; vacuuming after 2 % (or 1,000 rows)
keeps it tight. Other databases need nothing.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("jobsup_job", "jobsup_job_attempt")
SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_limit = 2000"
)
RESET = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit"
)


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} SET ({SETTINGS})")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} RESET ({RESET})")
