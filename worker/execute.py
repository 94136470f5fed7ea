"""Running one job function, and turning what happened into the `Outcome` the transitions
write.

What a job's attempt comes to depends on why it was asked to stop, not only on what the
function did: once its cancel event is set for a shutdown, the attempt is released (it does
not count) whatever the function returns; set for a timeout, it is `timed_out`; set because
its lease was lost, `lease_expired` (a compare-and-set: nothing changes if another worker
has the job by now); set because an operator cancelled it, `cancelled` (the row kept its
lease and all it holds until now), unless the function had succeeded all the same.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobsup.context import JobContext, job_context
from jobsup.errors import Cancelled, ConfigurationError, Discard, InvalidPayload, Retry
from jobsup.observe import tracing
from jobsup.observe.events import emit
from jobsup.paramcheck import check
from jobsup.payload import decode_payload, to_json
from jobsup.registry import lookup
from jobsup.scrub import Secrets, error_text, scrub, secrets_of, validation_text
from jobsup.secrets import MARK, SealedParameterError, has_sealed, job_binding, keyring, sealed_fields
from jobsup.store.rows import CANCELLED as CANCELLED_OUTCOME
from jobsup.store.rows import DISCARDED, FAILED, LEASE_EXPIRED, RELEASED, SUCCEEDED, TIMED_OUT, ClaimedJob, Outcome
from jobsup.templates import Moment
from jobsup.worker.frames import stored_frames
from jobsup.worker.services import JobServices

RESULT_CAP = 64 * 1024  # characters of JSON a job's return value may take in the database

# Why a running job's cancel event was set.
SHUTDOWN, TIMEOUT, CANCELLED, LEASE_LOST = "shutdown", "timed_out", "cancelled", "lease_lost"
_NONE_SEALED: frozenset[str] = frozenset()


@dataclass(slots=True)  # not frozen: one per job, and a frozen init costs twice as much
class Ran:
    """What the job function did: `kind` is SUCCEEDED, FAILED or DISCARDED."""

    kind: str
    error: str | None = None
    retry_in: float | None = None  # a `Retry(after=)` delay; None: the retry policy
    result: str | None = None
    exc: BaseException | None = field(default=None, compare=False, repr=False)  # what it raised, unscrubbed
    traceback: str | None = None  # its frames as stored (`jobsup.worker.frames`)


@dataclass(slots=True)  # not frozen: one per job (see `Ran`)
class Prepared:
    """A job ready to call: its function, context, decoded payload, and the payload's
    secrets (scrubbed from any error text)."""

    function: Any
    ctx: JobContext
    payload: Any
    secrets: Secrets
    is_async: bool
    # It has sensitive parameters: what it raises is never handed on unscrubbed (its
    # frames hold the opened values), only as the scrubbed text.
    sensitive: bool = False


def prepare(job: ClaimedJob, cancelled: threading.Event, services: JobServices | None = None) -> Prepared | Ran:
    """The call to make, or the `Ran` of a job that cannot be called. `services` gives the
    context what reaches beyond the job itself (its log, its upstream results)."""
    registered = lookup(job.name)
    if registered is None:
        # Retried: a rolling deploy may bring the code that knows this name.
        return Ran(FAILED, f"UnknownJob: no job named {job.name!r} is registered in this worker")
    try:
        payload = decode_payload(job.payload)
    except (InvalidPayload, RecursionError) as exc:
        return Ran(DISCARDED, f"InvalidPayload: {exc}")  # retrying cannot mend it
    # Sensitive: what was sealed, and what this code marks sensitive (a row may predate it).
    # A sealed value's mark is in its row's text, unless written with \u escapes: a text with
    # neither (most) is not walked for one.
    text = job.payload
    walk = not isinstance(text, str) or MARK in text or "\\u" in text  # (bytes another writer stored: walked)
    sealed = sealed_fields(payload) if walk else _NONE_SEALED
    sensitive = sealed | registered.params.sensitive if registered.params else sealed
    if sealed:  # (`unsealed` would look for them again: most payloads have none)
        try:
            payload = unsealed(job, payload)
        except (SealedParameterError, ConfigurationError) as exc:
            # Retried: the key may be added to JOBSUP_ENCRYPTION_KEYS by the next attempt.
            emit("secrets.unseal_failed", job=job.id, name=job.name, error=exc)
            return Ran(FAILED, f"{type(exc).__name__}: {exc}")
    # Found from the stored row again if a text needs them (not the payload the job is
    # given, which it may change before it fails).
    secrets = Secrets.deferred(lambda: secrets_of(unsealed(job, decode_payload(job.payload)), sensitive))
    if registered.params is not None:
        try:
            # A job enqueued before its type had a template default is given one now, as of
            # when it was due (made only for a type with one: this is every typed job's path).
            moment = Moment.of(job.name, job.queue, now=_as_utc(job.due)) if registered.params.templated else None
            payload = registered.params.make(check(registered.params.schema, payload, job=job.name, moment=moment))
        except Exception as exc:
            # Retried, not discarded: a deploy may bring parameters this payload fits
            # (`jobsup start` warns about pending jobs a new schema does not fit).
            # pydantic quotes the input (cut, so scrubbing may miss it): its fields and reasons only.
            withheld = validation_text(exc) if sensitive else None
            return Ran(FAILED, withheld) if withheld else _raised(job, exc, secrets, keep=not sensitive)
    if services is None:
        ctx = job_context(job.id, job.name, job.queue, job.attempt, job.max_attempts, payload, job.actor, cancelled)
    else:
        ctx = services.context(job, payload, cancelled, secrets)
    return Prepared(registered.function, ctx, payload, secrets, registered.is_async, bool(sensitive))


def _as_utc(seconds: float | None) -> datetime | None:
    """A claim's due time (seconds since the epoch) as templates show it: in UTC, to the
    microsecond it was stored with (a float's error at today's epoch seconds is under a
    quarter of a microsecond, and the conversion rounds to the nearest)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def unsealed(job: ClaimedJob, payload: Any) -> Any:
    """`payload` with its sealed values opened (only the worker running the job does this)."""
    if not has_sealed(payload):
        return payload
    found = keyring()
    if found is None:
        raise SealedParameterError(
            f"job {job.id} has sealed parameters and JOBSUP_ENCRYPTION_KEYS is not set in this worker"
        )
    return found.unseal(payload, job_binding(job.id, job.name))  # bound to the type it runs as


