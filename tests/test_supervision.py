"""What the supervisor enforces and repairs for its workers: a worker its own lease threads
cannot stop, a dead worker's leases while the database is away, the processes a job left
behind, a worker that fails at boot after the first, and the lease sweep on SQLite when
the wall clock jumps. Real `jobsup start` supervisors, real signals."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobsup
from jobsup.store.dialects.sqlite import owners_folder

from harness import Supervisor, assert_no_overlap, history, port_of, records, sample, scrape, started_by, status_of
from helpers import alive, wait_until

pytestmark = pytest.mark.slow


def lapses_at(client: jobsup.Client, job_id: int, lease: float) -> float:
    """When attempt 1's lease would have lapsed had nothing renewed it (the claim's time,
    from the database, plus the lease): the GIL-holding job's worker never renews."""
    job = client.get(job_id)
    assert job is not None and job.history
    started = job.history[0].started_at
    assert started is not None
    return started.timestamp() + lease


def test_a_job_that_holds_the_gil_is_killed_before_its_lease_lapses(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 4: enforcement does not depend on the worker's own interpreter."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"gil": True, "slow_attempts": [1]})
    supervisor = start(lease="8s", heartbeat="2s")  # killed at 7 s, a second before the lease lapses
    worker = started_by(record, job_id)
    wait_until(lambda: not alive(worker), timeout=30, what="the GIL-holding worker to be killed")
    assert time.time() < lapses_at(client, job_id, 8), "killed only after its lease could have lapsed"
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the retry to succeed")
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    assert "worker.killed_overdue" in supervisor.output()
    assert started_by(record, job_id, attempt=2) != worker


def test_a_killed_workers_subprocesses_die_with_it(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 4: each worker leads a process group; what its job started dies with it."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"child": True, "seconds": 60, "slow_attempts": [1]})
    start()
    child = wait_until(
        lambda: [e["pid"] for e in records(record, job_id) if e["what"] == "child"], timeout=30, what="the child"
    )[0]
    assert alive(child)
    os.kill(started_by(record, job_id), signal.SIGKILL)
    wait_until(lambda: not alive(child), timeout=15, what="the job's subprocess to die with its worker")


def test_a_dead_workers_leases_are_closed_once_the_database_is_back(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 8: the immediate expiry after a worker dies is retried, not dropped."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]})
    # The supervisor's maintenance statements (its burials) fail from 0 s to 6 s after it starts.
    supervisor = start(lease="60s", faults="supervisor:maintenance@0s+6s")
    victim = started_by(record, job_id)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=45, what="the job to come back")
    assert time.monotonic() - killed_at < 30, "the job waited out its 60 s lease"
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    assert "operation=expire_lease" in supervisor.output(), "no burial failed: the outage was missed"


@pytest.mark.parametrize(
    "server",
    [pytest.param("postgres_url", marks=pytest.mark.postgres), pytest.param("mariadb_url", marks=pytest.mark.mariadb)],
)
def test_a_burial_hanging_on_the_database_holds_up_no_restart_and_no_stop(
    server: str, request: pytest.FixtureRequest, record: Path, tmp_path: Path
) -> None:
    """A dead worker's leases are written by a thread of their own: while that write hangs (a
    half-open connection; a connect waiting out its timeout on a host cut off), the loop still
    reaps and restarts the other workers and stops when told. (SQLite is left out: its
    writes are local, and a fork there waits for the database use under way, by design.)"""
    url = request.getfixturevalue(server)
    client = jobsup.Client(url)
    jobs = client.enqueue_many([{"name": "work", "payload": {"seconds": 60}} for _ in range(2)])
    # Every statement the supervisor runs as maintenance (its burials too) hangs for 10 minutes.
    supervisor = Supervisor(
        url, record, tmp_path / "supervisor.log", "--queue", "default=2",
        lease="60s", faults="supervisor:maintenance@0s+600s:hang",
    )  # fmt: skip
    request.addfinalizer(supervisor.stop)
    first, second = (started_by(record, job) for job in jobs)
    os.kill(first, signal.SIGKILL)
    replaced = wait_until(
        lambda: len(set(supervisor.workers()) - {first, second}) == 1,
        timeout=20,
        what=lambda: f"the killed worker restarted while its burial hangs: {supervisor.workers()}",
    )
    assert replaced
    os.kill(second, signal.SIGKILL)  # buried behind the first, still hanging
    wait_until(
        lambda: len(set(supervisor.workers()) - {first, second}) == 2,
        timeout=20,
        what=lambda: f"the second killed worker restarted too: {supervisor.workers()}",
    )
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
    output = supervisor.output()
    # Given up at the stop (the sweep closes them once their leases lapse): the two killed
    # workers' and those of the replacements, which stopped with the supervisor.
    assert output.count("reason='the supervisor stopped'") >= 2, output[-2000:]
    client.close()


def test_a_replacement_worker_that_fails_at_boot_is_retried(sqlite_url: str, record: Path, tmp_path: Path) -> None:
    """Item 14: only a failure at the first boot is fatal; later ones back off and retry."""
    from harness import Supervisor

    client = jobsup.Client(sqlite_url)
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log")
    try:
        [worker] = supervisor.wait_for_workers(1)
        wait_until(lambda: "worker.started" in supervisor.output(), timeout=30, what="the first worker's boot")
        # Break the boot of the next worker: its lease-owner lock file cannot be made.
        owners = owners_folder(client.database.url)
        assert owners is not None
        shutil.rmtree(owners)
        owners.write_text("not a folder")
        # Kill the worker now serving (a loaded machine may have replaced the first one
        # already): its replacement's boot is what must fail.
        for pid in supervisor.workers() or [worker]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: "worker.boot_failed" in supervisor.output(), timeout=30, what="a boot failure")
        port = port_of(supervisor)
        _, body = wait_until(lambda: (r := scrape(port, "/healthz"))[0] == 503 and r, timeout=30, what="503")
        assert "worker default#1 failed at boot" in body
        assert sample(scrape(port)[1], "jobsup_worker_boot_failures_total", queue="default") >= 1
        assert supervisor.process.poll() is None, "the supervisor gave up after one boot failure"
        owners.unlink()
        job_id = client.enqueue("work")
        wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=60, what="a worker to boot again")
        wait_until(lambda: scrape(port, "/healthz")[0] == 200, timeout=30, what="healthz to recover")
    finally:
        supervisor.stop()


