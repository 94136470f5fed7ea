"""Running one job function and turning what happened into an outcome to settle."""

from __future__ import annotations

import json
import logging
import threading
import traceback
from dataclasses import dataclass
from typing import Any

from jobsup.context import JobContext
from jobsup.errors import Discard, InvalidPayload, Retry
from jobsup.observe.events import log
from jobsup.payload import decode_payload
from jobsup.registry import lookup
from jobsup.scrub import error_text, scrub, secrets_of
from jobsup.store.rows import ClaimedJob


@dataclass(frozen=True)
class Outcome:
    """succeeded; failed (retry unless out of attempts); discarded (dead-letter now)."""

    kind: str
    error: str | None = None
    retry_in: float | None = None  # a `Retry(after=)` delay; None: the backoff
    result: str | None = None


class UnknownJob(Exception):
    """No job of this name is registered in this worker."""


def execute(job: ClaimedJob, cancelled: threading.Event) -> Outcome:
    registered = lookup(job.name)
    if registered is None:
        # Retried: a rolling deploy may bring the code that knows this name.
        return Outcome("failed", f"UnknownJob: no job named {job.name!r} is registered in this worker")
    try:
        payload = decode_payload(job.payload)
        secrets = secrets_of(payload)
    except (InvalidPayload, RecursionError) as exc:
        return Outcome("discarded", f"InvalidPayload: {exc}")  # retrying cannot mend it
    ctx = JobContext(job.id, job.name, job.queue, job.attempt, job.max_attempts, payload, job.actor, cancelled)
    try:
        value = registered.function(ctx, payload)
    except Retry as exc:
        return Outcome("failed", error_text(exc, secrets), retry_in=exc.after)
    except Discard as exc:
        return Outcome("discarded", error_text(exc, secrets))
    except BaseException as exc:  # a job's SystemExit or KeyboardInterrupt fails the attempt too
        if log.isEnabledFor(logging.WARNING):
            log.warning(
                "job.traceback job=%s name=%s attempt=%s\n%s",
                job.id,
                job.name,
                job.attempt,
                scrub("".join(traceback.format_exception(exc)), secrets),
            )
        return Outcome("failed", error_text(exc, secrets))
    return Outcome("succeeded", result=_result(value))


def _result(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None  # a result that is not JSON is not kept