def execute(job: ClaimedJob, cancelled: threading.Event, services: JobServices | None = None) -> Ran:
    """Run a job function in this thread, from start to `Ran` (an ``async def`` on an event
    loop of its own, not a worker's): the tests' and `jobsup.testing`'s way to run one."""
    prepared = prepare(job, cancelled, services)
    if isinstance(prepared, Ran):
        return prepared
    return asyncio.run(call_async(job, prepared)) if prepared.is_async else call(job, prepared)


def call(job: ClaimedJob, prepared: Prepared) -> Ran:
    """Call a plain job function in this thread. Never raises."""
    try:
        value = prepared.function(prepared.ctx, prepared.payload)
    except BaseException as exc:  # a job's SystemExit or KeyboardInterrupt fails the attempt too
        tracing.failed(exc)
        return _raised(job, exc, prepared.secrets, keep=not prepared.sensitive)
    if value is not None and inspect.isawaitable(value):  # (most jobs return None: no look)
        # An async def behind a plain wrapper: awaited here, on a loop of this thread's own
        # (registered as the async def itself, it would run on the worker's loop, its task
        # cancelled with the job).
        try:
            value = asyncio.run(_awaited(value))
        except BaseException as exc:
            tracing.failed(exc)
            return _raised(job, exc, prepared.secrets, keep=not prepared.sensitive)
    return _succeeded(job, value)


async def _awaited(value: Any) -> Any:
    return await value


