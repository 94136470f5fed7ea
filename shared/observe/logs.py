"""Events as log lines: one line per event, text or JSON, with the process id (workers are
separate processes). ``job.failed job=42 name=send-email attempt=2 queue=mail``."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from jobsup.events import catalogue

log = logging.getLogger("jobsup")


def record(kind: str, fields: dict[str, Any]) -> None:
    if fields.get("quiet"):  # counted, but said once already (a failure repeating as it is retried)
        return
    level = catalogue.level(kind)
    if not log.isEnabledFor(level):
        return
    present = {key: value for key, value in fields.items() if value is not None}
    each = present.pop("each", None)  # a line of its own for each job, at DEBUG (`catalogue.EACH`)
    exc = present.pop("exc", None)
    # A job's own exception, unscrubbed: on the record for what reads records (Sentry's
    # logging integration), never in jobsup's lines, which show the scrubbed `error` (and
    # the scrubbed `job.traceback` line before it).
    raised = present.pop("exception", None)
    trace = present.get("traceback")
    text = " ".join(f"{key}={_value(value)}" for key, value in present.items() if value is not trace)
    if trace is not None:
        text += "\n" + str(trace)
    shown = exc if isinstance(exc, BaseException) else raised if isinstance(raised, BaseException) else None
    exc_info = (type(shown), shown, shown.__traceback__) if shown is not None else None
    extra = {"event": kind, "fields": present, UNSCRUBBED: shown is not None and shown is raised}
    log.log(level, "%s %s", kind, text, exc_info=exc_info, extra=extra)
    if each:
        _each(kind, each, present.get("worker"))


def shows(kind: str) -> bool:
    """Does the log show events of `kind` (is its level enabled)?"""
    return log.isEnabledFor(catalogue.level(kind))


def _each(batch: str, jobs: Iterable[tuple[Any, ...]], worker: str | None) -> None:
    kind, names = catalogue.EACH[batch]
    if not shows(kind):
        return
    *same, last = names  # the worker goes before the last (the run time, or the wait), as in a job's own event
    for job in jobs:
        *values, measured = job
        fields = dict(zip(same, values, strict=True))
        record(kind, {**fields, "worker": worker, last: None if measured is None else round(measured, 6)})


UNSCRUBBED = "jobsup_unscrubbed"  # a record's exc_info is a job's raw exception: not for jobsup's lines


class TextFormatter(logging.Formatter):
    """jobsup's text lines: a record's exception as its traceback, unless it is a job's
    raw exception (see `record`)."""

    def format(self, record: logging.LogRecord) -> str:
        if not getattr(record, UNSCRUBBED, False):
            return super().format(record)
        exc_info, exc_text = record.exc_info, record.exc_text
        record.exc_info = record.exc_text = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = exc_info, exc_text


def _value(value: Any) -> str:
    # Seconds and rates to the millisecond: 2.474195 reads as noise in a line meant for people
    # (the JSON format keeps them whole).
    text = str(round(value, 3)) if isinstance(value, float) else str(value)
    return repr(text) if (" " in text or not text) else text


def id_ranges(ids: Iterable[int]) -> str:
    """Job ids as runs: ``1-3,7,9-10``, so that a batch's line says which jobs it settled in
    a few characters where it can."""
    runs: list[list[int]] = []
    for job_id in sorted(ids):
        if runs and job_id == runs[-1][1] + 1:
            runs[-1][1] = job_id
        else:
            runs.append([job_id, job_id])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, the logging process, the event and its fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "process": record.process,
            "event": getattr(record, "event", None),
        }
        fields = getattr(record, "fields", None)
        if fields is None:
            entry["message"] = record.getMessage()
        else:
            entry.update(
                {key: value if isinstance(value, int | float | bool) else str(value) for key, value in fields.items()}
            )
        if record.exc_info and not getattr(record, UNSCRUBBED, False):
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str = "INFO", format: str = "text") -> None:
    """One line per event on stderr, with the process id."""
    handler = logging.StreamHandler()
    if format == "json":
        formatter: logging.Formatter = JSONFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = TextFormatter("%(asctime)s %(levelname)s [%(process)d] %(message)s")
    handler.setFormatter(formatter)
    ours = logging.getLogger("jobsup")
    ours.handlers[:] = [handler]
    ours.setLevel(os.environ.get("JOBSUP_LOG_LEVEL", level).upper())
    ours.propagate = False  # its lines once, through its own handler


def share_with_root() -> None:
    """Give the root logger jobsup's handler and level (`configure_logging`), so what an
    application's code logs inside a job is shown; unless the root logger has a handler
    already (the application set up its own logging when it was imported)."""
    root, ours = logging.getLogger(), logging.getLogger("jobsup")
    if not root.handlers and ours.handlers:
        root.addHandler(ours.handlers[0])
        root.setLevel(ours.level)
