"""What the database says at the end, read once after the supervisors have stopped:
jobsup's own rows, which the checker holds against the side channel and the ledger."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

import jobsup
from jobsup.store import schema

FINAL = {"succeeded", "dead_lettered", "cancelled"}


@dataclass
class JobRow:
    id: int
    name: str
    queue: str
    status: str
    run_at: Any
    concurrency_key: str | None
    concurrency_limit: int | None
    batch_id: int | None
    workflow_id: int | None
    parent_id: int | None
    payload: str
    attempts: list[tuple[int, str | None, str, Any]] = field(default_factory=list)  # attempt, outcome, owner, start


@dataclass
class EndState:
    jobs: dict[int, JobRow]
    deps: dict[int, list[int]]  # job -> the jobs it depends on
    batches: dict[int, dict[str, Any]]
    workflows: dict[int, dict[str, Any]]
    paused: set[str]
    breakers: list[dict[str, Any]]
    tables: dict[str, list[tuple[Any, ...]]]  # every jobsup table's rows, for the secret search
    read_at: float = 0.0  # when the read began (the side channel's clock, time.time())


def read(client: jobsup.Client) -> EndState:
    job = schema.job
    read_at = time.time()
    with client.database.read() as conn:
        jobs = {
            row.id: JobRow(
                row.id,
                row.name,
                row.queue,
                row.status,
                row.run_at,
                row.concurrency_key,
                row.concurrency_limit,
                row.batch_id,
                row.workflow_id,
                row.parent_id,
                row.payload,
            )
            for row in conn.execute(select(job))
        }
        attempt = schema.job_attempt
        for row in conn.execute(select(attempt).order_by(attempt.c.job_id, attempt.c.attempt, attempt.c.id)):
            if row.job_id in jobs:
                jobs[row.job_id].attempts.append((row.attempt, row.outcome, row.owner, row.started_at))
        # An attempt under way has no row yet (it is written when the attempt ends): its job's.
        running = select(job.c.id, job.c.attempts, job.c.lease_owner, job.c.started_at).where(job.c.status == "running")
        for row in conn.execute(running):
            jobs[row.id].attempts.append((row.attempts, None, row.lease_owner, row.started_at))
        deps: dict[int, list[int]] = {}
        for row in conn.execute(select(schema.job_dependency)):
            deps.setdefault(row.job_id, []).append(row.depends_on)
        batches = {row.id: dict(row._mapping) for row in conn.execute(select(schema.batch))}
        workflows = {row.id: dict(row._mapping) for row in conn.execute(select(schema.workflow))}
        paused = {row.queue for row in conn.execute(select(schema.queue_state)) if row.paused}
        tables = {
            table.name: [tuple(row) for row in conn.execute(select(table))] for table in schema.metadata.sorted_tables
        }
    return EndState(jobs, deps, batches, workflows, paused, client.breakers.list(), tables, read_at)
