"""Prometheus metrics: their definitions, and how events move them.

Workers and the supervisor are separate processes, so `jobsup start` runs prometheus-client
in multiprocess mode: every process writes its own files in one directory, and the
supervisor's `/metrics` aggregates them (`jobsup.observe.metrics_files`: the directory, a
reaped worker's files folded into totals, the scrape). In a plain process (a web app
enqueueing) the same metrics live in memory.

Events (see `jobsup.observe.events`) are the only way metrics move: `record(kind, fields)`.
Only defined job names become `job` label values (`jobsup.jobtypes.is_defined`); any other
name counts under `OTHER_JOB`, so a typo or a flood of odd names cannot grow the series.
"""

from __future__ import annotations

import functools
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, ParamSpec

from jobsup.jobtypes import is_defined

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
OTHER_JOB = "_other"
# Every write to a metric holds this, and so does every fork: prometheus-client guards its
# values with locks of its own, and a child forked while another thread (the supervisor's
# chores, relay or enforcer) held one would inherit it held and hang on its first write.
_writing = threading.RLock()
os.register_at_fork(before=_writing.acquire, after_in_parent=_writing.release, after_in_child=_writing.release)
P = ParamSpec("P")


def writes_metrics(write: Callable[P, None]) -> Callable[P, None]:
    """`write` changes metrics: it holds `_writing`, so no fork happens meanwhile."""

    @functools.wraps(write)
    def holding(*args: P.args, **kwargs: P.kwargs) -> None:
        with _writing:
            write(*args, **kwargs)

    return holding


@cache
def _metrics() -> dict[str, Any]:
    from prometheus_client import Counter, Gauge, Histogram

    return {
        "enqueued": Counter("jobsup_jobs_enqueued", "Jobs enqueued.", ["queue", "job"]),
        "completed": Counter("jobsup_jobs_completed", "Attempts ended, by outcome.", ["queue", "job", "outcome"]),
        "duration": Histogram(
            "jobsup_job_duration_seconds", "Time a job ran.", ["queue", "job"], buckets=_DURATION_BUCKETS
        ),
        "wait": Histogram("jobsup_job_wait_seconds", "Time from due to started.", ["queue"], buckets=_DURATION_BUCKETS),
        "queue_jobs": Gauge(
            "jobsup_queue_jobs",
            "Jobs per queue and status.",
            ["queue", "status"],
            multiprocess_mode="livemax",
        ),
        "oldest": Gauge(
            "jobsup_oldest_pending_age_seconds",
            "Age of the oldest due pending job.",
            ["queue"],
            multiprocess_mode="livemax",
        ),
        "paused": Gauge(
            "jobsup_queue_paused",
            "1 while an operator has the queue paused, else 0.",
            ["queue"],
            multiprocess_mode="livemax",
        ),
        "breaker_state": Gauge(
            "jobsup_breaker_state",
            "A job type's circuit breaker: 0 closed, 1 half-open, 2 open.",
            ["job"],
            multiprocess_mode="livemax",
        ),
        "breaker_opened": Counter("jobsup_breaker_opened", "Circuit breakers that opened.", ["job"]),
        "sla_breaches": Counter("jobsup_sla_breaches", "Jobs that missed an SLA deadline.", ["job", "kind"]),
        "expired": Counter("jobsup_leases_expired", "Leases closed because they lapsed or their worker died."),
        "workers": Gauge("jobsup_workers", "Live worker processes.", ["queue"], multiprocess_mode="livesum"),
        "restarts": Counter("jobsup_worker_restarts", "Workers that died and were replaced.", ["queue"]),
        "boot_failures": Counter("jobsup_worker_boot_failures", "Workers that failed at boot.", ["queue"]),
        "killed": Counter(
            "jobsup_workers_killed", "Workers the supervisor killed because their lease renewal was overdue.", ["queue"]
        ),
        "fired": Counter("jobsup_recurring_fired", "Recurring slots fired.", ["schedule"]),
        "already_fired": Counter("jobsup_recurring_already_fired", "Slots another instance fired first.", ["schedule"]),
        "skipped": Counter(
            "jobsup_recurring_skipped", "Slots not fired (reason: overlap, calendar).", ["schedule", "reason"]
        ),
        "maintenance_errors": Counter("jobsup_maintenance_errors", "Failed maintenance steps.", ["step"]),
        "db_errors": Counter("jobsup_db_errors", "Database errors, by operation.", ["operation"]),
        "hook_failures": Counter("jobsup_hook_failures", "In-process event hooks that raised.", ["event"]),
        "hook_drops": Counter(
            "jobsup_hook_drops", "Hook calls dropped: too many waited for the hook threads.", ["event"]
        ),
        "hook_timeouts": Counter(
            "jobsup_hook_timeouts", "In-process event hooks that ran past their timeout.", ["event"]
        ),
        "events_delivered": Counter("jobsup_events_delivered", "Outbox events a relay delivered.", ["publisher"]),
        "publish_failures": Counter(
            "jobsup_events_publish_failures", "Failed tries to deliver outbox events.", ["publisher"]
        ),
        "events_parked": Counter(
            "jobsup_events_parked", "Outbox events parked: the destination refused them for good.", ["publisher"]
        ),
        "outbox_parked": Gauge(
            "jobsup_outbox_parked_events",
            "Parked outbox events, waiting for an operator (jobsup events).",
            multiprocess_mode="livemax",
        ),
        "outbox_depth": Gauge("jobsup_outbox_events", "Events waiting in the outbox.", multiprocess_mode="livemax"),
        "outbox_oldest": Gauge(
            "jobsup_outbox_oldest_age_seconds",
            "Age of the oldest event waiting in the outbox.",
            multiprocess_mode="livemax",
        ),
        "unseal_failures": Counter(
            "jobsup_sealed_parameter_failures", "Attempts failed: a sealed parameter did not open.", ["job"]
        ),
    }


