"""SLA deadlines on every real database: enqueue stores them from the job type's policy or
the enqueue's own options; maintenance marks a job past one once, however many instances
race, counts it once, and `list_jobs(sla_breached=True)` / `jobs list --sla-breached` show it."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

import jobsup
from jobsup.errors import BadInput
from jobsup.observe import events
from jobsup.supervisor.maintenance import MarkSlaBreaches

from helpers import claim_one, run_jobsup, run_together, succeed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@jobsup.job("sla-report", sla={"start_within": "5m", "finish_within": "1h"})
def report(ctx: jobsup.JobContext, payload: Any) -> None:
    pass


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Breaches:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, fields: dict[str, Any]) -> None:
        if kind == "sla.breached":
            with self.lock:
                self.seen.append(fields)


@pytest.fixture
def breaches() -> Any:
    recorder = Breaches()
    events.subscribe(recorder)
    yield recorder
    events.unsubscribe(recorder)


def test_deadlines_come_from_the_type_or_the_enqueue(client: jobsup.Client) -> None:
    typed = client.get(client.enqueue("sla-report", run_at=T0))
    assert (typed.sla_start_by, typed.sla_finish_by) == (at(300), at(3600))  # type: ignore[union-attr]
    own = client.get(client.enqueue("sla-report", run_at=T0, start_within="10s"))
    assert (own.sla_start_by, own.sla_finish_by) == (at(10), at(3600))  # type: ignore[union-attr]
    plain = client.get(client.enqueue("sla-plain", run_at=T0, finish_within=60, allow_unknown=True))
    assert (plain.sla_start_by, plain.sla_finish_by) == (None, at(60))  # type: ignore[union-attr]
    none = client.get(client.enqueue("sla-plain", run_at=T0, allow_unknown=True))
    assert (none.sla_start_by, none.sla_finish_by, none.sla_breached_at) == (None, None, None)  # type: ignore[union-attr]


def test_a_pending_job_past_its_start_deadline_is_marked_once(client: jobsup.Client, breaches: Breaches) -> None:
    late = client.enqueue("sla-report", run_at=T0)
    on_time = client.enqueue("sla-report", run_at=at(200))
    step = MarkSlaBreaches(client.store)
    assert step.run_once(now=at(299)) == 0
    assert step.run_once(now=at(301)) == 1
    assert step.run_once(now=at(400)) == 0  # marked already
    assert client.get(late).sla_breached_at == at(301)  # type: ignore[union-attr]
    assert client.get(on_time).sla_breached_at is None  # type: ignore[union-attr]
    assert [(b["job"], b["kind"]) for b in breaches.seen] == [(late, "start")]
    assert [job.id for job in client.list_jobs(sla_breached=True)] == [late]


def test_a_running_job_past_its_finish_deadline_is_marked(client: jobsup.Client, breaches: Breaches) -> None:
    job_id = client.enqueue("sla-report", run_at=T0)
    claim_one(client, now=at(10))
    MarkSlaBreaches(client.store).run_once(now=at(3000))
    assert client.get(job_id).sla_breached_at is None  # type: ignore[union-attr]
    MarkSlaBreaches(client.store).run_once(now=at(3601))
    assert [(b["job"], b["kind"]) for b in breaches.seen] == [(job_id, "finish")]


def test_a_job_pending_again_for_a_retry_started_on_time(client: jobsup.Client, breaches: Breaches) -> None:
    job_id = client.enqueue("sla-report", run_at=T0)
    from helpers import fail

    assert fail(client, claim_one(client, now=at(10)), retry_in=600, now=at(20)) == "pending"
    assert MarkSlaBreaches(client.store).run_once(now=at(400)) == 0  # it did start before 5m
    assert client.get(job_id).sla_breached_at is None  # type: ignore[union-attr]
    MarkSlaBreaches(client.store).run_once(now=at(3601))
    assert [(b["job"], b["kind"]) for b in breaches.seen] == [(job_id, "finish")]


def test_a_finished_job_is_never_marked(client: jobsup.Client) -> None:
    job_id = client.enqueue("sla-report", run_at=T0)
    succeed(client, [claim_one(client, now=at(10))], now=at(20))
    assert MarkSlaBreaches(client.store).run_once(now=at(99999)) == 0
    assert client.get(job_id).sla_breached_at is None  # type: ignore[union-attr]


def test_racing_maintenance_marks_and_counts_each_breach_once(client: jobsup.Client, breaches: Breaches) -> None:
    ids = client.enqueue_many([{"name": "sla-report", "run_at": T0} for _ in range(60)])
    others = [jobsup.Client(client.database.url) for _ in range(3)]
    steps = [MarkSlaBreaches(c.store, batch=7) for c in [client, *others]]
    counted = REGISTRY.get_sample_value("jobsup_sla_breaches_total", {"job": "sla-report", "kind": "start"}) or 0
    counts: list[int] = []
    gate = threading.Barrier(len(steps))

    def run(step: MarkSlaBreaches) -> None:
        gate.wait()
        counts.append(step.run_once(now=at(301)))

    threads = [threading.Thread(target=run, args=(step,)) for step in steps]
    run_together(threads)
    for other in others:
        other.close()
    assert sum(counts) == len(ids)
    assert sorted(b["job"] for b in breaches.seen) == sorted(ids)
    assert len(client.list_jobs(sla_breached=True, limit=1000)) == len(ids)
    after = REGISTRY.get_sample_value("jobsup_sla_breaches_total", {"job": "sla-report", "kind": "start"})
    assert after == counted + len(ids)


def test_the_cli_lists_and_shows_breached_jobs(client: jobsup.Client, url: str) -> None:
    late = client.enqueue("sla-report", run_at=T0)
    client.enqueue("sla-plain", allow_unknown=True)
    MarkSlaBreaches(client.store).run_once(now=at(301))
    listed = run_jobsup("--database-url", url, "jobs", "list", "--sla-breached", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in json.loads(listed.stdout)] == [late]
    shown = run_jobsup("--database-url", url, "jobs", "show", str(late))
    assert "sla_breached_at" in shown.stdout and "2030-01-01T12:05:01" in shown.stdout


@pytest.mark.parametrize(
    "policy",
    [
        {"start_within": 0},
        {"start_within": "-5m"},
        {"finish_within": "soon"},
        {"within": "5m"},
        {},
        "5m",
        {"start_within": None},
    ],
)
def test_a_bad_policy_is_refused_naming_the_job(policy: object) -> None:
    with pytest.raises(BadInput, match="sla-bad"):
        jobsup.job("sla-bad", sla=policy)(lambda ctx, payload: None)


def test_a_bad_enqueue_deadline_is_refused(client: jobsup.Client) -> None:
    with pytest.raises(BadInput, match="start_within"):
        client.enqueue("sla-report", start_within="0s")
    assert client.list_jobs() == []


def test_the_cli_enqueues_with_deadlines(client: jobsup.Client, url: str) -> None:
    enqueued = run_jobsup(
        "--database-url", url, "enqueue", "sla-plain", "--allow-unknown", "--run-at", T0.isoformat(),
        "--start-within", "90s", "--finish-within", "2h",
    )  # fmt: skip
    assert enqueued.returncode == 0, enqueued.stderr
    job = client.get(int(enqueued.stdout))
    assert (job.sla_start_by, job.sla_finish_by) == (at(90), at(7200))  # type: ignore[union-attr]
