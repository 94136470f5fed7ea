"""A pause holds across real `jobsup start` instances on one database: two supervisors, a
queue paused from outside, jobs enqueued (each enqueue wakes the idle workers), none of them
claimed, while the other queue keeps running; resumed, all of them run, woken rather than
polled; the paused gauge follows on each supervisor's /metrics."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import jobsup

from harness import port_of, sample, scrape, started_by, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow

# Long enough that only a wakeup (NOTIFY, a FIFO poke) explains a claim within the deadlines
# below: an idle worker looks by itself only this often.
POLL = "30s"
WATCH = 3.0  # seconds the paused jobs are watched staying pending


def paused_gauge(port: int, queue: str) -> float:
    status, text = scrape(port)
    assert status == 200, text
    return sample(text, "jobsup_queue_paused", queue=queue)


def test_a_pause_holds_on_every_instance_and_a_resume_wakes_them(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisors = [start("--queue", "default=1", "--queue", "mail=1", poll_interval=POLL) for _ in range(2)]
    for supervisor in supervisors:
        supervisor.wait_for_workers(2)
    ports = [port_of(supervisor) for supervisor in supervisors]
    running = client.enqueue("work", {"seconds": 2}, queue="mail")
    started_by(record, running)

    client.queues.pause("mail", reason="test", actor="tester")
    for port in ports:
        wait_until(lambda port=port: paused_gauge(port, "mail") == 1, timeout=30, what="jobsup_queue_paused 1")
    waiting = [client.enqueue("work", {}, queue="mail") for _ in range(6)]
    witness = client.enqueue("work", {}, queue="default")  # enqueued after them: its wakeup came later
    wait_until(lambda: status_of(client, witness) == "succeeded", timeout=15, what="the default queue's job")
    deadline = time.monotonic() + WATCH
    while time.monotonic() < deadline:
        assert {status_of(client, job_id) for job_id in waiting} == {"pending"}, "a paused queue's job was claimed"
        time.sleep(0.1)
    # The job that was running when the queue was paused finished.
    wait_until(lambda: status_of(client, running) == "succeeded", timeout=15, what="the running job to finish")

    client.queues.resume("mail", actor="tester")
    wait_until(
        lambda: all(status_of(client, job_id) == "succeeded" for job_id in waiting),
        timeout=10,
        what=lambda: f"the resumed jobs: {[status_of(client, job_id) for job_id in waiting]}",
    )
    for port in ports:
        wait_until(lambda port=port: paused_gauge(port, "mail") == 0, timeout=30, what="jobsup_queue_paused 0")
    assert all(started_by(record, job_id) for job_id in waiting)
    client.close()