def test_on_sqlite_a_clock_jump_never_expires_a_live_workers_lease(
    sqlite_url: str, record: Path, tmp_path: Path
) -> None:
    """Item 5: the sweep asks whether the lease owner lives, not only the wall clock."""
    from harness import Supervisor

    client = jobsup.Client(sqlite_url)
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]})
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log", lease="30s")
    request_stop = supervisor.stop
    worker = started_by(record, job_id)
    an_hour_later = datetime.now(UTC) + timedelta(hours=1)  # as if NTP stepped the clock forward
    assert client.store.transitions.sweep.expire(now=an_hour_later) == 0
    assert status_of(client, job_id) == "running"
    try:
        os.kill(worker, signal.SIGKILL)  # now its owner is dead: its lease may go (the supervisor closes it)
        wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=45, what="the job to come back")
    finally:
        request_stop()
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    assert_no_overlap(record, job_id)


def test_a_gil_holding_job_is_killed_during_a_long_shutdown_too(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """The enforcement keeps watching while the supervisor waits out the shutdown grace."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"gil": True, "slow_attempts": [1]})
    supervisor = start(lease="8s", heartbeat="2s", shutdown_grace="60s")
    worker = started_by(record, job_id)
    supervisor.signal(signal.SIGTERM)
    wait_until(lambda: not alive(worker), timeout=30, what="the GIL-holding worker to be killed")
    assert time.time() < lapses_at(client, job_id, 8), "not killed before its lease could lapse"
    assert supervisor.wait(timeout=30) == 0
    assert history(client, job_id) == [(1, "lease_expired")]


def test_the_supervisor_heartbeats_through_a_long_shutdown_grace(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """While a job uses the grace, the supervisor's row stays fresh (a grace longer than the
    stale age got a supervisor still stopping pruned by another instance) and the row of a
    worker that has left goes."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"seconds": 120})
    supervisor = start("--queue", "default=2", lease="8s", heartbeat="2s", shutdown_grace="60s")
    started_by(record, job_id)

    def rows(kind: str) -> list[Any]:
        return [row for row in client.store.processes.process_list() if row.kind == kind]

    wait_until(lambda: len(rows("worker")) == 2, timeout=30, what="two worker rows")
    supervisor.signal(signal.SIGTERM)
    wait_until(lambda: "supervisor.stopping" in supervisor.output(), timeout=10, what="the SIGTERM")
    (before,) = [row.heartbeat_at for row in rows("supervisor")]
    wait_until(
        lambda: [row.heartbeat_at > before + timedelta(seconds=3) for row in rows("supervisor")] == [True],
        timeout=30,
        what="two heartbeats during the grace",
    )
    wait_until(lambda: len(rows("worker")) == 1, timeout=30, what="the idle worker's row to go")
    supervisor.signal(signal.SIGINT)  # after a SIGTERM: stop now
    assert supervisor.wait(timeout=30) == 0
    assert rows("supervisor") == rows("worker") == []
    client.close()


