"""A real `jobsup start`: a job type that keeps failing opens its breaker, and its other jobs
are not run while the queue's other jobs are; an operator's `jobsup breaker reset` lets
them through again, and the breaker opens again after as many failures."""

from __future__ import annotations

import json
from datetime import timedelta

import breakerapp  # noqa: F401 - registers breaker-down here too, for its queue
import pytest
from sqlalchemy import select

import jobsup
from jobsup.store.schema import job_attempt

from harness import port_of, sample, scrape, status_of
from helpers import run_jobsup, wait_until

pytestmark = pytest.mark.slow


def statuses(client: jobsup.Client, ids: list[int]) -> list[str]:
    return [status_of(client, job_id) for job_id in ids]


def breaker_state(client: jobsup.Client) -> str | None:
    return next((row["state"] for row in client.breakers.list() if row["name"] == "breaker-down"), None)


def test_a_failing_type_opens_its_breaker_and_its_jobs_wait(url: str, start) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start("--app", "breakerapp", "--queue", "down=1")
    ids = [client.enqueue("breaker-down") for _ in range(10)]
    wait_until(lambda: breaker_state(client) == "open", timeout=60, what="the breaker to open")
    # Another type on the same queue still runs: the worker claims past the held-back jobs.
    marker = client.enqueue("work", queue="down")
    wait_until(lambda: status_of(client, marker) == "succeeded", timeout=60, what="the other type's job")
    assert statuses(client, ids).count("dead_lettered") == 3
    waiting = [job_id for job_id in ids if status_of(client, job_id) == "pending"]
    assert len(waiting) == 7 and all(client.get(j).attempts == 0 for j in waiting)  # type: ignore[union-attr]
    listed = run_jobsup("--database-url", url, "breaker", "list", "--json")
    assert [(row["name"], row["state"]) for row in json.loads(listed.stdout)] == [("breaker-down", "open")]
    reset = run_jobsup("--database-url", url, "breaker", "reset", "breaker-down", "--actor", "alice")
    assert reset.returncode == 0 and "closed" in reset.stdout, reset.stderr
    wait_until(lambda: statuses(client, ids).count("dead_lettered") == 6, timeout=60, what="three more failures")
    wait_until(lambda: breaker_state(client) == "open", timeout=30, what="the breaker to open again")
    assert [e.action for e in client.audit.list(action="breaker.")] == ["breaker.reset"]
    port = port_of(supervisor)

    def exported() -> bool:
        text = scrape(port)[1]
        opened = sample(text, "jobsup_breaker_opened_total", job="breaker-down") == 2
        return opened and sample(text, "jobsup_breaker_state", job="breaker-down") == 2

    wait_until(exported, timeout=30, what="the breaker's metrics")
    client.close()


def test_two_supervisors_run_one_probe_and_its_success_closes_the_breaker(  # type: ignore[no-untyped-def]
    url: str, start, tmp_path
) -> None:
    client = jobsup.Client(url)
    down = tmp_path / "down"
    down.touch()
    for _ in range(2):
        start("--app", "breakerapp", "--queue", "probe=2")
    payload = {"down_while": str(down), "work_for": 1.0}
    failing = [client.enqueue("breaker-probe", payload) for _ in range(2)]
    wait_until(lambda: statuses(client, failing) == ["dead_lettered"] * 2, timeout=60, what="two failures")
    wait_until(lambda: state_of(client, "breaker-probe") == "open", timeout=30, what="the breaker to open")
    held = [client.enqueue("breaker-probe", payload) for _ in range(10)]
    down.unlink()  # the service is back: the probe, once the reset has passed, succeeds
    wait_until(lambda: statuses(client, held) == ["succeeded"] * 10, timeout=90, what="the held jobs to run")
    assert state_of(client, "breaker-probe") == "closed"
    with client.database.read() as conn:
        stmt = select(job_attempt.c.started_at, job_attempt.c.finished_at).where(job_attempt.c.job_id.in_(held))
        attempts = sorted(conn.execute(stmt).all())
    assert len(attempts) == 10  # each once: no probe ran twice, nothing was claimed and put back
    # The probe ran alone: the other nine (on four workers in two supervisors) started only
    # after it had finished and closed the breaker.
    # SQLite's claim reads its clock before it waits for the write lock, so a start may be
    # stamped a moment before the probe's end it came after: a second probe would have
    # started during the probe's one second of work.
    probe_end = attempts[0].finished_at - timedelta(seconds=0.25)
    assert all(later.started_at >= probe_end for later in attempts[1:]), attempts
    client.close()


def state_of(client: jobsup.Client, name: str) -> str | None:
    return next((row["state"] for row in client.breakers.list() if row["name"] == name), None)
