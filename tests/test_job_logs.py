"""Per-job logs (`ctx.log`) on every real database: what is stored and how, the cap, the
scrubbing, batched writes, a failed write retried, retention, `Client.logs`, `jobsup jobs
logs`, and what a worker killed mid-job leaves behind.

The jobs here run through the worker's own pieces (`prepare`, `call`, `JobServices`), in
this process; the crash test runs a real `jobsup start`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from offline import OfflineDatabase
from sqlalchemy import event

import jobsup
from jobsup.observe import events
from jobsup.store import faults
from jobsup.store.database import Database
from jobsup.store.joblogs import JobLogs
from jobsup.store.rows import ClaimedJob
from jobsup.store.store import Store
from jobsup.worker.execute import Prepared, Ran, call, call_async, prepare
from jobsup.worker.joblog import LINE_CAP, MESSAGE_CAP, TEXT_CAP
from jobsup.worker.services import JobServices

from harness import history, started_by, status_of
from helpers import TESTS, claim_one, fail, run_jobsup, succeed, wait_until

SECRET = "tok-S3cret-42"
go_on = threading.Event()  # what `joblog-waits` waits for


@jobsup.job("joblog-levels")
def levels(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.debug("debugging %s", "it")
    ctx.log.info("fetched %d rows", 3)
    ctx.log.warning("slow: %.1fs", 2.5)
    ctx.log.error("gave up on %r", "b")
    try:
        raise ValueError("no such row")
    except ValueError:
        ctx.log.exception("lookup failed")
    ctx.log.info("100%% done, no args")  # %-formatting only with args, as `logging` does


@jobsup.job("joblog-secret")
def secret(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.info("calling with %s", payload["auth"])
    ctx.log.info("header: Bearer %s", payload["auth"].upper())
    try:
        raise RuntimeError(f"refused {payload['auth']}")
    except RuntimeError:
        ctx.log.exception("the call failed")


@jobsup.job("joblog-many")
def many(ctx: jobsup.JobContext, payload: Any) -> None:
    for number in range(payload["lines"]):
        ctx.log.info("line %d", number)


@jobsup.job("joblog-wide")
def wide(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.info("a" * 20_000)  # cut to MESSAGE_CAP
    for _ in range(40):
        ctx.log.info("b" * MESSAGE_CAP)  # each just fits one line; 32 fill the text cap


@jobsup.job("joblog-async")
async def logs_from_the_event_loop(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.info("awaiting %d calls", 2)
    await asyncio.sleep(0)
    ctx.log.warning("one was slow")


@jobsup.job("joblog-waits")
def waits(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.info("first")
    assert go_on.wait(30), "the test never let the job go on"
    ctx.log.info("second")


@jobsup.job("joblog-nul")
def nul(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.log.info("a\x00b")
    ctx.log.info("after")


@pytest.fixture
def services(url: str) -> Iterator[JobServices]:
    """The worker's services on a database of their own, as a worker process has."""
    db = Database(url)
    yield JobServices(Store(db))
    db.dispose()


def start_job(client: jobsup.Client, services: JobServices, name: str, payload: Any = None) -> tuple[ClaimedJob, Any]:
    """Enqueue `name` and claim it as a worker does: the job and what is ready to call."""
    client.enqueue(name, payload)
    job = claim_one(client)
    prepared = prepare(job, threading.Event(), services)
    assert isinstance(prepared, Prepared)
    return job, prepared


def run_job(client: jobsup.Client, services: JobServices, name: str, payload: Any = None) -> int:
    """Run one job to success (or its failure written), as the worker's loop does."""
    job, prepared = start_job(client, services, name, payload)
    ran = call(job, prepared)
    services.finished(job)  # the worker calls it just before it writes the outcome
    if ran.kind == "succeeded":
        succeed(client, [job])
    else:
        fail(client, job, error=ran.error or "failed")
    return job.id


def test_lines_are_stored_in_order_with_level_attempt_and_time(client: jobsup.Client, services: JobServices) -> None:
    before = datetime.now(UTC)
    job_id = run_job(client, services, "joblog-levels")
    lines = client.logs(job_id)
    assert [(line.level, line.message.splitlines()[0]) for line in lines] == [
        ("debug", "debugging it"),
        ("info", "fetched 3 rows"),
        ("warning", "slow: 2.5s"),
        ("error", "gave up on 'b'"),
        ("error", "lookup failed"),
        ("info", "100%% done, no args"),
    ]
    assert "Traceback" in lines[4].message and "ValueError: no such row" in lines[4].message
    assert {(line.job_id, line.attempt) for line in lines} == {(job_id, 1)}
    assert [line.id for line in lines] == sorted(line.id for line in lines)
    times = [line.logged_at for line in lines]
    assert all(time is not None for time in times) and times == sorted(times)  # type: ignore[type-var]
    assert before <= times[0] <= datetime.now(UTC)  # type: ignore[operator]