def job_label(name: Any) -> str:
    if name in _defined_labels:
        return str(name)
    if isinstance(name, str) and is_defined(name):
        _defined_labels.add(name)  # a defined name stays defined
        return name
    return OTHER_JOB


_defined_labels: set[str] = set()


_OUTCOMES = {
    "job.failed": None,  # the outcome field says failed or timed_out
    "job.dead_lettered": None,
    "job.released": "released",
    "lease.expired": "lease_expired",
}


# The labelled children of the per-job metrics, by metric and label values: a job's events
# find theirs with one dict lookup, not `labels()` (its checks, a tuple and a lock) each time.
_children: dict[tuple[str, ...], Any] = {}


def _child(metric: str, *labels: str) -> Any:
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = _metrics()[metric].labels(*labels)
    return child


# A worker adds up the per-job samples (a job's outcome count, its run time and its wait)
# and writes them every lease tick, a quarter second at most (`defer_job_samples`,
# `write_deferred`): each write of a value takes a lock, a pid check and an mmap write,
# five per job, which were 8 % of a short job's cost (py-spy of the peers' harness at batch
# 100). A sum per counter; a histogram's sum and count per bucket (the last: +Inf).
_deferred: dict[tuple[str, ...], list[float]] | None = None
_BOUNDS = (*_DURATION_BUCKETS, float("inf"))


@writes_metrics
def defer_job_samples(on: bool = True) -> None:
    """Add up the per-job samples until `write_deferred` (on), or write each at once again."""
    global _deferred
    if on:
        _deferred = {} if _deferred is None else _deferred
    else:
        _write_deferred()
        _deferred = None


@writes_metrics
def write_deferred() -> None:
    _write_deferred()


def _write_deferred() -> None:
    if not _deferred:
        return
    taken = list(_deferred.items())
    _deferred.clear()
    for (metric, *labels), sums in taken:
        child = _child(metric, *labels)
        if len(sums) == 1:
            child.inc(sums[0])
            continue
        # The histogram's own values (what `observe` moves), moved once for many samples;
        # `test_metrics_units.py` holds them to what `observe` exports.
        child._sum.inc(sums[0])
        for bucket, count in enumerate(sums[1:]):
            if count:
                child._buckets[bucket].inc(count)


def _count(metric: str, *labels: str, by: float = 1.0) -> None:
    if _deferred is None:
        _child(metric, *labels).inc(by)
        return
    key = (metric, *labels)
    sums = _deferred.get(key)
    if sums is None:
        _deferred[key] = [by]
    else:
        sums[0] += by


def _observe(metric: str, value: float, *labels: str) -> None:
    _observe_all(metric, (value,), *labels)


def _observe_all(metric: str, values: Sequence[float], *labels: str) -> None:
    """Observe each of `values` (a batch's, under one set of labels: one look for its sums)."""
    if _deferred is None:
        child = _child(metric, *labels)
        for value in values:
            child.observe(value)
        return
    key = (metric, *labels)
    sums = _deferred.get(key)
    if sums is None:
        sums = _deferred[key] = [0.0] * (1 + len(_BOUNDS))
    total = 0.0
    for value in values:
        total += value
        sums[1 + bisect_left(_BOUNDS, value)] += 1
    sums[0] += total