async def call_async(job: ClaimedJob, prepared: Prepared) -> Ran:
    """Await an ``async def`` job function on the worker's event loop. A cancellation of
    its task (see `jobsup.worker.lease.Running.hook`) ends it like any raised error; the
    reason the worker cancelled it decides the outcome."""
    try:
        value = await prepared.function(prepared.ctx, prepared.payload)
    except BaseException as exc:  # asyncio.CancelledError included
        tracing.failed(exc)
        return _raised(job, exc, prepared.secrets, keep=not prepared.sensitive)
    return _succeeded(job, value)


def _succeeded(job: ClaimedJob, value: Any) -> Ran:
    if value is None:  # most jobs: nothing to store
        return Ran(SUCCEEDED)
    try:
        return Ran(SUCCEEDED, result=_result(job, value))
    except Exception as exc:  # a result whose own code raises (a broken __repr__ in json)
        return Ran(FAILED, f"{type(exc).__name__}: the job's result could not be stored")


def _raised(job: ClaimedJob, exc: BaseException, secrets: Secrets, *, keep: bool = True) -> Ran:
    """The `Ran` of a job that raised `exc`. Never raises, even for an exception whose own
    __str__ does: the job's attempt must be settled whatever its code did."""
    try:
        return _explained(job, exc, secrets, exc if keep else None)
    except Exception:
        return Ran(FAILED, f"{type(exc).__name__}: (its message could not be read)")


def _explained(job: ClaimedJob, exc: BaseException, secrets: Secrets, kept: BaseException | None) -> Ran:
    if isinstance(exc, Retry):
        return Ran(FAILED, error_text(exc, secrets), retry_in=exc.after, exc=kept)
    if isinstance(exc, Discard):
        return Ran(DISCARDED, error_text(exc, secrets), exc=kept)
    if isinstance(exc, Cancelled | asyncio.CancelledError):
        return Ran(FAILED, error_text(exc if isinstance(exc, Cancelled) else Cancelled(), secrets))
    text = scrub("".join(traceback.format_exception(exc)), secrets)
    emit("job.traceback", job=job.id, name=job.name, attempt=job.attempt, traceback=text)
    return Ran(FAILED, error_text(exc, secrets), exc=kept, traceback=stored_frames(exc, secrets))


def outcome_of(
    job: ClaimedJob,
    ran: Ran,
    reason: str | None,
    timeout: float | None,
    *,
    seconds: float | None = None,
    worker: str | None = None,
) -> Outcome:
    """The outcome to write for `job`, given why its cancel event was set (None: it was
    not); `seconds` the function ran, in the worker labelled `worker`."""
    if reason is not None:
        fields: dict[str, Any] = {"seconds": seconds, "worker": worker}
        if reason == CANCELLED and ran.kind != SUCCEEDED:
            return Outcome(job.held, CANCELLED_OUTCOME, "cancelled by an operator while it ran", **fields)
        if reason == LEASE_LOST:
            return Outcome(job.held, LEASE_EXPIRED, "lease lost: it could not be renewed; the job stopped", **fields)
        if reason == SHUTDOWN:
            return Outcome(job.held, RELEASED, **fields)
        if reason == TIMEOUT:
            then = "it returned" if ran.kind == SUCCEEDED else ran.error
            return Outcome(job.held, TIMED_OUT, f"timed out after {timeout:g}s; then {then}", **fields)
    # What the function did (most jobs): positional, in `Outcome`'s order, cheaper than keywords.
    return Outcome(job.held, ran.kind, ran.error, ran.retry_in, ran.result, seconds, worker, ran.exc, ran.traceback)


def _result(job: ClaimedJob, value: Any) -> str | None:
    if value is None:
        return None
    try:
        text = to_json(value)  # the encoder made once, not json.dumps's new one per call
    except (TypeError, ValueError, RecursionError) as exc:
        emit("job.result_dropped", job=job.id, name=job.name, reason=f"not JSON ({type(exc).__name__})")
        return None
    if len(text) > RESULT_CAP:
        emit("job.result_dropped", job=job.id, name=job.name, reason=f"{len(text)} characters, over {RESULT_CAP}")
        return None
    return text
