"""The transitions of groups of jobs: workflows (steps enqueued together, each waiting for
its dependencies) and batches (children counted by their own rows, callbacks fired once).
What happens when one of their jobs ends is `jobsup.store.links`; the job-row statements
are `jobsup.store.statements`; this module puts them together for the client."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.errors import BadInput, LockBusy
from jobsup.events.publishing import job_fields, publish
from jobsup.observe.events import emit
from jobsup.store.database import after_commit
from jobsup.store.rows import NewJob
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, PENDING, UNFINISHED_STATUSES, WAITING

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions


class Groups:
    def __init__(self, t: Transitions) -> None:
        self.t = t

    def _announce(
        self, connection: Connection | None, news: Sequence[NewJob], ids: Sequence[int], inserted: Sequence[int]
    ) -> None:
        from jobsup.store.transitions import announce_enqueued

        def announce() -> None:
            announce_enqueued(news, ids, inserted)

        after_commit(connection, announce) if connection is not None else announce()

    # -- workflows: steps enqueued together, each waiting for its dependencies ---------------------

    def enqueue_workflow(
        self,
        name: str,
        key: str | None,
        plan: Sequence[tuple[NewJob, Sequence[int]]],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> tuple[int, list[int]]:
        """Insert a workflow and its steps, atomically: `plan` is each step's row and the
        positions in `plan` of the steps it depends on, every step after its dependencies.
        Returns the workflow's id and its steps' ids; when `key` names a workflow made
        before, that one's id and no steps (nothing is written)."""
        clock = self.t.dialect.clock_params(now)
        news = [new for new, _ in plan]
        with self.unit(connection, "enqueue") as conn:
            workflow_id, created = self.t.workflows.create(conn, name, key, clock)
            if not created:
                return workflow_id, []
            for new in news:
                new.workflow_id = workflow_id
            ids, inserted = self.t.insert(conn, news, clock)
            self.t.workflows.link(conn, [(ids[i], ids[d]) for i, (_, deps) in enumerate(plan) for d in deps])
        self._announce(connection, news, ids, inserted)
        emit("workflow.enqueued", workflow=workflow_id, name=name, steps=len(ids))
        return workflow_id, ids

    def retry_workflow(self, workflow_id: int, *, now: datetime | None = None) -> list[int]:
        """Run a finished workflow's failed and cancelled steps again (each waiting again for
        those of its dependencies that run again); returns their ids. `BadInput` while a
        step is unfinished: its end would race the recount."""
        clock = self.t.dialect.clock_params(now)
        with self.t.db.transaction("workflows") as conn:
            rows = self.t.workflows.steps_of(conn, workflow_id)
            if any(row.status in UNFINISHED_STATUSES for row in rows):
                raise BadInput(f"workflow {workflow_id} is still running: wait for it to finish, or cancel it first")
            redo = {row.id for row in rows if row.status in (DEAD_LETTERED, CANCELLED)}
            deps = self.t.workflows.edges_of(conn, sorted(redo))
            queues: set[str] = set()
            for row in rows:
                if row.id in redo:
                    waiting = sum(dep in redo for dep in deps.get(row.id, ())) or None
                    status = PENDING if waiting is None else WAITING
                    params = {**clock, "p_job": row.id, "p_status": status, "p_waiting_on": waiting}
                    for again in self.t.sql.reopen.run(conn, params):
                        queues.add(again.queue)
                        retry_at = again.run_at.isoformat() if status == PENDING else None
                        publish(conn, "job.retrying", retry_at=retry_at, **job_fields(again))
            self.t.workflows.set_cancelled(conn, workflow_id, False, clock)
            self.t.dialect.after_enqueue(conn, queues)
        emit("workflow.retried", workflow=workflow_id, steps=len(redo))
        return sorted(redo)

    # -- batches: children counted by their own rows, callbacks fired once ---------------------------

    def open_batch(
        self,
        name: str | None,
        callbacks: Mapping[str, Any],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> int:
        with self.unit(connection, "enqueue") as conn:
            return self.t.batches.create(conn, name, callbacks, self.t.dialect.clock_params(now))

    def enqueue_batch(
        self,
        name: str | None,
        callbacks: Mapping[str, Any],
        news: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> tuple[int, list[int]]:
        """Create a batch, insert its children and close it, in one transaction (all or
        none); its id and the children's ids."""
        clock = self.t.dialect.clock_params(now)
        with self.unit(connection, "enqueue") as conn:
            batch_id = self.t.batches.create(conn, name, callbacks, clock)
            ids = self._add(conn, batch_id, news, clock, progress)
            self._close_batch(conn, batch_id, clock)
        self._announce(connection, news, ids, range(len(ids)))
        return batch_id, ids

    def add_to_batch(
        self,
        batch_id: int,
        news: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        progress: Callable[[int], object] | None = None,
        close: bool = False,
    ) -> list[int]:
        """Insert children of an open batch in one transaction (all or none); with `close`,
        close it in that transaction. `BadInput` when the batch is closed or does not exist."""
        clock = self.t.dialect.clock_params(now)
        with self.unit(connection, "enqueue") as conn:
            ids = self._add(conn, batch_id, news, clock, progress)
            if close:
                self._close_batch(conn, batch_id, clock)
        self._announce(connection, news, ids, range(len(ids)))
        return ids

    def _add(
        self,
        conn: Connection,
        batch_id: int,
        news: Sequence[NewJob],
        clock: Mapping[str, Any],
        progress: Callable[[int], object] | None,
        chunk: int = 5000,
    ) -> list[int]:
        """Insert children, `chunk` per statement; `progress(n)` after each chunk."""
        if not self.t.batches.grow(conn, batch_id, len(news)):
            raise BadInput(f"batch {batch_id} is closed or does not exist: children are added to an open batch")
        ids: list[int] = []
        for start in range(0, len(news), chunk):
            part = news[start : start + chunk]
            for new in part:
                new.batch_id = batch_id
            ids.extend(self.t.insert(conn, part, clock)[0])
            if progress is not None:
                progress(len(part))
        return ids

    def close_batch(self, batch_id: int, *, connection: Connection | None = None, now: datetime | None = None) -> bool:
        """No more children: its callbacks fire once the last has ended (at once, if they all
        have). False when it was closed already."""
        with self.unit(connection, "enqueue") as conn:
            return self._close_batch(conn, batch_id, self.t.dialect.clock_params(now))

    def _close_batch(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
        """Close it, and fire it in this transaction if every child has ended already:
        waiting for the transactions ending children now (no child's settle waits for the
        batch row this holds, so nothing waits in a circle). Not after the commit: on your
        connection (`connection=`) that would run before your COMMIT, unable to see it."""
        from jobsup.store.links import fire_batch

        if not self.t.batches.close(conn, batch_id, clock):
            return False
        if not self.t.batches.any_unfinished(conn, batch_id, skip_locked=False):
            fire_batch(conn, self.t, batch_id, clock)
        return True

    def settle_batch(self, batch_id: int, *, now: datetime | None = None, operation: str = "batches") -> bool:
        """Fire the batch if it is closed and no child is unfinished, waiting for the
        transactions changing its children to end; True if this fired it. Run after the
        commit of a child's end that could not decide (`jobsup.store.links`), and by the
        sweep."""
        from jobsup.store.links import fire_batch

        clock = self.t.dialect.clock_params(now)
        with self.t.db.transaction(operation) as conn:
            if self.t.batches.any_unfinished(conn, batch_id, skip_locked=False):
                return False
            return fire_batch(conn, self.t, batch_id, clock)

    def sweep_batches(self, *, limit: int = 100) -> int:
        """Fire the closed batches whose children have all ended but whose callbacks did not
        fire (the process that ended the last child died before its second look)."""
        fired = 0
        for batch_id in self.t.batches.finishable_ids(limit):
            try:
                fired += self.settle_batch(batch_id, operation="maintenance")
            except LockBusy as exc:  # a callback's key a caller holds: the next sweep tries again
                emit("db.error", operation="maintenance", batch=batch_id, error=exc)
        return fired

    def settle_workflow(self, workflow_id: int, *, now: datetime | None = None, operation: str = "workflows") -> bool:
        """Finish the workflow if no step is unfinished, waiting for the transactions
        changing its steps to end; True if this finished it (as `settle_batch`)."""
        from jobsup.store.links import finish_workflow

        clock = self.t.dialect.clock_params(now)
        with self.t.db.transaction(operation) as conn:
            if self.t.workflows.any_unfinished(conn, workflow_id, skip_locked=False):
                return False
            return finish_workflow(conn, self.t, workflow_id, clock)

    def sweep_workflows(self, *, limit: int = 100) -> int:
        """Finish the workflows whose steps have all ended but which were not marked (the
        process that ended the last step died before its second look)."""
        finishable = self.t.workflows.finishable_ids(limit)
        return sum(self.settle_workflow(workflow_id, operation="maintenance") for workflow_id in finishable)

    def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        """Cancel every unfinished step of a workflow, as one transition; returns how many."""

        def mark(conn: Connection, clock: dict[str, Any]) -> None:
            self.t.workflows.set_cancelled(conn, workflow_id, True, clock)

        return len(self.t.cancel_where(self.t.sql.cancel_workflow, {"p_workflow": workflow_id}, now, mark))

    def cancel_batch(self, batch_id: int, *, now: datetime | None = None) -> int:
        """Cancel every unfinished child of a batch, and close it, as one transition; its
        callbacks then fire with the counts. Returns how many children were cancelled."""

        def mark(conn: Connection, clock: dict[str, Any]) -> None:
            self.t.batches.mark_cancelled(conn, batch_id, clock)

        return len(self.t.cancel_where(self.t.sql.cancel_batch, {"p_batch": batch_id}, now, mark))

    @contextlib.contextmanager
    def unit(self, connection: Connection | None, operation: str) -> Iterator[Connection]:
        """The caller's connection (its transaction), else a transaction of our own."""
        if connection is not None:
            with self.t.db.errors():
                yield connection
            return
        with self.t.db.transaction(operation) as conn:
            yield conn