@writes_metrics
def record(kind: str, fields: dict[str, Any]) -> None:
    if kind in _OUTCOMES and "queue" in fields:
        if kind == "job.released" and fields.get("stale"):
            return
        outcome = _OUTCOMES[kind] or fields.get("outcome", "failed")
        job = job_label(fields.get("name"))
        _count("completed", fields["queue"], job, outcome)
        if fields.get("seconds") is not None:
            _observe("duration", fields["seconds"], fields["queue"], job)
        if kind == "lease.expired":
            _metrics()["expired"].inc()
        return
    if kind == "jobs.started":  # a batch's starts, a tuple each (`catalogue.EACH`)
        waits: dict[str, list[float]] = {}  # by queue (a batch is most often of one)
        for _, _, _, queue, waited in fields["each"]:
            if waited is not None:
                waits.setdefault(queue, []).append(waited if waited > 0.0 else 0.0)
        for queue, waited_there in waits.items():
            _observe_all("wait", waited_there, queue)
        return
    if kind == "jobs.succeeded":  # a settle's successes, a tuple each (`catalogue.EACH`)
        # Counted once per queue and type (most settles are one of each), each run time
        # observed: a count and a label per job were 1 µs a job of a batch-100 settle.
        runs: dict[tuple[str, str], list[float | None]] = {}
        for _, name, _, queue, seconds in fields["each"]:
            found = runs.get((queue, name))
            if found is None:
                runs[queue, name] = [seconds]
            else:
                found.append(seconds)
        for (queue, name), each in runs.items():
            job = job_label(name)
            _count("completed", queue, job, "succeeded", by=float(len(each)))
            timed = [seconds for seconds in each if seconds is not None]
            if timed:
                _observe_all("duration", timed, queue, job)
        return
    if kind == "job.started":
        if fields.get("waited") is not None:
            _observe("wait", max(0.0, fields["waited"]), fields["queue"])
        return
    m = _metrics()
    if kind == "job.enqueued":
        m["enqueued"].labels(fields["queue"], job_label(fields["name"])).inc(fields.get("count", 1))
    elif kind == "worker.restarting":
        m["restarts"].labels(fields["queue"]).inc()
    elif kind == "worker.boot_failed" and "queue" in fields:
        m["boot_failures"].labels(fields["queue"]).inc()
    elif kind == "worker.killed_overdue":
        m["killed"].labels(fields["queue"]).inc()
    elif kind == "recurring.fired":
        m["fired"].labels(fields["schedule"]).inc()
    elif kind == "recurring.already_fired":
        m["already_fired"].labels(fields["schedule"]).inc()
    elif kind == "recurring.skipped":
        m["skipped"].labels(fields["schedule"], fields["reason"]).inc()
    elif kind == "maintenance.failed":
        m["maintenance_errors"].labels(fields["step"]).inc()
    elif kind == "db.error":
        m["db_errors"].labels(fields.get("operation", "other")).inc()
    elif kind == "breaker.opened":
        m["breaker_opened"].labels(job_label(fields.get("name"))).inc()
    elif kind == "sla.breached":
        m["sla_breaches"].labels(job_label(fields.get("name")), fields["kind"]).inc(fields.get("count", 1))
    elif kind == "hook.failed":
        m["hook_failures"].labels(fields["event"]).inc()
    elif kind == "hook.timed_out":
        m["hook_timeouts"].labels(fields["event"]).inc()
    elif kind == "hook.dropped":
        m["hook_drops"].labels(fields["event"]).inc()
    elif kind == "events.delivered":
        m["events_delivered"].labels(fields["publisher"]).inc(fields.get("count", 1))
    elif kind == "events.publish_failed":
        m["publish_failures"].labels(fields["publisher"]).inc()
    elif kind == "events.parked":
        m["events_parked"].labels(fields["publisher"]).inc()
    elif kind == "secrets.unseal_failed":
        m["unseal_failures"].labels(job_label(fields.get("name"))).inc()


def declared_names() -> set[str]:
    """Every sample name jobsup can export (counters end in _total, histograms have parts)."""
    names = set()
    for metric in _metrics().values():
        kind, name = metric._type, metric._name
        if kind == "counter":
            names.add(name + "_total")
        elif kind == "histogram":
            names |= {name + "_bucket", name + "_count", name + "_sum"}
        else:
            names.add(name)
    return names


@writes_metrics
def start_series(queues: list[str], steps: list[str]) -> None:
    """Export zeros for the label values known at start, so rate() and alerts see a series
    before the first restart or the first maintenance error, and a scrape before the first
    workers are forked sees none live rather than no series."""
    m = _metrics()
    for queue in queues:
        m["restarts"].labels(queue)
        m["boot_failures"].labels(queue)
        m["workers"].labels(queue)
    for step in steps:
        m["maintenance_errors"].labels(step)


@writes_metrics
def set_workers(counts: dict[str, int]) -> None:
    for queue, count in counts.items():
        _metrics()["workers"].labels(queue).set(count)


@writes_metrics
def set_queue_depths(depths: dict[tuple[str, str], int], oldest: dict[str, float]) -> None:
    m = _metrics()
    for (queue, status), count in depths.items():
        m["queue_jobs"].labels(queue, status).set(count)
    for queue, age in oldest.items():
        m["oldest"].labels(queue).set(age)


@writes_metrics
def set_outbox(depth: int, oldest: float, parked: int) -> None:
    _metrics()["outbox_depth"].set(depth)
    _metrics()["outbox_oldest"].set(oldest)
    _metrics()["outbox_parked"].set(parked)


@writes_metrics
def set_queues_paused(paused: dict[str, bool]) -> None:
    for queue, is_paused in paused.items():
        _metrics()["paused"].labels(queue).set(1 if is_paused else 0)


BREAKER_STATES = ("closed", "half_open", "open")  # the gauge's values, in order


@writes_metrics
def set_breaker_states(states: dict[str, str]) -> None:
    for name, state in states.items():
        value = BREAKER_STATES.index(state) if state in BREAKER_STATES else 2
        _metrics()["breaker_state"].labels(job_label(name)).set(value)
