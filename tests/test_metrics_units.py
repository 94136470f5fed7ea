"""The per-job samples a worker adds up and writes a few times a second export exactly what
writing each at once would (`jobsup.observe.metrics`, in-memory mode in this process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import jobsup
from jobsup.observe import metrics


@pytest.fixture
def deferred() -> Iterator[None]:
    metrics.defer_job_samples()
    yield
    metrics.defer_job_samples(False)


def samples(queue: str) -> dict[tuple[str, str], float]:
    found = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.labels.get("queue") == queue and not sample.name.endswith("_created"):
                found[(sample.name, sample.labels.get("le", sample.labels.get("outcome", "")))] = sample.value
    return found


def run_jobs(queue: str) -> None:
    # Run times on bucket bounds, between them, past the last, and the waits of their starts.
    for seconds in (0.0, 0.005, 0.006, 0.3, 0.3, 5000.0):
        metrics.record("job.started", {"queue": queue, "name": "x", "waited": seconds / 2})
        metrics.record("jobs.succeeded", {"each": [(1, "x", 1, queue, seconds)]})
    metrics.record("job.failed", {"queue": queue, "name": "x", "seconds": 1.0, "outcome": "timed_out"})


def test_deferred_samples_are_written_only_when_asked_and_then_as_if_written_at_once(deferred: None) -> None:
    run_jobs("units-deferred")
    assert samples("units-deferred") == {}  # nothing exported before the write
    metrics.write_deferred()
    metrics.defer_job_samples(False)
    run_jobs("units-at-once")
    written, at_once = samples("units-deferred"), samples("units-at-once")
    assert written == at_once and written[("jobsup_job_duration_seconds_bucket", "+Inf")] == 7
    assert written[("jobsup_job_duration_seconds_bucket", "0.005")] == 2  # 0 and the bound itself
    assert written[("jobsup_jobs_completed_total", "timed_out")] == 1


@jobsup.job("units-settle-x")
@jobsup.job("units-settle-y")
def settled(ctx: jobsup.JobContext, payload: object) -> None:
    """Two defined types, so that each has its own job label."""


@pytest.mark.parametrize("defer", [True, False])
def test_a_settle_of_several_types_counts_each_job_as_its_own_event_would(defer: bool) -> None:
    """A settle's successes are counted once per queue and type: the same export as one
    event per job, whether the samples are added up or written at once."""
    x, y = "units-settle-x", "units-settle-y"
    each = [(1, x, 1, "q", 0.3), (2, y, 1, "q", None), (3, x, 1, "q", 0.004), (4, x, 1, "r", 7.0)]
    suffix = "deferred" if defer else "at-once"
    events = [
        ("jobs.succeeded", {"each": [(job_id, name, attempt, f"alone-{queue}-{suffix}", seconds)]})
        for job_id, name, attempt, queue, seconds in each
    ]
    events.append(("jobs.succeeded", {"each": [(*job[:3], f"settle-{job[3]}-{suffix}", job[4]) for job in each]}))
    recorded(events, defer=defer)
    for queue in ("q", "r"):
        alone, together = by_job(f"alone-{queue}-{suffix}"), by_job(f"settle-{queue}-{suffix}")
        assert together == alone and together, (queue, together, alone)
    settled = by_job(f"settle-q-{suffix}")
    completed = {job: v for (name, job, _), v in settled.items() if name == "jobsup_jobs_completed_total"}
    assert completed == {x: 2, y: 1}
    timed = {job: v for (name, job, _), v in settled.items() if name == "jobsup_job_duration_seconds_count"}
    assert timed == {x: 2}  # y's run time was not known


def recorded(events: list[tuple[str, dict[str, Any]]], *, defer: bool) -> None:
    """Record `events`, their samples added up and written once (`defer`), or each at once."""
    metrics.defer_job_samples(defer)
    try:
        for kind, fields in events:
            metrics.record(kind, fields)
        metrics.write_deferred()
    finally:
        metrics.defer_job_samples(False)


def by_job(queue: str) -> dict[tuple[str, str, str], float]:
    """`samples`, each job label's apart."""
    found = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.labels.get("queue") == queue and not sample.name.endswith("_created"):
                key = (sample.name, sample.labels["job"], sample.labels.get("le", sample.labels.get("outcome", "")))
                found[key] = sample.value
    return found


@pytest.mark.parametrize("defer", [True, False])
def test_a_batch_s_starts_count_as_each_start_s_own_event_would(defer: bool) -> None:
    """A batch's starts (one `jobs.started`, its waits grouped by queue, a negative wait as
    none, an unknown one left out) export what one `job.started` per job would."""
    waits = [("q", 0.004), ("r", 7.0), ("q", -0.2), ("q", None), ("r", 0.3), ("q", 0.005)]
    suffix = "deferred" if defer else "at-once"
    events = [
        ("job.started", {"queue": f"alone-start-{queue}-{suffix}", "name": "x", "waited": waited})
        for queue, waited in waits
    ]
    each = [(n, "x", 1, f"batch-start-{queue}-{suffix}", waited) for n, (queue, waited) in enumerate(waits)]
    recorded([*events, ("jobs.started", {"each": each})], defer=defer)
    for queue in ("q", "r"):
        alone, together = samples(f"alone-start-{queue}-{suffix}"), samples(f"batch-start-{queue}-{suffix}")
        assert together == alone and together, (queue, together, alone)
    counted = samples(f"batch-start-q-{suffix}")
    assert counted[("jobsup_job_wait_seconds_count", "")] == 3  # the unknown wait is left out
    assert counted[("jobsup_job_wait_seconds_bucket", "0.005")] == 3  # the negative one as 0
