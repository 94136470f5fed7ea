"""What runs inside each transition: the in-transaction steps, listed in `STEPS`.

A step runs on the transition's connection, inside its transaction, after its
compare-and-set has matched: a concurrency key hands its slot on, a workflow unblocks the
dependents of a job that settled, a batch enqueues its callback when its last child ends, a
breaker counts the settle, idle workers are woken for a job pending again, the outbox
records the event. It sees what changed (`Change`) and
may write with a few dialect-neutral statements; if it raises, the whole transition rolls
back and the caller sees the error, as if the compare-and-set had failed with it.

`STEPS` is the whole list, in the order the steps run: to know every statement a
`complete` runs, read its line. A selective step runs only when the transition says its
jobs need it (`needs_steps`: a job in a workflow or batch, with triggers or under a
concurrency key, see `Held.needs_steps`; a job of a type with a breaker; a claim on a queue with a
rate-limited type); the events' step runs only while someone wants that transition's
events. A transition with no step to run keeps its single-statement fast path on
PostgreSQL.
(Retention deleting finished jobs is not a transition and has no steps: a feature whose
rows refer to jobs must add that to `store/retention.py` when it adds the rows.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Row

from jobsup.events import publishing
from jobsup.store import breakers, concurrency_keys, rates, triggers
from jobsup.store.rows import needs_steps
from jobsup.store.schema import FINISHED_STATUSES, PENDING

if TYPE_CHECKING:
    from jobsup.jobtypes import Resolver
    from jobsup.store.batches import Batches
    from jobsup.store.chain import Returning
    from jobsup.store.database import Database
    from jobsup.store.dialects import Dialect
    from jobsup.store.rows import NewJob
    from jobsup.store.statements import Statements
    from jobsup.store.workflows import Workflows


class StepContext(Protocol):
    """What a feature (its steps, its workflows and batches) may use of the `Transitions`
    running it: the database, the statements and job types, how long to wait for a key's
    row, and the two transitions a feature sets off itself: `insert` (a trigger's job, a
    batch's callback, a workflow's steps) and `cancel_where` (a workflow's or batch's
    jobs). Not the worker's transitions (claim, settle, renew)."""

    db: Database
    dialect: Dialect
    sql: Statements
    resolver: Resolver
    key_wait: float | None
    workflows: Workflows
    batches: Batches

    def insert(
        self, conn: Connection, jobs: Sequence[NewJob], clock: Mapping[str, Any]
    ) -> tuple[list[int], list[int]]: ...

    def cancel_where(
        self,
        chain: Returning,
        which: Mapping[str, Any],
        now: datetime | None,
        also: Callable[[Connection, dict[str, Any]], object] | None = None,
    ) -> Sequence[Row[Any]]: ...


