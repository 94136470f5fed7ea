"""`jobsup start` as an operator meets it: real processes, real signals, real databases."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from children import title_of

import jobsup

from harness import Supervisor, assert_no_overlap, attempt_spans, history, records, started_by, status_of
from helpers import alive, wait_until

pytestmark = pytest.mark.slow


def test_kill_9_a_worker_and_its_job_comes_back_at_once(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start("--queue", "default=2", lease="60s")
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]})
    victim = started_by(record, job_id)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the job to succeed")
    assert time.monotonic() - killed_at < 60, "recovery waited out the 60 s lease"
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    assert started_by(record, job_id, attempt=2) != victim
    workers = wait_until(
        lambda: len(supervisor.workers()) == 2 and victim not in supervisor.workers() and supervisor.workers(),
        timeout=30,
        what="the killed worker to be replaced",
    )
    assert all(alive(pid) for pid in workers) and not alive(victim)
    assert "killed by SIGKILL" in supervisor.output()
    assert_no_overlap(record, job_id)


def test_a_lost_host_s_job_runs_elsewhere_after_the_lease_lapses(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    first = start(lease="4s")
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]})
    started_by(record, job_id)
    first.lose_host()
    lost_at = time.time()
    start(lease="4s")
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=60, what="the job to succeed")
    assert history(client, job_id) == [(1, "lease_expired"), (2, "succeeded")]
    second_start = attempt_spans(record, job_id)[2][0]
    assert second_start - lost_at > 1.0, "the job ran again before its lease could have lapsed"
    assert_no_overlap(record, job_id)


def test_sigterm_lets_short_jobs_finish_and_releases_long_ones(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start("--queue", "default=2", shutdown_grace="2s")
    short = client.enqueue("work", {"seconds": 1})
    long = client.enqueue("work", {"seconds": 60})
    started_by(record, short)
    started_by(record, long)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=2 + 15) == 0
    assert status_of(client, short) == "succeeded"
    stored = client.get(long)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 0)
    assert history(client, long) == [(1, "released")]
    assert "supervisor.stopped" in supervisor.output()


def test_a_job_past_its_timeout_is_timed_out_and_its_worker_replaced(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start()
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]}, timeout="1s")
    victim = started_by(record, job_id)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the retry to succeed")
    assert history(client, job_id) == [(1, "timed_out"), (2, "succeeded")]
    assert "timed out after 1s" in (client.get(job_id).history[0].error or "")  # type: ignore[union-attr]
    wait_until(
        lambda: supervisor.workers() and victim not in supervisor.workers(),
        timeout=30,
        what="the worker to be replaced",
    )
    assert "ended itself: job timed out" in supervisor.output()
    assert_no_overlap(record, job_id)


@pytest.mark.parametrize(
    ("honour", "renewal"),
    [(True, "fails"), (False, "fails"), (False, "hangs")],
    ids=["honours-cancel", "ignores-cancel", "renewal-hangs"],
)
def test_lease_loss_stops_the_job_before_another_instance_runs_it(  # type: ignore[no-untyped-def]
    url: str, start, record: Path, honour: bool, renewal: str
) -> None:
    client = jobsup.Client(url)
    faults = "worker:renew@0s+600s" + (":hang" if renewal == "hangs" else "")
    faulty = start(lease="4s", heartbeat="1s", faults=faults)
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1], "honour": honour})
    first_worker = started_by(record, job_id)
    healthy = start(lease="4s", heartbeat="1s")
    # The faulty worker gives up one heartbeat before its 4 s lease could lapse; either
    # instance may run attempt 2, which is instant, while attempt 1 would go on ticking for
    # a minute if nothing had stopped it.
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=60, what="attempt 2 to succeed")
    if not honour:
        wait_until(lambda: not alive(first_worker), timeout=10, what="attempt 1's worker to be gone")
    assert_no_overlap(record, job_id)
    first = [e["what"] for e in records(record, job_id) if e["attempt"] == 1]
    if honour:
        assert first[-1] == "cancelled"
    else:
        assert "ended itself: lease lost" in faulty.output()
    assert healthy.process.poll() is None


def test_a_brief_outage_during_settle_loses_neither_success_nor_failure(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    start("--queue", "default=2", faults="worker:settle@0s+4s")
    ok = client.enqueue("work", {"seconds": 1})
    bad = client.enqueue("work", {"seconds": 1, "fail": True}, max_attempts=1)
    wait_until(lambda: status_of(client, ok) == "succeeded", timeout=30, what="the success to be written")
    wait_until(lambda: status_of(client, bad) == "dead_lettered", timeout=30, what="the failure to be written")
    assert history(client, ok) == [(1, "succeeded")]
    assert history(client, bad) == [(1, "failed")]
    assert len([e for e in records(record, ok) if e["what"] == "start"]) == 1


def test_unknown_names_and_corrupt_payloads_dead_letter_without_blocking(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import text

    client = jobsup.Client(url)
    unknown = client.enqueue("no-such-job", max_attempts=1, allow_unknown=True)
    corrupt = client.enqueue("work", max_attempts=3)
    with client.database.transaction() as conn:
        conn.execute(text("UPDATE jobsup_job SET payload = '{broken' WHERE id = :id"), {"id": corrupt})
    behind = client.enqueue_many([{"name": "work"} for _ in range(5)])
    start()
    wait_until(lambda: all(status_of(client, j) == "succeeded" for j in behind), timeout=30, what="jobs behind")
    wait_until(lambda: status_of(client, unknown) == "dead_lettered", timeout=90, what="unknown to dead-letter")
    assert status_of(client, corrupt) == "dead_lettered"
    assert "InvalidPayload" in (client.get(corrupt).last_error or "")  # type: ignore[union-attr]
    assert "no job named 'no-such-job'" in (client.get(unknown).last_error or "")  # type: ignore[union-attr]
    assert client.get(unknown).attempts == 1  # type: ignore[union-attr]


def test_sigterm_to_one_worker_stops_it_gracefully_and_it_is_replaced(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start()
    job_id = client.enqueue("work", {"seconds": 1})
    worker = started_by(record, job_id)
    os.kill(worker, signal.SIGTERM)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the job to finish")
    wait_until(
        lambda: supervisor.workers() and worker not in supervisor.workers(),
        timeout=30,
        what="the worker to be replaced",
    )
    assert history(client, job_id) == [(1, "succeeded")]


def test_workers_stop_when_their_supervisor_is_killed(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    supervisor = start("--queue", "default=2")
    workers = supervisor.wait_for_workers(2)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)

    wait_until(lambda: not any(map(alive, workers)), timeout=15, what=lambda: still_there(supervisor, workers))


def test_an_orphan_stuck_outside_a_job_is_ended_by_its_lease_thread(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    # Every claim hangs (a half-open connection): the main thread never gets back to its
    # loop to see the supervisor gone; holding no lease, the worker loses nothing by ending.
    supervisor = start("--queue", "default=1", faults="worker:claim@0s+300s:hang")
    workers = supervisor.wait_for_workers(1)
    # Inside the hanging claim, not before it: a worker killed earlier sees its supervisor gone
    # from its loop and ends as usual (CI met that order under load).
    wait_until(
        lambda: "fault.hanging role=worker operation=claim" in supervisor.output(), timeout=30, what="the claim to hang"
    )
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)
    wait_until(lambda: not any(map(alive, workers)), timeout=30, what=lambda: still_there(supervisor, workers))
    assert "worker.orphan_stuck" in supervisor.output()
    assert "in claim" in supervisor.output()  # where the main thread was, from its stack
    assert "Traceback" not in supervisor.output()


def test_an_orphan_finishing_a_job_longer_than_the_grace_ends_as_usual(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    # The lease thread's 5 s count starts when the worker last held a lease, not when the
    # supervisor went: this job outlasts it, then the main thread ends the worker itself.
    client = jobsup.Client(url)
    supervisor = start("--queue", "default=1")
    job_id = client.enqueue("work", {"seconds": 7})
    worker = started_by(record, job_id)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)
    wait_until(lambda: not alive(worker), timeout=30, what=lambda: still_there(supervisor, [worker]))
    assert status_of(client, job_id) == "succeeded"
    assert "worker.orphan_stuck" not in supervisor.output()


def still_there(supervisor: Supervisor, workers: list[int]) -> str:
    """What the orphans that did not stop were doing (their titles), and the log."""
    titles = []
    for pid in workers:
        with contextlib.suppress(FileNotFoundError):
            titles.append(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_text().strip(chr(0))}")
    return f"orphaned workers to stop; still there: {titles}; log:\n{supervisor.output()[-4000:]}"


def test_a_batch_does_not_start_a_job_cancelled_while_it_waited(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    first, second = client.enqueue_many([{"name": "work", "payload": {"seconds": 2}}, {"name": "work"}])
    start(claim_batch="2")
    started_by(record, first)
    assert client.cancel(second)
    wait_until(lambda: status_of(client, first) == "succeeded", timeout=30, what="the first job")
    wait_until(
        lambda: "job.skipped" in "".join(p.read_text() for p in record.parent.glob("*.log")),
        timeout=10,
        what="the worker to skip the cancelled job",
    )
    assert records(record, second) == []
    assert status_of(client, second) == "cancelled"


def test_an_orphaned_worker_does_not_hold_the_metrics_port(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    client = jobsup.Client(url)
    first = start(metrics_port=port)
    job_id = client.enqueue("work", {"seconds": 60})
    orphan = started_by(record, job_id)
    os.kill(first.pid, signal.SIGKILL)  # the supervisor alone: its worker goes on with the job
    first.wait(10)
    assert alive(orphan)
    second = start(metrics_port=port)
    wait_until(lambda: "metrics.serving" in second.output(), timeout=30, what="the new supervisor to serve")
    assert "cannot serve /metrics" not in second.output()
    os.kill(orphan, signal.SIGKILL)


def test_a_second_sigint_skips_the_grace(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    supervisor = start(shutdown_grace="60s")
    job_id = client.enqueue("work", {"seconds": 120})
    started_by(record, job_id)
    supervisor.signal(signal.SIGINT)
    wait_until(lambda: "supervisor.stopping" in supervisor.output(), timeout=10, what="the first SIGINT")
    assert "SIGINT again (Ctrl-C) releases running jobs now" in supervisor.output()  # said at once, not after 60 s
    supervisor.signal(signal.SIGINT)
    assert supervisor.wait(timeout=20) == 0  # far inside the 60 s grace
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 0)
    assert history(client, job_id) == [(1, "released")]


def test_a_settle_s_successes_are_one_info_line_and_each_job_s_lines_are_debug(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "work"} for _ in range(6)])
    client.cancel(ids[3])  # a gap in the ids the line names
    supervisor = start("--queue", "default=1", "--claim-batch", "10")
    done = [job_id for job_id in ids if job_id != ids[3]]
    wait_until(lambda: all(status_of(client, j) == "succeeded" for j in done), timeout=30, what="the jobs to succeed")
    supervisor.stop()
    lines = [line for line in supervisor.output().splitlines() if " jobs.succeeded " in line]
    assert lines and all(" INFO " in line and "names=work queue=default worker=default#1" in line for line in lines)
    # One line per settle: one for all five, or (a loaded host) a few whose runs make up the five.
    runs = [run for line in lines for run in line.split(" ids=")[1].split()[0].split(",")]
    settled = [n for run in runs for n in range(int(run.split("-")[0]), int(run.split("-")[-1]) + 1)]
    assert sorted(settled) == done and sum(int(line.split(" count=")[1].split()[0]) for line in lines) == 5
    if len(lines) == 1:
        assert f"count=5 ids={ids[0]}-{ids[2]},{ids[4]}-{ids[5]} " in lines[0], lines[0]
    assert " job.started " not in supervisor.output() and " job.succeeded " not in supervisor.output()
    # At DEBUG, each job has its start line and its success line (the settle's event carries them).
    more = client.enqueue_many([{"name": "work"} for _ in range(3)])
    debug = start("--queue", "default=1", "--claim-batch", "10", "--log-level", "DEBUG")
    wait_until(lambda: all(status_of(client, j) == "succeeded" for j in more), timeout=30, what="the jobs to succeed")
    debug.stop()
    for job_id in more:
        assert f" job.started job={job_id} name=work attempt=1 queue=default " in debug.output()
        line = next(line for line in debug.output().splitlines() if f" job.succeeded job={job_id} " in line)
        assert " DEBUG " in line and "name=work attempt=1 queue=default worker=default#1 seconds=" in line, line


def test_jobs_of_a_second_or_more_are_claimed_one_by_one_never_given_back(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "work", "payload": {"seconds": 1.2}} for _ in range(4)])
    start("--queue", "default=1")  # the adaptive claim
    wait_until(lambda: all(status_of(client, j) == "succeeded" for j in ids), timeout=60, what="the jobs to succeed")
    # A claim of two would have held the second job behind the first past a second and
    # released it: a released attempt in its history.
    assert [history(client, j) for j in ids] == [[(1, "succeeded")]] * 4


def test_a_batch_s_job_that_runs_long_is_named_in_the_process_title(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    # A batch's jobs are not titled as each starts (it cost a short job as much as its
    # events): the lease thread names one that has run a tick.
    client = jobsup.Client(url)
    quick, slow = client.enqueue_many([{"name": "work"}, {"name": "work", "payload": {"seconds": 30}}])
    supervisor = start("--queue", "default=1", "--claim-batch", "5")
    wait_until(lambda: status_of(client, quick) == "succeeded", timeout=30, what="the quick job")
    title = f"running work id={slow} attempt=1"
    wait_until(lambda: any(title in title_of(pid) for pid in supervisor.workers()), timeout=10, what=title)
    client.cancel(slow)
    wait_until(lambda: any(" idle" in title_of(pid) for pid in supervisor.workers()), timeout=30, what="idle")


def test_a_job_named_in_the_title_is_no_longer_named_once_it_ends(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    # The first runs long enough to be named (a tick is 0.25 s), short of the second after
    # which the jobs waiting behind it are given back; the next job reads its own title.
    client = jobsup.Client(url)
    named, then = client.enqueue_many(
        [{"name": "work", "payload": {"seconds": 0.8}}, {"name": "work", "payload": {"title": True}}]
    )
    start("--queue", "default=1", "--claim-batch", "5")
    wait_until(lambda: status_of(client, then) == "succeeded", timeout=30, what="the second job")
    assert history(client, named) == [(1, "succeeded")] and history(client, then) == [(1, "succeeded")]
    assert client.get(then).result == "jobsup: worker default#1 running a batch of 2"  # type: ignore[union-attr]
