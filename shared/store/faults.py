"""Fault injection: make this process's database commands fail for a window of time.

A spec names the processes, the operations and the window:

    ROLE:OPERATIONS@START+LENGTH[:hang|:lost][;...]   e.g. worker:renew@2s+30s;supervisor:maintenance@0s+20s

ROLE is ``worker``, ``supervisor`` or ``any``; OPERATIONS is a comma list of store
operations (``claim``, ``renew``, ``settle``, ``maintenance``, ``enqueue``...) or ``all``;
the window opens START after the process started and lasts LENGTH. Set it with the
``JOBSUP_FAULTS`` environment variable or ``jobsup start --faults``. While the window is
open, matching statements raise `DatabaseUnavailable` before they reach the database, as an
outage would; with ``:hang`` they block until the window closes instead, as a half-open
connection would; with ``:lost`` they run and then raise, as a reply lost after the server
did the work would (the work stays done where the statement commits by itself, as the
PostgreSQL claim does). Meant for tests and drills, never for production.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event

from jobsup.durations import parse_duration
from jobsup.errors import ConfigurationError, DatabaseUnavailable
from jobsup.observe.events import emit

OPERATION = "jobsup_operation"  # execution option naming the store operation
# Every operation a statement can be run under (the Database asserts it; "other" is a
# statement run without one, as the migrations are), so a fault naming anything else is
# refused rather than silently injecting nothing.
OPERATIONS = frozenset(
    {
        "read", "write", "claim", "renew", "settle", "release", "cancel", "enqueue", "maintenance",
        "retention", "dead_letters", "recurring", "definitions", "process", "inspect", "stats",
        "schema", "health", "joblog", "workflows", "batches", "keys", "queues", "audit", "breakers", "sla",
        "calendars", "outbox", "sessions", "other",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Fault:
    role: str
    operations: frozenset[str]
    start: float
    length: float
    action: str = ""  # "", "hang" or "lost"

    def active(self, role: str, operation: str, elapsed: float) -> bool:
        return (
            self.role in (role, "any")
            and ("all" in self.operations or operation in self.operations)
            and self.start <= elapsed < self.start + self.length
        )


def parse(spec: str) -> list[Fault]:
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        try:
            role, rest = part.split(":", 1)
            operations, window = rest.split("@", 1)
            start, length = window.split("+", 1)
            length, _, action = length.partition(":")
            if action not in ("", "hang", "lost"):
                raise ValueError(action)
        except ValueError:
            raise ConfigurationError(
                f"fault {part!r} is not ROLE:OPERATIONS@START+LENGTH[:hang|:lost] (e.g. worker:renew@2s+30s)"
            ) from None
        if role not in ("worker", "supervisor", "any"):
            raise ConfigurationError(f"fault {part!r}: role must be worker, supervisor or any")
        named = frozenset(op.strip() for op in operations.split(",") if op.strip())
        unknown = sorted(named - OPERATIONS - {"all"})
        if not named:
            raise ConfigurationError(f"fault {part!r} names no operation; name some, or all")
        if unknown:
            raise ConfigurationError(
                f"fault {part!r}: no operation named {', '.join(unknown)}; use all or some of "
                f"{', '.join(sorted(OPERATIONS))}"
            )
        faults.append(
            Fault(
                role,
                named,
                parse_duration(start, what="fault start"),
                parse_duration(length, what="fault length"),
                action=action,
            )
        )
    return faults


def install(engine: Engine, role: str, spec: str | None = None) -> None:
    """Arm the faults of `spec` (default: ``JOBSUP_FAULTS``) for `role` on `engine`; their
    windows count from now."""
    given = spec if spec is not None else os.environ.get("JOBSUP_FAULTS", "")
    faults = [f for f in parse(given) if f.role in (role, "any")]
    if not faults:
        return
    started = time.monotonic()  # windows count from when this process armed them

    def active(conn: Any, lost: bool) -> tuple[Fault, str, float] | None:
        operation = conn.get_execution_options().get(OPERATION, "other")
        elapsed = time.monotonic() - started
        for fault in faults:
            if (fault.action == "lost") == lost and fault.active(role, operation, elapsed):
                return fault, operation, elapsed
        return None

    @event.listens_for(engine, "before_cursor_execute")
    def fail(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        found = active(conn, lost=False)
        if found is None:
            return
        fault, operation, elapsed = found
        if fault.action == "hang":
            left = fault.start + fault.length - elapsed
            # Said, so a drill (or a test) knows the process is inside the hang, not before it.
            emit("fault.hanging", role=role, operation=operation, seconds=round(left, 1))
            time.sleep(left)
            return
        raise DatabaseUnavailable(f"injected fault: {operation} fails for now (JOBSUP_FAULTS)")

    @event.listens_for(engine, "after_cursor_execute")
    def lose(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        found = active(conn, lost=True)
        if found is not None:
            raise DatabaseUnavailable(f"injected fault: the reply to {found[1]} was lost (JOBSUP_FAULTS)")
