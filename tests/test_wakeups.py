"""SQLite wakeups: an enqueue pokes the FIFOs of the idle workers of its queue once it has
committed; a lost poke costs latency, never a job (the poll finds it). On SQLite and
PostgreSQL alike, a job given back or retried from the dead letters wakes them too."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event

import jobsup
from jobsup.store.dialects import sqlite, wakeup
from jobsup.store.dialects.wakeup import FifoListener, poke

from harness import Supervisor
from helpers import claim_one, fail, release, wait_until


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_poke_reaches_the_workers_of_its_queue_only(tmp_path: Path) -> None:
    mail, reports = FifoListener(tmp_path, "mail"), FifoListener(tmp_path, "reports")
    try:
        assert poke(tmp_path, ["mail"]) == 1
        assert readable(mail.fileno(), 5.0)
        assert not readable(reports.fileno(), 0.2)
        mail.drain()
        assert not readable(mail.fileno(), 0.0), "drain left a poke behind"
    finally:
        mail.close()
        reports.close()
    assert not list(tmp_path.iterdir()), "close left its FIFO"


def test_a_fifo_nobody_reads_is_removed_by_the_next_poke(tmp_path: Path) -> None:
    listener = FifoListener(tmp_path, "default")
    stale = tmp_path / f"{wakeup._prefix('default')}1.0.fifo"
    os.mkfifo(stale)  # the FIFO of a worker that died: nobody reads it
    try:
        assert poke(tmp_path, ["default"]) == 1  # the live one
        assert [path.name for path in tmp_path.iterdir()] == [listener.path.name]
    finally:
        listener.close()


def test_a_poke_where_no_worker_ever_waited_does_nothing(tmp_path: Path) -> None:
    assert poke(tmp_path / "missing", ["default"]) == 0


def test_an_enqueue_pokes_after_it_commits(sqlite_url: str) -> None:
    client = jobsup.Client(sqlite_url)
    folder = sqlite.wake_folder(client.database.url)
    assert folder is not None
    listener = FifoListener(folder, "default")
    try:
        job_id = client.enqueue("a")
        assert readable(listener.fileno(), 5.0)
        listener.drain()
        assert not listener.early, "jobsup's own commit pokes after it"
        assert jobsup.Client(sqlite_url).get(job_id) is not None, "poked before the row was visible"
        engine = create_engine(sqlite_url)
        with engine.connect() as conn, conn.begin():
            client.enqueue("a", connection=conn)
            client.enqueue("a", queue="other", connection=conn)
        assert readable(listener.fileno(), 5.0), "an enqueue in the caller's transaction did not poke"
        listener.drain()
        assert listener.early, "the caller's transaction pokes before its COMMIT: the worker must look again"
        with engine.connect() as conn, conn.begin() as transaction:
            client.enqueue("a", connection=conn)
            transaction.rollback()
        assert not readable(listener.fileno(), 0.3), "a rolled-back enqueue poked"
    finally:
        listener.close()


@pytest.mark.slow
def test_an_idle_worker_is_woken_without_polling(sqlite_url: str, record: Path, tmp_path: Path) -> None:
    """With a poll of an hour, only the pokes can bring these jobs in, including one
    enqueued in the caller's transaction (its poke comes before its COMMIT)."""
    supervisor = Supervisor(sqlite_url, record, tmp_path / "supervisor.log", "--queue", "default=1", poll_interval="1h")
    try:
        supervisor.wait_for_workers(1)
        client = jobsup.Client(sqlite_url)
        folder = sqlite.wake_folder(client.database.url)
        assert folder is not None
        wait_until(lambda: list(folder.glob("*.fifo")), timeout=30, what="the worker's FIFO")

        def succeeded(job_id: int) -> None:
            wait_until(lambda: (job := client.get(job_id)) and job.status == "succeeded", timeout=30,
                       what=f"job {job_id} run by a poked worker")  # fmt: skip

        succeeded(client.enqueue("work"))
        engine = create_engine(sqlite_url)
        with engine.connect() as conn, conn.begin():
            job_id = client.enqueue("work", connection=conn)
            # A slow COMMIT: the poke, sent from the commit event before it, reaches the idle
            # worker well before the row is visible, so the worker must look again.
            event.listen(conn, "commit", lambda conn: time.sleep(0.3))
        succeeded(job_id)
    finally:
        supervisor.stop()


@pytest.mark.slow
def test_a_lost_poke_costs_only_the_poll(
    sqlite_url: str, record: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An enqueuer that never pokes (it died between its commit and its poke): the worker's
    poll still runs the job."""
    supervisor = Supervisor(
        sqlite_url, record, tmp_path / "supervisor.log", "--queue", "default=1", poll_interval="300ms"
    )
    try:
        supervisor.wait_for_workers(1)
        client = jobsup.Client(sqlite_url)
        monkeypatch.setattr(sqlite, "poke", lambda folder, queues: 0)
        job_id = client.enqueue("work")
        wait_until(lambda: (job := client.get(job_id)) and job.status == "succeeded", timeout=30,
                   what="a job whose poke was lost")  # fmt: skip
    finally:
        supervisor.stop()


def test_a_job_given_back_or_retried_from_the_dead_letters_wakes_the_idle_workers_of_its_queue(url: str) -> None:
    """Not left to their next poll (5 s on PostgreSQL) while they could start it at once: a
    pool gives back what it claimed ahead once it has waited a second, a batch what waits
    behind a long job, a stopping worker what it has not started."""
    client = jobsup.Client(url)
    client.enqueue("a", queue="given-back", max_attempts=1)
    job = claim_one(client, queue="given-back")
    listener = client.database.dialect.listener(client.database, "given-back")
    assert listener is not None
    try:
        assert not readable(listener.fileno(), 0.2), "woken before anything was given back"
        assert release(client, [job]) == {job.id}
        assert readable(listener.fileno(), 5.0), "a job given back woke nobody"
        listener.drain()
        assert fail(client, claim_one(client, queue="given-back")) == "dead_lettered"
        assert not readable(listener.fileno(), 0.2), "a dead letter woke the queue"
        assert client.store.transitions.retry([job.id]) == [job.id]
        assert readable(listener.fileno(), 5.0), "a dead letter retried woke nobody"
    finally:
        listener.close()
        client.close()