def test_a_nul_in_a_line_is_stored_escaped_and_the_lines_after_it_too(
    client: jobsup.Client, services: JobServices
) -> None:
    job_id = run_job(client, services, "joblog-nul")
    assert [line.message for line in client.logs(job_id)] == ["a\\0b", "after"]


@pytest.mark.postgres
def test_a_line_the_database_refuses_is_dropped_and_the_others_written(postgres_url: str) -> None:
    from jobsup.observe.events import subscribe, unsubscribe

    client = jobsup.Client(postgres_url)
    db = Database(postgres_url)
    services = JobServices(Store(db))
    job, _ = start_job(client, services, "joblog-many", {"lines": 0})
    logger = services.journal.open[job.id]
    seen: list[str] = []
    listener = subscribe(lambda kind, fields: seen.append(kind))
    try:
        services.journal.add(logger, "info", "refused\x00")  # past the escaping, as a database quirk would be
        services.journal.add(logger, "info", "kept")
        services.finished(job)
    finally:
        unsubscribe(listener)
    assert [line.message for line in client.logs(job.id)] == ["kept"]
    assert "joblog.line_dropped" in seen
    db.dispose()
    client.close()


def test_each_line_is_mirrored_to_the_worker_s_log(client: jobsup.Client, services: JobServices) -> None:
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    mirror = logging.getLogger("jobsup.job.joblog-levels")
    mirror.addHandler(handler)
    mirror.setLevel(logging.DEBUG)
    try:
        job_id = run_job(client, services, "joblog-levels")
    finally:
        mirror.removeHandler(handler)
        mirror.setLevel(logging.NOTSET)
    assert [record.levelname for record in seen] == ["DEBUG", "INFO", "WARNING", "ERROR", "ERROR", "INFO"]
    assert seen[1].getMessage() == f"job={job_id} attempt=1 fetched 3 rows"


def test_payload_contents_are_scrubbed_like_errors(client: jobsup.Client, services: JobServices) -> None:
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("jobsup.job.joblog-secret").addHandler(handler)
    try:
        job_id = run_job(client, services, "joblog-secret", {"auth": SECRET})
    finally:
        logging.getLogger("jobsup.job.joblog-secret").removeHandler(handler)
    messages = [line.message for line in client.logs(job_id)]
    assert messages[:2] == ["calling with ***", "header: Bearer ***"]
    assert "RuntimeError: refused ***" in messages[2]
    for text in [*messages, *seen]:
        assert SECRET.lower() not in text.lower()
    assert seen and all("***" in text for text in seen)


def test_a_job_over_the_line_cap_stores_the_cap_and_one_summary(client: jobsup.Client, services: JobServices) -> None:
    job_id = run_job(client, services, "joblog-many", {"lines": LINE_CAP + 5})
    lines = client.logs(job_id, limit=5000)
    assert len(lines) == LINE_CAP + 1
    assert [line.message for line in lines[:2]] == ["line 0", "line 1"]
    assert lines[LINE_CAP - 1].message == f"line {LINE_CAP - 1}"
    over = sum(len(f"line {n}") for n in range(LINE_CAP, LINE_CAP + 5))
    summary = lines[-1]
    assert (summary.level, summary.attempt) == ("warning", 1)
    assert summary.message == (
        f"5 more lines ({over} characters) were not stored: "
        f"over the per-job cap of {LINE_CAP:,} lines and {TEXT_CAP:,} characters"
    )


def test_the_text_cap_and_one_long_line_cut(client: jobsup.Client, services: JobServices) -> None:
    job_id = run_job(client, services, "joblog-wide")
    lines = client.logs(job_id)
    cut = lines[0].message
    assert len(cut) == MESSAGE_CAP and cut.startswith("aaa") and cut.endswith(" [cut: 20,000 characters]")
    fitting = (TEXT_CAP - MESSAGE_CAP) // MESSAGE_CAP  # after the cut line
    assert [len(line.message) for line in lines[1:-1]] == [MESSAGE_CAP] * fitting
    assert lines[-1].message.startswith(f"{40 - fitting} more lines ({(40 - fitting) * MESSAGE_CAP:,} characters)")
    assert sum(len(line.message) for line in lines[:-1]) == TEXT_CAP


