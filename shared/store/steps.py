"""In-transaction steps: how a feature joins a state transition.

A step runs on the transition's connection, inside its transaction, after its
compare-and-set has matched: a workflow unblocks the dependents of a job that settled, a
batch enqueues its callback when its last child ends, the outbox records the event. It sees
what changed (`Change`) and may write with a few dialect-neutral statements; if it raises,
the whole transition rolls back and the caller sees the error, as if the compare-and-set had
failed with it.

    from jobsup.store import steps

    def unblock_dependents(conn, change):
        ...

    steps.register("complete", unblock_dependents)

Register at import time, before the transitions run. A transition with no step registered
runs as before: on PostgreSQL the claim and the completion stay single statements. (Retention
deleting finished jobs is not a transition and has no steps yet: a feature whose rows refer
to jobs must add that hook to `store/retention.py` when it adds the rows.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row

# The transitions a step can join: one per arrow of DESIGN section 4.
TRANSITIONS = ("enqueue", "claim", "complete", "fail", "release", "cancel", "expire", "retry", "fire")


@dataclass(frozen=True)
class Change:
    """What a transition changed, as its steps see it.

    `rows` are the rows its compare-and-set matched (for `enqueue`, the inserted ids; for
    `claim`, the claimed rows; for `fail` and `expire`, each row's id and new status);
    `params` are its bound parameters, clock included, so a step's statements use the same
    instant."""

    transition: str
    rows: Sequence[Row[Any]] | Sequence[Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    transitions: Any = None  # the `Transitions` running it: its statements, resolver and insert
    # A claim's steps may put claimed rows back in the claim's own transaction (a rate
    # window with no room): their ids, which the claim then does not return, and when each
    # is due again.
    dropped: dict[int, datetime] = field(default_factory=dict)


Step = Callable[[Connection, Change], None]

_steps: dict[str, list[tuple[Step, bool]]] = {name: [] for name in TRANSITIONS}


def register(transition: str, step: Step, *, linked_only: bool = False) -> Step:
    """Run `step` inside every `transition` from now on; returns it (usable as a decorator
    through `functools.partial`). A `linked_only` step concerns linked jobs alone (in a
    workflow or batch, or with triggers, see `Held.linked`): a transition of plain jobs
    skips it, and keeps its single-statement fast path."""
    if transition not in _steps:
        raise ValueError(f"no transition named {transition!r}; the transitions are {', '.join(TRANSITIONS)}")
    _steps[transition].append((step, linked_only))
    return step


def unregister(transition: str, step: Step) -> None:
    """Stop running `step` inside `transition` (a feature switched off again)."""
    _steps[transition][:] = [(each, linked_only) for each, linked_only in _steps[transition] if each is not step]


def of(transition: str, *, linked: bool = True) -> tuple[Step, ...]:
    """The steps a `transition` runs: all of them when it touches a linked job, else those
    that concern every job."""
    return tuple(step for step, linked_only in _steps[transition] if linked or not linked_only)


def run(conn: Connection, change: Change, *, linked: bool = True) -> None:
    for step in of(change.transition, linked=linked):
        step(conn, change)
