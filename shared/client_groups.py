"""The client's workflows and batches (a part of `jobsup.Client`, kept apart by role)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.audit import actor_of
from jobsup.checks import check_limit, check_text
from jobsup.errors import BadInput, JobNotFound
from jobsup.store.rows import BatchInfo, NewJob, WorkflowInfo
from jobsup.workflow_spec import MAX_BATCH, Callback, Workflow

if TYPE_CHECKING:
    from jobsup.jobtypes import JobType
    from jobsup.store import Store


class GroupsAPI:
    """`Client`'s methods for workflows and batches."""

    if TYPE_CHECKING:
        store: Store

        def _ready(self) -> None: ...
        def _job_type(self, name: str, allow_unknown: bool) -> JobType: ...
        def _check_follow_up(
            self, name: str, payload: Any, allow_unknown: bool, what: str, added: Mapping[str, Any] | None = None
        ) -> None: ...
        def _build(
            self, name: object, payload: Any, options: Mapping[str, Any], allow_unknown: bool, links: Any = None
        ) -> NewJob: ...
        def _build_many(self, jobs: Iterable[Mapping[str, Any]], allow_unknown: bool, what: str) -> list[NewJob]: ...
        def _audit(self, actor: str, action: str, **fields: Any) -> None: ...

    # -- workflows ------------------------------------------------------------------------

    def enqueue_workflow(
        self,
        workflow: Workflow,
        *,
        key: str | None = None,
        connection: Connection | None = None,
        allow_unknown: bool = False,
    ) -> int:
        """Store a workflow's steps atomically and return its id. Steps without
        dependencies are pending at once; the others wait. `key`: at most one workflow per
        key, ever (the existing one's id is returned). With `connection`, in your
        transaction. A cycle, a dependency on no step of this workflow, or a bad step
        raises `BadInput`, and nothing is written."""
        if not isinstance(workflow, Workflow):
            raise BadInput(f"enqueue_workflow takes a jobsup.Workflow, not {type(workflow).__name__}")
        if key is not None:
            check_text(key, "key")
        order = workflow.ordered()
        if not order:
            raise BadInput(f"workflow {workflow.name!r} has no steps")
        position = {step.name: index for index, (step, _) in enumerate(order)}
        plan = []
        for step, deps in order:
            links = {"step": step.name, "waiting_on": len(deps) or None, "on_failure": step.on_failure}
            try:
                new = self._build(step.job, step.payload, step.options, allow_unknown, links)
            except BadInput as exc:
                raise type(exc)(f"step {step.name!r}: {exc}") from None
            plan.append((new, [position[dep] for dep in deps]))
        self._ready()
        workflow_id, _ = self.store.workflows.enqueue(workflow.name, key, plan, connection=connection)
        return workflow_id

    def get_workflow(self, workflow_id: int) -> WorkflowInfo | None:
        """The workflow with each step's status, dependencies and result; None if unknown."""
        self._ready()
        return self.store.workflows.get(_id(workflow_id, "workflow"))

    def list_workflows(self, *, limit: int = 100) -> list[WorkflowInfo]:
        """Workflows, newest first, with their step counts (not the steps)."""
        self._ready()
        return self.store.workflows.list(limit=check_limit(limit))

    def cancel_workflow(self, workflow_id: int, *, actor: str | None = None) -> int:
        """Cancel every unfinished step; returns how many: a running one is asked to stop and
        ends cancelled once its worker stops it. Audited."""
        workflow_id, who = _id(workflow_id, "workflow"), actor_of(actor)
        self._ready()
        found = self.store.workflows.get(workflow_id) is not None
        cancelled = self.store.workflows.cancel(workflow_id)
        outcome = "ok" if found else "not_found"
        self._audit(who, "workflow.cancel", target=f"workflow:{workflow_id}", job_count=cancelled, outcome=outcome)
        return cancelled

    def retry_workflow(self, workflow_id: int, *, actor: str | None = None) -> list[int]:
        """Run a finished workflow's failed and cancelled steps again; returns their ids.
        Audited."""
        workflow_id, who = _id(workflow_id, "workflow"), actor_of(actor)
        self._ready()
        target = f"workflow:{workflow_id}"
        if self.store.workflows.get(workflow_id) is None:
            self._audit(who, "workflow.retry", target=target, job_count=0, outcome="not_found")
            raise JobNotFound(f"no workflow with id {workflow_id}")
        try:
            retried = self.store.workflows.retry(workflow_id)
        except BadInput as exc:  # a step still running: the workflow's state forbids it
            self._audit(
                who, "workflow.retry", target=target, job_count=0, outcome="refused", detail={"reason": str(exc)}
            )
            raise
        self._audit(who, "workflow.retry", target=target, job_ids=retried, job_count=len(retried))
        return retried

    # -- batches --------------------------------------------------------------------------

    def enqueue_batch(
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
        """Store a closed batch of `children` (mappings like `enqueue_many`'s) in one
        transaction and return its id. Once every child has ended, `on_complete` fires;
        then `on_success` if all succeeded, else `on_failure`. Each is a job name or a
        (job name, payload mapping) pair; the callback's payload gets ``"batch": {"id",
        "counts"}`` added. `progress(n)` is called as each chunk is written."""
        callbacks = self._callbacks(on_complete, on_success, on_failure, allow_unknown)
        if name is not None:
            check_text(name, "batch name")
        news = _children(self._build_many(children, allow_unknown, "children"), 0)
        self._ready()
        batches = self.store.batches
        batch_id, _ = batches.enqueue(name, callbacks, news, connection=connection, progress=progress)
        return batch_id

    def open_batch(
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
        self._ready()
        batch_id = self.store.batches.open(name, callbacks, connection=connection)
        return Batch(self, batch_id, connection, allow_unknown)

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
                self._check_follow_up(callback.job, callback.payload, allow_unknown, "a batch callback", added)
                callbacks[key] = callback.describe()
        return callbacks

    def get_batch(self, batch_id: int) -> BatchInfo | None:
        """The batch with its children's counts by status; None if unknown."""
        self._ready()
        return self.store.batches.get(_id(batch_id, "batch"))

    def list_batches(self, *, unfinished: bool = False, limit: int = 100) -> list[BatchInfo]:
        self._ready()
        return self.store.batches.list(unfinished=unfinished, limit=check_limit(limit))

    def cancel_batch(self, batch_id: int, *, actor: str | None = None) -> int:
        """Cancel every unfinished child and close the batch (its callbacks fire with the
        counts, once the running children its cancel asked to stop have ended); returns how
        many children were cancelled or asked to stop. Audited."""
        batch_id, who = _id(batch_id, "batch"), actor_of(actor)
        self._ready()
        if self.store.batches.get(batch_id) is None:
            self._audit(who, "batch.cancel", target=f"batch:{batch_id}", job_count=0, outcome="not_found")
            raise JobNotFound(f"no batch with id {batch_id}")
        cancelled = self.store.batches.cancel(batch_id)
        self._audit(who, "batch.cancel", target=f"batch:{batch_id}", job_count=cancelled)
        return cancelled


class Batch:
    """An open batch (`Client.open_batch`): add children, then close it."""

    def __init__(self, client: GroupsAPI, batch_id: int, connection: Connection | None, allow_unknown: bool) -> None:
        self.client, self.id, self.connection, self.allow_unknown = client, batch_id, connection, allow_unknown
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
        news = _children(self.client._build_many(children, self.allow_unknown, "children"), self.added)
        ids = self.client.store.batches.add(self.id, news, connection=self.connection, progress=progress, close=close)
        self.added += len(ids)
        return ids

    def close(self) -> bool:
        """No more children; False if it was closed already."""
        return self.client.store.batches.close(self.id, connection=self.connection)


def _children(news: list[NewJob], added: int) -> list[NewJob]:
    """`news` as a batch's children, after `added` others: `BadInput` over the cap, or for
    a unique key (a live job's id would stand for a child that was never added)."""
    if added + len(news) > MAX_BATCH:
        raise BadInput(f"a batch holds at most {MAX_BATCH:,} children; this would make it {added + len(news):,}")
    for index, new in enumerate(news):
        if new.unique_key is not None:
            raise BadInput(f"children[{index}]: a batch's child cannot have a unique_key")
    return news


def _id(value: object, what: str) -> int:
    from jobsup.client import _job_id

    try:
        return _job_id(value)
    except BadInput:
        raise BadInput(f"a {what} id is a whole number of at most 64 bits, not {value!r}") from None
