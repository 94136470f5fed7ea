"""`client.batches`: jobs enqueued as one batch, whose callbacks fire once every child has
ended; closed at once (`enqueue`) or open to more children (`open`)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import Connection

from jobsup.audit import actor_of
from jobsup.checks import check_limit, check_text
from jobsup.client.core import ClientCore, row_id
from jobsup.errors import BadInput, JobNotFound
from jobsup.store.rows import BatchInfo, NewJob
from jobsup.workflow_spec import MAX_BATCH, Callback


class Batches:
    """Batches of jobs with callbacks."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def enqueue(
        self,
        children: Iterable[Mapping[str, Any]],
        *,
        on_complete: object = None,
        on_success: object = None,
        on_failure: object = None,
        name: str | None = None,
        connection: Connection | None = None,
        allow_unknown: bool = False,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Store a closed batch of `children` (mappings like `Client.enqueue_many`'s) in one
        transaction and return its id. Once every child has ended, `on_complete` fires;
        then `on_success` if all succeeded, else `on_failure`. Each is a job name or a
        (job name, payload mapping) pair; the callback's payload gets ``"batch": {"id",
        "counts"}`` added. `progress(n)` is called as each chunk is written."""
        callbacks = self._callbacks(on_complete, on_success, on_failure, allow_unknown)
        if name is not None:
            check_text(name, "batch name")
        news = _children(self._core.build_many(children, allow_unknown, "children"), 0)
        batch_id, _ = self._core.store.batches.enqueue(name, callbacks, news, connection=connection, progress=progress)
        return batch_id

    def open(
        self,
        *,
        on_complete: object = None,
        on_success: object = None,
        on_failure: object = None,
        name: str | None = None,
        connection: Connection | None = None,
        allow_unknown: bool = False,
    ) -> Batch:
        """An open batch: add children with `Batch.add` (until `Batch.close`); its callbacks
        fire once it is closed and every child has ended."""
        callbacks = self._callbacks(on_complete, on_success, on_failure, allow_unknown)
        if name is not None:
            check_text(name, "batch name")
        batch_id = self._core.store.batches.open(name, callbacks, connection=connection)
        return Batch(self._core, batch_id, connection, allow_unknown)

    def get(self, batch_id: int) -> BatchInfo | None:
        """The batch with its children's counts by status; None if unknown."""
        batch_id = row_id(batch_id, "batch")
        return self._core.store.batches.get(batch_id)

    def list(self, *, unfinished: bool = False, limit: int = 100) -> builtins.list[BatchInfo]:
        """Batches, newest first; with `unfinished`, only those whose callbacks have not fired."""
        limit = check_limit(limit)
        return self._core.store.batches.list(unfinished=unfinished, limit=limit)

    def cancel(self, batch_id: int, *, actor: str | None = None) -> int:
        """Cancel every unfinished child and close the batch (its callbacks fire with the
        counts, once the running children its cancel asked to stop have ended); returns how
        many children were cancelled or asked to stop. Audited."""
        batch_id, who = row_id(batch_id, "batch"), actor_of(actor)
        target = f"batch:{batch_id}"
        if self._core.store.batches.get(batch_id) is None:
            self._core.audited(who, "batch.cancel", target=target, job_count=0, outcome="not_found")
            raise JobNotFound(f"no batch with id {batch_id}")
        cancelled = self._core.store.batches.cancel(batch_id)
        self._core.audited(who, "batch.cancel", target=target, job_count=cancelled)
        return cancelled

    def _callbacks(
        self, on_complete: object, on_success: object, on_failure: object, allow_unknown: bool
    ) -> dict[str, Any]:
        """The callbacks as stored; `BadInput` for a bad one, `UnknownJob` for a job no one defines."""
        callbacks = {}
        for key, value in (("on_complete", on_complete), ("on_success", on_success), ("on_failure", on_failure)):
            callback = Callback.of(value, key)
            if callback is not None:
                # A typed callback job declares the parameter `batch`: {"id", "counts"}.
                added = {"batch": {"id": 0, "counts": {}}}
                self._core.check_follow_up(callback.job, callback.payload, allow_unknown, "a batch callback", added)
                callbacks[key] = callback.describe()
        return callbacks


class Batch:
    """An open batch (`client.batches.open`): add children, then close it."""

    def __init__(self, core: ClientCore, batch_id: int, connection: Connection | None, allow_unknown: bool) -> None:
        self._core, self.id, self.connection, self.allow_unknown = core, batch_id, connection, allow_unknown
        self.added = 0

    def add(
        self,
        children: Iterable[Mapping[str, Any]],
        *,
        progress: Callable[[int], object] | None = None,
        close: bool = False,
    ) -> list[int]:
        """Store more children (all or none) and return their ids; with `close`, close the
        batch in the same transaction. `BadInput` over `MAX_BATCH` children in all, or when
        the batch is closed."""
        news = _children(self._core.build_many(children, self.allow_unknown, "children"), self.added)
        batches = self._core.store.batches
        ids = batches.add(self.id, news, connection=self.connection, progress=progress, close=close)
        self.added += len(ids)
        return ids

    def close(self) -> bool:
        """No more children; False if it was closed already."""
        return self._core.store.batches.close(self.id, connection=self.connection)


def _children(news: list[NewJob], added: int) -> list[NewJob]:
    """`news` as a batch's children, after `added` others: `BadInput` over the cap, or for
    a unique key (a live job's id would stand for a child that was never added)."""
    if added + len(news) > MAX_BATCH:
        raise BadInput(f"a batch holds at most {MAX_BATCH:,} children; this would make it {added + len(news):,}")
    for index, new in enumerate(news):
        if new.unique_key is not None:
            raise BadInput(f"children[{index}]: a batch's child cannot have a unique_key")
    return news