@dataclass(frozen=True)
class Change:
    """What a transition changed, as its steps see it.

    `rows` are the rows its compare-and-set matched (for `enqueue`, (id, `NewJob`) pairs;
    for `claim`, the claimed rows; for the others, the columns its statement returns: the
    new status, the columns the steps read (`step_statements.STEP_COLUMNS`) and what the job's events say of it
    (`statements.EVENT_COLUMNS`));
    `params` are its bound parameters, clock included, so a step's statements use the same
    instant."""

    transition: str
    rows: Sequence[Row[Any]] | Sequence[Any]
    params: Mapping[str, Any]
    context: StepContext  # what the steps may use of the `Transitions` running it
    # A claim's steps may put claimed rows back in the claim's own transaction (a rate
    # window with no room): their ids, which the claim then does not return, and when each
    # is due again.
    dropped: dict[int, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    run: Callable[[Connection, Change], None]
    selective: bool = True  # runs only when the transition says its jobs need it (`needs_steps`)
    wanted: Callable[[str], bool] | None = None  # asked with the transition: is it on in this process?


def after_finish(conn: Connection, change: Change) -> None:
    """What the end of jobs in workflows or batches, or with triggers, does in its
    transaction, level by level: their triggers fire, their batches count them, their
    workflows' dependents unblock (or, cancelled by a failed dependency, end too: the next
    level); then each workflow may end."""
    t, clock = change.context, {"p_now": change.params.get("p_now")}
    level = [row for row in change.rows if row.status in FINISHED_STATUSES and needs_steps(row)]
    workflows: set[int] = set()
    while level:
        triggers.fire(conn, t, [row for row in level if row.triggers is not None], clock)
        for batch_id in sorted({row.batch_id for row in level if row.batch_id is not None}):
            t.batches.child_ended(conn, batch_id, clock)
        workflow_steps = [row for row in level if row.workflow_id is not None]
        workflows |= {int(row.workflow_id) for row in workflow_steps}
        level = t.workflows.unblock_dependents(conn, workflow_steps, clock)
    for workflow_id in sorted(workflows):  # once every level is settled: its last steps may be among them
        t.workflows.step_ended(conn, workflow_id, clock)


def _recount(conn: Connection, change: Change) -> None:
    change.context.workflows.step_retried(conn, change.rows, change.params)


def wake_idle_workers(conn: Connection, change: Change) -> None:
    """Jobs pending and due again (given back unstarted, or retried from the dead letters):
    wake their queues' idle workers when this commits, as an enqueue does. Otherwise a job a
    busy worker gives back waits for another's next poll (5 s on PostgreSQL), though idle
    workers of its queue could start it at once. (A release that ended the job cancelled
    wakes nobody; a retried job a key holds back wakes its queue for nothing.)"""
    queues = {row.queue for row in change.rows if row.status == PENDING}
    if queues:
        change.context.dialect.after_enqueue(conn, queues)


_HAND_ON_KEYS = Step(concurrency_keys.after_finish)  # a key's slot to the next waiting job
_UNBLOCK = Step(after_finish)  # dependents, batch callbacks, triggers
_COUNT_SETTLES = Step(breakers.count_settles)  # a breaker type's successes and failures
_WAKE = Step(wake_idle_workers, selective=False)  # every release and retry, whatever its jobs
# The outbox, and hooks after commit. Looked up when called: `publishing` imports the store,
# which imports this module, so `publishing` may still be loading when this line runs.
_EVENTS = Step(
    lambda conn, change: publishing.publish_transition(conn, change),
    selective=False,
    wanted=lambda transition: publishing.wanted(transition),
)

# One line per transition (an arrow of DESIGN section 4), its steps in the order they run.
STEPS: dict[str, tuple[Step, ...]] = {
    "enqueue": (_EVENTS,),
    "claim": (Step(rates.admit_claimed), _EVENTS),  # rate windows: put back what has no room
    "complete": (_HAND_ON_KEYS, _UNBLOCK, _COUNT_SETTLES, _EVENTS),
    "fail": (_HAND_ON_KEYS, _UNBLOCK, _COUNT_SETTLES, _EVENTS),
    "expire": (_HAND_ON_KEYS, _UNBLOCK, _COUNT_SETTLES, _EVENTS),
    # A release ends the job when an operator asked to cancel it while it was held.
    "release": (_HAND_ON_KEYS, _UNBLOCK, _WAKE, _EVENTS),
    "cancel": (_HAND_ON_KEYS, _UNBLOCK),  # its event: `publish`, as the transition's own
    "retry": (Step(concurrency_keys.after_retry), Step(_recount), _WAKE),  # a dead letter waits again
}


def of(transition: str, *, needs_steps: bool = True) -> tuple[Callable[[Connection, Change], None], ...]:
    """The steps a `transition` runs now: those that are on, the selective ones only when
    `needs_steps` (some of its jobs need them: `Held.needs_steps`, a breaker type's)."""
    return tuple(
        step.run
        for step in STEPS[transition]
        if (needs_steps or not step.selective) and (step.wanted is None or step.wanted(transition))
    )


def run(conn: Connection, change: Change, *, needs_steps: bool = True) -> None:
    for step in of(change.transition, needs_steps=needs_steps):
        step(conn, change)
