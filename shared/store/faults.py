"""Fault injection: make this process's database commands fail for a window of time.

A spec names the processes, the operations and the window:

    ROLE:OPERATIONS@START+LENGTH[:hang][;...]   e.g. worker:renew@2s+30s;supervisor:maintenance@0s+20s

ROLE is ``worker``, ``supervisor`` or ``any``; OPERATIONS is a comma list of store
operations (``claim``, ``renew``, ``settle``, ``maintenance``, ``enqueue``...) or ``all``;
the window opens START after the process started and lasts LENGTH. Set it with the
``JOBSUP_FAULTS`` environment variable or ``jobsup start --faults``. While the window is
open, matching statements raise `DatabaseUnavailable` before they reach the database, as an
outage would; with ``:hang`` they block until the window closes instead, as a half-open
connection would. Meant for tests and drills, never for production.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event

from jobsup.durations import parse_duration
from jobsup.errors import ConfigurationError, DatabaseUnavailable

OPERATION = "jobsup_operation"  # execution option naming the store operation


@dataclass(frozen=True)
class Fault:
    role: str
    operations: frozenset[str]
    start: float
    length: float
    hang: bool = False

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
            if action not in ("", "hang"):
                raise ValueError(action)
        except ValueError:
            raise ConfigurationError(
                f"fault {part!r} is not ROLE:OPERATIONS@START+LENGTH[:hang] (e.g. worker:renew@2s+30s)"
            ) from None
        if role not in ("worker", "supervisor", "any"):
            raise ConfigurationError(f"fault {part!r}: role must be worker, supervisor or any")
        faults.append(
            Fault(
                role,
                frozenset(op.strip() for op in operations.split(",") if op.strip()),
                parse_duration(start, what="fault start"),
                parse_duration(length, what="fault length"),
                hang=action == "hang",
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

    @event.listens_for(engine, "before_cursor_execute")
    def fail(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        operation = conn.get_execution_options().get(OPERATION, "other")
        elapsed = time.monotonic() - started
        for fault in faults:
            if fault.active(role, operation, elapsed):
                if fault.hang:
                    time.sleep(fault.start + fault.length - elapsed)
                    return
                raise DatabaseUnavailable(f"injected fault: {operation} fails for now (JOBSUP_FAULTS)")
