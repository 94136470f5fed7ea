"""Logic emits events; this is the one place that turns them into log lines.

An event is a name and fields: ``event("job.failed", job=42, name="send-email", attempt=2)``
becomes ``job.failed job=42 name=send-email attempt=2``. Payload values never reach here:
errors arrive already scrubbed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("jobsup")

_WARNINGS = {"job.failed", "job.dead_lettered", "job.lease_lost", "worker.died", "recurring.invalid"}
_ERRORS = {"db.error", "supervisor.failed", "worker.crashed", "maintenance.failed"}


def event(kind: str, /, **fields: Any) -> None:
    level = logging.ERROR if kind in _ERRORS else logging.WARNING if kind in _WARNINGS else logging.INFO
    if not log.isEnabledFor(level):
        return
    text = " ".join(f"{key}={_value(value)}" for key, value in fields.items() if value is not None)
    log.log(level, "%s %s", kind, text)


def _value(value: Any) -> str:
    text = str(value)
    return repr(text) if (" " in text or not text) else text


def configure_logging(level: str = "INFO") -> None:
    """One line per event on stderr, with the process id (workers are separate processes)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(message)s"))
    root = logging.getLogger("jobsup")
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("JOBSUP_LOG_LEVEL", level).upper())
    root.propagate = False
