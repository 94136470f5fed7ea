"""Metrics and the HTTP endpoints under the conditions the hardening review found: a queue that
drains, idle connections that would each hold a thread, dead workers' metric files, a
flood of job names nobody defined, and a supervisor that fails to boot. (The issue's items
15 to 18 and 17.)"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import jobsup
from jobsup.store.rows import SUCCEEDED, Outcome
from jobsup.supervisor.http import Endpoints, Reply, Router
from jobsup.supervisor.maintenance import QueueGauges

from harness import Supervisor, port_of, sample, scrape, started_by
from helpers import claim_one, run_jobsup, wait_until


def gauge(queue: str, status: str) -> float | None:
    return REGISTRY.get_sample_value("jobsup_queue_jobs", {"queue": queue, "status": status})


def test_a_queue_that_drains_reports_zero(url: str) -> None:
    """Item 15: every queue served or seen reports 0 when empty, never its last value."""
    client = jobsup.Client(url)
    queue = "draining-" + url.split(":", 1)[0].split("+")[0]
    gauges = QueueGauges(client.store, served=["served-but-idle"])
    job_id = client.enqueue("a", queue=queue)
    gauges.run_once()
    assert gauge(queue, "pending") == 1 and gauge("served-but-idle", "pending") == 0
    claimed = claim_one(client, queue=queue)
    client.store.transitions.complete([Outcome(claimed.held, SUCCEEDED)])
    assert client.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    gauges.run_once()
    assert gauge(queue, "pending") == 0 and gauge(queue, "running") == 0
    assert REGISTRY.get_sample_value("jobsup_oldest_pending_age_seconds", {"queue": queue}) == 0


def test_the_queue_gauges_count_retrying_scheduled_and_key_held_jobs(url: str) -> None:
    client = jobsup.Client(url)
    queue = "states-" + url.split(":", 1)[0].split("+")[0]
    client.enqueue("a", queue=queue, delay="1h")
    client.enqueue("a", queue=queue, concurrency_key="k")
    client.enqueue("a", queue=queue, concurrency_key="k")
    gauges = QueueGauges(client.store, served=[queue])
    gauges.run_once()
    states = ("pending", "scheduled", "retrying", "waiting")
    assert [gauge(queue, status) for status in states] == [2, 1, 0, 1]


def test_names_nobody_defined_count_under_one_label(sqlite_url: str) -> None:
    """Item 18: only defined job names become label values."""
    client = jobsup.Client(sqlite_url)
    before = REGISTRY.get_sample_value("jobsup_jobs_enqueued_total", {"queue": "floods", "job": "_other"}) or 0
    for n in range(20):
        client.enqueue(f"typo-{n}", queue="floods", allow_unknown=True)
    client.enqueue("a", queue="floods")
    assert REGISTRY.get_sample_value("jobsup_jobs_enqueued_total", {"queue": "floods", "job": "_other"}) == before + 20
    assert REGISTRY.get_sample_value("jobsup_jobs_enqueued_total", {"queue": "floods", "job": "typo-3"}) is None
    assert REGISTRY.get_sample_value("jobsup_jobs_enqueued_total", {"queue": "floods", "job": "a"}) == 1


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Threads:")[1].split()[0])


@pytest.mark.slow
def test_idle_connections_cannot_pile_up_threads_or_block_a_scrape(sqlite_url: str, tmp_path: Path) -> None:
    """Item 16: a read timeout, a cap on connections, and a scrape that still gets through."""
    record = tmp_path / "record"
    record.mkdir()
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log")
    idle: list[socket.socket] = []
    try:
        port = port_of(supervisor)
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        status, text = scrape(port)
        assert status == 200 and "jobsup_workers" in text
        assert threads_of(supervisor.pid) < 40, "each idle connection holds a thread"
    finally:
        for conn in idle:
            conn.close()
        supervisor.stop()


@pytest.mark.slow
def test_dead_workers_metric_files_are_folded_and_totals_stay_exact(sqlite_url: str, tmp_path: Path) -> None:
    """Item 17: the files stay few however many workers die; their counts survive."""
    record, metrics_dir = tmp_path / "record", tmp_path / "metrics"
    record.mkdir()
    metrics_dir.mkdir()
    client = jobsup.Client(sqlite_url)
    supervisor = Supervisor(
        sqlite_url, record, tmp_path / "supervisor.log", env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    )
    try:
        port = port_of(supervisor)
        for ran in range(1, 6):
            done = client.enqueue("work")

            def counted(expected: int = ran) -> bool:
                # The counter moves just after the commit: killing in between would lose it.
                text = scrape(port)[1]
                return (
                    sample(text, "jobsup_jobs_completed_total", queue="default", job="work", outcome="succeeded")
                    == expected
                )

            wait_until(counted, timeout=30, what=f"success {ran} counted")
            worker = started_by(record, done)
            os.kill(worker, signal.SIGKILL)
            wait_until(
                lambda w=worker: supervisor.workers() and w not in supervisor.workers(), timeout=30, what="a new worker"
            )  # type: ignore[misc]

        def restarts_counted() -> str:
            text = scrape(port)[1]
            return text if sample(text, "jobsup_worker_restarts_total", queue="default") == 5 else ""

        text = wait_until(restarts_counted, timeout=30, what="five restarts counted")
        assert sample(text, "jobsup_jobs_completed_total", queue="default", job="work", outcome="succeeded") == 5
        files = sorted(entry.name for entry in metrics_dir.iterdir())
        assert len(files) <= 6, files  # the supervisor's, the live worker's, and the folded totals
        assert "counter_folded.db" in files
    finally:
        supervisor.stop()


@pytest.mark.slow
def test_an_empty_metrics_file_left_by_a_killed_worker_breaks_no_scrape(sqlite_url: str, tmp_path: Path) -> None:
    """prometheus-client creates a worker's file before sizing it: a scrape in that moment,
    or a worker killed in it, meets an empty file, which must count as no values."""
    record, metrics_dir = tmp_path / "record", tmp_path / "metrics"
    record.mkdir()
    metrics_dir.mkdir()
    log = tmp_path / "supervisor.log"
    supervisor = Supervisor(sqlite_url, record, log, env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    try:
        port = port_of(supervisor)
        [worker] = supervisor.wait_for_workers(1)
        (metrics_dir / "counter_999999999.db").touch()  # a file caught before it was sized
        status, text = scrape(port)
        assert status == 200 and "jobsup_worker_restarts_total" in text
        (metrics_dir / f"counter_{worker}.db").write_bytes(b"")  # as if killed in that moment
        os.kill(worker, signal.SIGKILL)

        def replaced() -> str:
            text = scrape(port)[1]
            restarted = sample(text, "jobsup_worker_restarts_total", queue="default") == 1
            return text if restarted and sample(text, "jobsup_workers", queue="default") == 1 else ""

        wait_until(replaced, timeout=30, what="the killed worker replaced and counted")
        assert not (metrics_dir / f"counter_{worker}.db").exists()
        assert "Traceback" not in log.read_text()
    finally:
        supervisor.stop()


def test_a_route_that_raises_answers_500_and_says_why() -> None:

    def broken() -> Reply:
        raise OSError("metrics directory vanished")

    router = Router()
    router.get("/metrics", broken)
    server = Endpoints("127.0.0.1", 0, router)
    server.start()
    try:
        status, body = scrape(server.server_address[1])
        assert status == 500 and "OSError: metrics directory vanished" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_supervisor_that_cannot_boot_leaves_no_metrics_directory(tmp_path: Path) -> None:
    """Item 17: the temporary metrics directory goes on every way out."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run_jobsup(
        "start", "--database-url", "postgresql://app:pw@127.0.0.1:1/app", env={"TMPDIR": str(scratch)}, cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr
    assert list(scratch.iterdir()) == []


def test_the_queue_label_is_bounded_and_the_rest_count_under_other(sqlite_url: str) -> None:
    """Security review, finding 12: 500 queue names made 1,500 more series. The served
    queues and the first few seen keep their own label; the rest count under `_other`."""
    client = jobsup.Client(sqlite_url)
    gauges = QueueGauges(client.store, served=["served"], others=3)
    for n in range(8):
        client.enqueue("a", queue=f"flood-{n}")
    gauges.run_once()
    own = [f"flood-{n}" for n in range(3)]
    assert [gauge(queue, "pending") for queue in own] == [1, 1, 1]
    assert gauge("flood-5", "pending") is None
    assert gauge("_other", "pending") == 5
    assert gauges.seen == {"served", *own}
