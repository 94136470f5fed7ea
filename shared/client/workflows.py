"""`client.workflows`: enqueue a workflow (steps with dependencies), look at it, cancel it,
retry its failed steps."""

from __future__ import annotations

import builtins

from sqlalchemy import Connection

from jobsup.audit import actor_of
from jobsup.checks import check_limit, check_text
from jobsup.client.core import ClientCore, row_id
from jobsup.errors import BadInput, JobNotFound
from jobsup.store.rows import WorkflowInfo
from jobsup.workflow_spec import Workflow


class Workflows:
    """Workflows: `jobsup.Workflow`s of steps, each a job that waits for the steps it depends on."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def enqueue(
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
            raise BadInput(f"workflows.enqueue takes a jobsup.Workflow, not {type(workflow).__name__}")
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
                new = self._core.build(step.job, step.payload, step.options, allow_unknown, links)
            except BadInput as exc:
                raise type(exc)(f"step {step.name!r}: {exc}") from None
            plan.append((new, [position[dep] for dep in deps]))
        workflow_id, _ = self._core.store.workflows.enqueue(workflow.name, key, plan, connection=connection)
        return workflow_id

    def get(self, workflow_id: int) -> WorkflowInfo | None:
        """The workflow with each step's status, dependencies and result; None if unknown."""
        workflow_id = row_id(workflow_id, "workflow")
        return self._core.store.workflows.get(workflow_id)

    def list(self, *, limit: int = 100) -> builtins.list[WorkflowInfo]:
        """Workflows, newest first, with their step counts (not the steps)."""
        limit = check_limit(limit)
        return self._core.store.workflows.list(limit=limit)

    def cancel(self, workflow_id: int, *, actor: str | None = None) -> int:
        """Cancel every unfinished step; returns how many: a running one is asked to stop and
        ends cancelled once its worker stops it. Audited."""
        workflow_id, who = row_id(workflow_id, "workflow"), actor_of(actor)
        known = self._core.store.workflows.get(workflow_id) is not None
        cancelled = self._core.store.workflows.cancel(workflow_id)
        outcome = "ok" if known else "not_found"
        target = f"workflow:{workflow_id}"
        self._core.audited(who, "workflow.cancel", target=target, job_count=cancelled, outcome=outcome)
        return cancelled

    def retry(self, workflow_id: int, *, actor: str | None = None) -> builtins.list[int]:
        """Run a finished workflow's failed and cancelled steps again; returns their ids.
        Audited."""
        workflow_id, who = row_id(workflow_id, "workflow"), actor_of(actor)
        target = f"workflow:{workflow_id}"
        if self._core.store.workflows.get(workflow_id) is None:
            self._core.audited(who, "workflow.retry", target=target, job_count=0, outcome="not_found")
            raise JobNotFound(f"no workflow with id {workflow_id}")
        try:
            retried = self._core.store.workflows.retry(workflow_id)
        except BadInput as exc:  # a step still running: the workflow's state forbids it
            detail = {"reason": str(exc)}
            self._core.audited(who, "workflow.retry", target=target, job_count=0, outcome="refused", detail=detail)
            raise
        self._core.audited(who, "workflow.retry", target=target, job_ids=retried, job_count=len(retried))
        return retried