def test_a_cleanly_stopped_worker_leaves_no_owner_lock(sqlite_url: str, record: Path, tmp_path: Path) -> None:
    from harness import Supervisor

    client = jobsup.Client(sqlite_url)
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log", "--queue", "default=2")
    supervisor.wait_for_workers(2)
    owners = owners_folder(client.database.url)
    assert owners is not None
    wait_until(lambda: owners.is_dir() and len(list(owners.iterdir())) == 2, timeout=30, what="two owner locks")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    supervisor.stop()
    assert list(owners.iterdir()) == []


@pytest.mark.postgres
def test_a_claim_whose_reply_was_lost_gives_its_jobs_back_at_once(
    postgres_url: str, record: Path, tmp_path: Path
) -> None:
    """On PostgreSQL a claim commits by itself: when its reply is lost the jobs are held by a
    live worker that does not know it. It looks once the database answers again, rather
    than leaving them to wait out the lease and be charged an attempt they never used."""
    from harness import Supervisor

    client = jobsup.Client(postgres_url)
    job_ids = client.enqueue_many([{"name": "work", "max_attempts": 1} for _ in range(3)])
    supervisor = Supervisor(
        postgres_url, record, tmp_path / "supervisor.log", lease="60s", faults="worker:claim@0s+2s:lost"
    )
    try:
        wait_until(lambda: all(status_of(client, j) == "succeeded" for j in job_ids), timeout=30, what="all three")
        lost = [j for j in job_ids if history(client, j)[0] == (1, "released")]
        assert lost, "no claim's reply was lost: the fault window missed the claims"
        for job_id in job_ids:
            assert history(client, job_id)[-1] == (1, "succeeded")
        assert "worker.orphans_released" in supervisor.output()
    finally:
        supervisor.stop()


def test_a_worker_that_fails_at_its_first_boot_stops_jobsup_start_with_exit_3(
    sqlite_url: str, record: Path, tmp_path: Path
) -> None:
    """Only the first boot is fatal: a configuration the workers cannot run with."""
    from harness import Supervisor

    owners = owners_folder(jobsup.Client(sqlite_url).database.url)
    assert owners is not None
    owners.parent.mkdir(parents=True, exist_ok=True)
    owners.write_text("not a folder")  # no worker can make its lease-owner lock file
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log")
    try:
        assert supervisor.wait(timeout=30) == 3
        assert "worker.boot_failed" in supervisor.output()
    finally:
        supervisor.stop()