def test_a_retried_job_s_cap_counts_its_earlier_attempts(client: jobsup.Client, services: JobServices) -> None:
    client.enqueue("joblog-many", {"lines": 600})
    for _ in range(2):
        job = claim_one(client)
        prepared = prepare(job, threading.Event(), services)
        assert isinstance(prepared, Prepared)
        call(job, prepared)
        services.finished(job)
        fail(client, job, retry_in=0.0)
    lines = client.logs(job.id, limit=5000)
    attempts = [line.attempt for line in lines]
    assert attempts.count(1) == 600 and attempts.count(2) == LINE_CAP - 600 + 1
    assert lines[-1].message.startswith("200 more lines (") and lines[-1].attempt == 2


def test_an_async_job_logs_the_same_way(client: jobsup.Client, services: JobServices) -> None:
    job, prepared = start_job(client, services, "joblog-async")
    assert asyncio.run(call_async(job, prepared)) == Ran("succeeded")
    services.finished(job)
    assert [(line.level, line.message) for line in client.logs(job.id)] == [
        ("info", "awaiting 2 calls"),
        ("warning", "one was slow"),
    ]


def test_a_job_s_lines_are_written_in_batches(url: str, client: jobsup.Client) -> None:
    """Never one round trip per line: 250 lines take at most four INSERTs (one every 100
    lines, one when the call returns, and at most one from the once-a-second flush)."""
    db = Database(url)
    inserts: list[int] = []

    @event.listens_for(db.engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.startswith("INSERT INTO jobsup_job_log"):
            inserts.append(len(parameters) if many else 1)

    services = JobServices(Store(db))
    try:
        job_id = run_job(client, services, "joblog-many", {"lines": 250})
    finally:
        db.dispose()
    assert len(client.logs(job_id)) == 250
    assert 1 <= len(inserts) <= 4 and sum(inserts) >= 250, inserts


def test_jobs_running_at_once_keep_all_their_lines_in_order(client: jobsup.Client, services: JobServices) -> None:
    started = [start_job(client, services, "joblog-many", {"lines": 300}) for _ in range(6)]
    threads = [threading.Thread(target=call, args=pair) for pair in started]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for job, _ in started:
        services.finished(job)
        succeed(client, [job])
        assert [line.message for line in client.logs(job.id)] == [f"line {n}" for n in range(300)]


def test_a_failed_write_is_retried_and_never_reaches_the_job(url: str, client: jobsup.Client) -> None:
    db = Database(url)
    failures: list[dict[str, Any]] = []
    subscriber = events.subscribe(
        lambda kind, fields: failures.append(fields) if kind == "joblog.write_failed" else None
    )
    try:
        services = JobServices(Store(db))
        job, prepared = start_job(client, services, "joblog-many", {"lines": 3})
        for engine in {db.engine, db.single}:
            faults.install(engine, "worker", "worker:joblog@0s+3s")  # log writes fail for 3 s from now
        ran = call(job, prepared)
        services.finished(job)
        assert ran == Ran("succeeded") and failures, "the write in the fault window did not fail"
        assert "injected fault" in str(failures[0]["error"])
        wait_until(lambda: len(client.logs(job.id)) == 3, timeout=15, what="the lines, written by a later flush")
    finally:
        events.unsubscribe(subscriber)
        db.dispose()
    assert [line.message for line in client.logs(job.id)] == ["line 0", "line 1", "line 2"]


def test_a_write_that_fails_after_a_good_one_keeps_its_lines_for_the_next(url: str, client: jobsup.Client) -> None:
    """The write itself fails this time (its job's earlier lines are already counted), and
    the lines are kept, in order, for the next flush."""
    db = Database(url)
    services = JobServices(Store(db))
    go_on.clear()
    job, prepared = start_job(client, services, "joblog-waits")
    running = threading.Thread(target=call, args=(job, prepared))
    running.start()
    try:
        wait_until(lambda: len(client.logs(job.id)) == 1, timeout=15, what="the first line, flushed")
        for engine in {db.engine, db.single}:
            faults.install(engine, "worker", "worker:joblog@0s+3s")
        go_on.set()
        running.join(30)
        services.finished(job)  # fails: the fault window is open
        assert len(client.logs(job.id)) == 1
        wait_until(lambda: len(client.logs(job.id)) == 2, timeout=15, what="the second line, written by a later flush")
    finally:
        go_on.set()
        db.dispose()
    assert [line.message for line in client.logs(job.id)] == ["first", "second"]


def test_retention_deletes_a_job_s_lines_with_it(client: jobsup.Client, services: JobServices) -> None:
    purged = run_job(client, services, "joblog-levels")
    also = run_job(client, services, "joblog-many", {"lines": 2})
    pending = client.enqueue("joblog-levels")  # not finished: the purge leaves it and its lines
    line = {"job_id": pending, "attempt": 1, "logged_at": datetime.now(UTC), "level": "info", "message": "kept"}
    client.store.logs.write([line])
    assert client.store.retention.purge("succeeded", older_than=None) == 2
    assert client.logs(purged) == [] and client.logs(also) == []
    assert client.store.logs.usage(purged) == (0, 0)
    assert [line.message for line in client.logs(pending)] == ["kept"]


def test_a_dead_letter_purge_deletes_only_its_own_jobs_lines(client: jobsup.Client, services: JobServices) -> None:
    client.enqueue("joblog-many", {"lines": 2}, max_attempts=1)
    job = claim_one(client)
    prepared = prepare(job, threading.Event(), services)
    assert isinstance(prepared, Prepared)
    call(job, prepared)
    services.finished(job)
    fail(client, job)
    survivor = run_job(client, services, "joblog-many", {"lines": 2})
    assert client.dead_letters.purge() == 1
    assert client.logs(job.id) == [] and len(client.logs(survivor)) == 2


def test_client_logs_pages_and_checks_its_arguments(client: jobsup.Client, services: JobServices) -> None:
    job_id = run_job(client, services, "joblog-many", {"lines": 5})
    first = client.logs(job_id, limit=2)
    rest = client.logs(job_id, after_id=first[-1].id)
    assert [line.message for line in first + rest] == [f"line {n}" for n in range(5)]
    assert client.logs(job_id, after_id=rest[-1].id) == [] and client.logs(job_id + 1000) == []
    assert first[0].to_dict()["logged_at"].startswith(str(first[0].logged_at.year))  # type: ignore[union-attr]
    for bad in [{"job_id": "1"}, {"job_id": 1, "limit": 0}, {"job_id": 1, "after_id": True}]:
        with pytest.raises(jobsup.BadInput):
            client.logs(**bad)  # type: ignore[arg-type]


def test_usage_counts_every_attempt_s_lines_and_characters(client: jobsup.Client) -> None:
    job_id = client.enqueue("joblog-levels")
    at = datetime.now(UTC)
    rows = [{"job_id": job_id, "attempt": n, "logged_at": at, "level": "info", "message": "é" * n} for n in (1, 2, 3)]
    client.store.logs.write(rows)
    assert client.store.logs.usage(job_id) == (3, 6)  # characters, not bytes


# -- jobsup jobs logs ----------------------------------------------------------------------


def test_the_command_prints_a_job_s_lines(url: str, client: jobsup.Client, services: JobServices) -> None:
    job_id = run_job(client, services, "joblog-levels")
    text = run_jobsup("jobs", "logs", str(job_id), "--database-url", url)
    assert text.returncode == 0, text.stderr
    printed = text.stdout.splitlines()
    assert printed[1].split(maxsplit=2)[2] == "INFO     #1  fetched 3 rows"
    assert "ValueError: no such row" in text.stdout
    as_json = run_jobsup("jobs", "logs", str(job_id), "--json", "--database-url", url)
    assert [line.to_dict() for line in client.logs(job_id)] == json.loads(as_json.stdout)
    nothing = run_jobsup("jobs", "logs", str(client.enqueue("joblog-levels")), "--database-url", url)
    assert nothing.stdout == "no lines logged\n"


@pytest.mark.parametrize(
    ("job_id", "code", "message"),
    [
        ("424242", 1, "jobsup: no job with id 424242\n"),  # as `jobs show`: 1 for what is not there
        ("99999999999999999999", 2, "a job id is a whole number of at most 64 bits"),
        ("abc", 2, "'abc' is not a valid integer"),
    ],
)
def test_the_command_refuses_an_unknown_or_a_bad_job_id(sqlite_url: str, job_id: str, code: int, message: str) -> None:
    result = run_jobsup("jobs", "logs", job_id, "--database-url", sqlite_url)
    assert result.returncode == code and message in result.stderr, result
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def follow(url: str, job_id: int) -> tuple[subprocess.Popen[str], queue.SimpleQueue[str]]:
    """`jobsup jobs logs ID --follow --json`, its output lines arriving on a queue."""
    command = [sys.executable, "-m", "jobsup", "jobs", "logs", str(job_id), "--follow", "--json", "--database-url", url]
    environment = {**os.environ, "PYTHONPATH": str(TESTS), "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return process, lines


def test_follow_prints_new_lines_and_ends_once_the_job_has_finished(
    url: str, client: jobsup.Client, services: JobServices
) -> None:
    go_on.clear()
    job, prepared = start_job(client, services, "joblog-waits")
    running = threading.Thread(target=call, args=(job, prepared))
    running.start()
    process, lines = follow(url, job.id)
    try:
        assert json.loads(lines.get(timeout=30))["message"] == "first"  # flushed within a second
        assert process.poll() is None, "the follow ended while the job still ran"
        go_on.set()
        running.join(30)
        services.finished(job)
        succeed(client, [job])
        assert process.wait(30) == 0, process.stderr.read()  # type: ignore[union-attr]
    finally:
        go_on.set()
        if process.poll() is None:
            process.kill()
    assert json.loads(lines.get(timeout=5))["message"] == "second"


def test_ctrl_c_ends_a_follow_cleanly(sqlite_url: str) -> None:
    client = jobsup.Client(sqlite_url)
    job_id = client.enqueue("joblog-levels")  # never runs: the follow would go on for ever
    line = {"job_id": job_id, "attempt": 1, "logged_at": datetime.now(UTC), "level": "info", "message": "hello"}
    client.store.logs.write([line])
    process, lines = follow(sqlite_url, job_id)
    try:
        assert '"hello"' in lines.get(timeout=30)  # it is following now
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(30)
        except subprocess.TimeoutExpired:  # seen once in a full run: let the next one say where it hung
            process.send_signal(signal.SIGABRT)  # faulthandler (PYTHONFAULTHANDLER) prints every thread's stack
            pytest.fail(f"Ctrl-C left the follow running for 30 s; its stderr:\n{process.communicate(timeout=30)[1]}")
        assert code == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert "Traceback" not in process.stderr.read()  # type: ignore[union-attr]


# -- SQL Server, compiled offline ----------------------------------------------------------


def test_the_log_statements_compile_for_sql_server() -> None:
    db = OfflineDatabase()
    logs = JobLogs(db)  # type: ignore[arg-type]
    at = datetime(2030, 1, 1, tzinfo=UTC)
    logs.write([{"job_id": 7, "attempt": 2, "logged_at": at, "level": "info", "message": "hi"}] * 2)
    logs.read(7, after_id=3, limit=5)
    db.answer([(2, 4)])
    assert logs.usage(7) == (2, 4)
    JobLogs.delete_for(db.recording, [7, 8])  # type: ignore[arg-type]
    insert, read, usage, delete = db.sql
    assert insert.startswith("INSERT INTO jobsup_job_log (job_id, attempt, logged_at, level, message)")
    assert read.startswith("SELECT TOP 5 jobsup_job_log.id") and "jobsup_job_log.id > " in read
    assert "ORDER BY jobsup_job_log.id" in read
    assert "coalesce(sum(LEN(jobsup_job_log.message))" in usage
    assert delete.startswith("DELETE FROM jobsup_job_log WHERE jobsup_job_log.job_id IN (")


# -- a real worker, killed -----------------------------------------------------------------


@pytest.mark.slow
def test_lines_flushed_before_a_kill_9_survive_and_the_rerun_adds_its_own(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    start()
    job_id = client.enqueue("log-then-block", {"lines": 3})
    victim = started_by(record, job_id)
    # The job now waits; its lines reach the database with the worker's next flush.
    wait_until(lambda: len(client.logs(job_id)) == 3, timeout=15, what="the first attempt's lines to be flushed")
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the rerun to succeed")
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    assert started_by(record, job_id, attempt=2) != victim
    assert [(line.attempt, line.message) for line in client.logs(job_id)] == [
        (1, "before the crash 0"),
        (1, "before the crash 1"),
        (1, "before the crash 2"),
        (2, "rerun on attempt 2"),
    ]
