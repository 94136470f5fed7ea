"""/metrics and /healthz of a running supervisor agree with the database."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import jobsup

import broker
from harness import Supervisor, port_of, records, sample, scrape
from helpers import wait_until

pytestmark = pytest.mark.slow


def test_counters_agree_with_the_database_after_a_mixed_run(url: str, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    client = jobsup.Client(url)
    supervisor = Supervisor(url, record, tmp_path / "supervisor.log", "--queue", "default=2", lease="60s")
    try:
        port = port_of(supervisor)
        ok = client.enqueue_many([{"name": "work"} for _ in range(5)])
        flaky = client.enqueue("work", {"fail": True}, max_attempts=2)  # fails twice: dead-lettered

        def counted() -> bool:
            # A counter moves just after its commit: a kill in between would lose it (docs/how-to/monitoring.md).
            text = scrape(port)[1]
            settled = sample(text, "jobsup_jobs_completed_total", job="work", outcome="succeeded") == 5
            return settled and sample(text, "jobsup_jobs_completed_total", job="work", outcome="failed") == 2

        wait_until(counted, timeout=60, what="the first jobs to settle and count")
        killed = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]})
        victim = wait_until(
            lambda: [e["pid"] for e in records(record, killed) if e["what"] == "start"], timeout=30, what="start"
        )[0]
        os.kill(victim, signal.SIGKILL)

        def settled() -> bool:
            return all(client.get(i).status == "succeeded" for i in [*ok, killed]) and (  # type: ignore[union-attr]
                client.get(flaky).status == "dead_lettered"  # type: ignore[union-attr]
            )

        wait_until(settled, timeout=60, what="every job to settle")

        seen: dict[str, float] = {}

        def scraped() -> str:
            _, text = scrape(port)
            seen["succeeded"] = sample(text, "jobsup_jobs_completed_total", job="work", outcome="succeeded")
            seen["workers"] = sample(text, "jobsup_workers", queue="default")
            seen["ran"] = sample(text, "jobsup_job_duration_seconds_count", job="work", queue="default")
            # Five jobs and the killed job's second attempt; two workers once it is replaced.
            # A worker writes a settle's counter and histogram one after the other, and a
            # scrape may come between them: wait for both.
            return text if seen == {"succeeded": 6, "workers": 2, "ran": 8} else ""

        text = wait_until(
            scraped, timeout=30, what=lambda: f"six successes, eight runs timed and two workers, last seen {seen}"
        )
        assert sample(text, "jobsup_jobs_completed_total", job="work", outcome="failed") == 2  # flaky, twice
        assert sample(text, "jobsup_leases_expired_total") == 1  # the killed worker's job
        assert sample(text, "jobsup_worker_restarts_total", queue="default") == 1
        # Every start (a batch's are held and announced together, `jobsup.worker.starts`);
        # the killed attempt's only if a lease tick (a quarter second) came before the kill.
        assert sample(text, "jobsup_job_wait_seconds_count", queue="default") in (8, 9)
        wait_until(
            lambda: sample(scrape(port)[1], "jobsup_queue_jobs", queue="default", status="dead_lettered") == 1,
            timeout=30,
            what="the dead-letter gauge",
        )
        # The database says the same.
        history = [a.outcome for i in [*ok, killed, flaky] for a in client.get(i).history]  # type: ignore[union-attr]
        assert history.count("succeeded") == 6 and history.count("failed") == 2
        assert history.count("lease_expired") == 1
        status, body = scrape(port, "/healthz")
        assert (status, body.strip()) == (200, "ok")
    finally:
        supervisor.stop()


def test_a_long_job_s_start_is_counted_while_it_runs(url: str, tmp_path: Path) -> None:
    # A batch's starts are held and announced together (`jobsup.worker.starts`): the lease
    # thread announces them once a job has run a tick, not only once the batch has run.
    client = jobsup.Client(url)
    supervisor = Supervisor(url, tmp_path, tmp_path / "supervisor.log", "--queue", "default=1", "--claim-batch", "5")
    try:
        port = port_of(supervisor)
        long = client.enqueue("work", {"seconds": 60, "honour": True})
        wait_until(lambda: records(tmp_path, long), timeout=30, what="the long job's start")
        wait_until(
            lambda: sample(scrape(port)[1], "jobsup_job_wait_seconds_count", queue="default") == 1,
            timeout=10,
            what="its start in the wait histogram",
        )
        assert client.get(long).status == "running"  # type: ignore[union-attr]
        client.cancel(long)
    finally:
        supervisor.stop()


def test_healthz_turns_503_when_the_database_stops_answering(url: str, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    supervisor = Supervisor(url, record, tmp_path / "s.log", faults="supervisor:health@8s+600s")
    try:
        port = port_of(supervisor)
        wait_until(lambda: scrape(port, "/healthz")[0] == 200, timeout=8, what="healthz 200 before the fault")
        _, body = wait_until(
            lambda: (r := scrape(port, "/healthz"))[0] == 503 and r, timeout=30, what="healthz to fail"
        )
        assert body.strip() == "database: unavailable"
        wait_until(lambda: "injected fault" in supervisor.output(), timeout=10, what="the reason in the log")
    finally:
        supervisor.stop()


def test_healthz_names_no_database_location_when_the_database_is_gone(postgres_url: str, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    forwarder = broker.Proxy(("127.0.0.1", 5432))  # the database's address, cut at will
    forwarder.start()
    proxied = postgres_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
    supervisor = Supervisor(proxied, record, tmp_path / "s.log")
    try:
        port = port_of(supervisor)
        wait_until(lambda: scrape(port, "/healthz")[0] == 200, timeout=30, what="healthz 200 before the cut")
        forwarder.stop()
        _, body = wait_until(lambda: (r := scrape(port, "/healthz"))[0] == 503 and r, timeout=30, what="a 503")
        assert body.strip() == "database: unavailable", body  # no user, host, port or database name
        wait_until(
            lambda: "health.failed" in supervisor.output() and str(forwarder.port) in supervisor.output(),
            timeout=10,
            what="the details in the log",
        )
    finally:
        supervisor.stop()
        forwarder.stop()
