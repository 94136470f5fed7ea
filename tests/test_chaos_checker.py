"""The campaign's checker reports what it is there to find (each case a history that breaks
one invariant, and its neighbour that keeps it), and judges odd but legal ends without crashing;
the campaign's bookkeeping of its own faults leaves no queue paused at the end."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.chaos.checker import (
    Fleeting,
    attempt_rows,
    batches,
    bulks,
    claim_to_call,
    crashes,
    lost,
    pool_waits,
    rate_windows,
    restarts,
    retention,
    successes_written,
)
from tests.chaos.events import problems
from tests.chaos.ledger import Ledger
from tests.chaos.processes import LEASE, Kill
from tests.chaos.sidechannel import Run
from tests.chaos.state import EndState, JobRow

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def rated(job_id: int, claimed: datetime) -> JobRow:
    return JobRow(
        job_id, "rated", "default", "succeeded", claimed, None, None, None, None, None, "{}",
        attempts=[(1, "succeeded", "owner", claimed)],
    )  # fmt: skip


def ended(jobs: list[JobRow]) -> EndState:
    return EndState({job.id: job for job in jobs}, {}, {}, {}, set(), [], {})


def run_of(job: JobRow, after_claim: float, pid: int = 1) -> Run:
    return Run(job.id, 1, pid, "rated", job.attempts[0][3].timestamp() + after_claim)


def test_six_claims_of_a_five_per_second_type_within_a_second_break_the_window() -> None:
    jobs = [rated(n, T0 + timedelta(seconds=0.19 * n)) for n in range(6)]  # 0 .. 0.95 s
    assert [v.invariant for v in rate_windows([], ended(jobs))] == ["c:rate-window"]
    spread = [rated(n, T0 + timedelta(seconds=0.21 * n)) for n in range(6)]  # 0 .. 1.05 s
    assert rate_windows([], ended(spread)) == []


def test_a_call_kept_behind_another_job_of_its_worker_is_reported_a_slow_host_is_not() -> None:
    # Jobs 1 and 2 claimed together by one worker: 2 is called only after 1 has run.
    first, second = rated(1, T0), rated(2, T0)
    runs = [run_of(first, 0.01), run_of(second, 0.9)]
    violations = rate_windows(runs, ended([first, second]))
    assert [(v.invariant, v.jobs) for v in violations] == [("c:rate-late-call", {1, 2})]
    # The same calls by two workers, and a call 1.3 s after its claim with nothing between:
    # the claim's commit and the host's scheduling, not jobsup's doing.
    assert rate_windows([run_of(first, 0.01), run_of(second, 0.9, pid=2)], ended([first, second])) == []
    assert rate_windows([run_of(first, 1.3)], ended([first])) == []
    assert claim_to_call([run_of(first, 1.3)], ended([first])) == (pytest.approx(1.3), 1)


def test_a_pools_job_called_long_after_its_claim_is_reported_one_called_in_time_is_not() -> None:
    # Claimed ahead at T0, called 4.5 s later (it waited behind long jobs, never given back);
    # its neighbour was given back after a second and claimed again, then called at once.
    late = JobRow(
        1, "pooled", "pool", "succeeded", T0, None, None, None, None, None, "{}",
        attempts=[(1, "succeeded", "owner", T0)],
    )  # fmt: skip
    again = T0 + timedelta(seconds=1.1)
    kept = JobRow(
        2, "pooled", "pool", "succeeded", again, None, None, None, None, None, "{}",
        attempts=[(1, "released", "owner", T0), (1, "succeeded", "other", again)],
    )  # fmt: skip
    runs = [Run(1, 1, 1, "pooled", T0.timestamp() + 4.5), Run(2, 1, 2, "pooled", again.timestamp() + 0.05)]
    assert [(v.invariant, v.jobs) for v in pool_waits(runs, ended([late, kept]))] == [("l:pool-wait", {1})]
    assert pool_waits(runs[1:], ended([kept])) == []


def test_a_released_claim_counts_in_the_window_though_its_attempt_number_comes_again() -> None:
    # Job 0 was claimed, released (its attempt's row written) and claimed again as attempt 1:
    # both claims count, so with four others inside one second that is six.
    jobs = [rated(n, T0 + timedelta(seconds=0.1 + 0.1 * n)) for n in range(5)]
    jobs[0].attempts.insert(0, (1, "released", "owner", T0))
    assert [v.invariant for v in rate_windows([], ended(jobs))] == ["c:rate-window"]


def test_an_attempt_missing_from_the_history_or_ended_twice_is_reported_a_released_one_is_not() -> None:
    def job(status: str, *attempts: tuple[int, str | None]) -> JobRow:
        row = rated(1, T0)
        row.status, row.attempts = status, [(n, outcome, "owner", T0) for n, outcome in attempts]
        return row

    runs = [Run(1, 1, 1, "rated", 0.0), Run(1, 2, 1, "rated", 1.0)]
    # Attempt 1 released (its number comes back), then failed; 2 under way on the job row.
    kept = job("running", (1, "released"), (1, "failed"), (2, None))
    assert attempt_rows(runs, ended([kept])) == []
    assert attempt_rows(runs, ended([job("succeeded", (1, "failed"), (2, "succeeded"))])) == []
    found = {
        "k:run-without-attempt": job("pending", (1, "failed")),
        "k:attempt-ended-twice": job("pending", (1, "failed"), (1, "lease_expired"), (2, "failed")),
        "k:success-not-one-attempt": job("succeeded", (1, "succeeded"), (2, "failed")),
    }
    for invariant, end in found.items():
        assert [v.invariant for v in attempt_rows(runs, ended([end]))] == [invariant]


def test_a_success_that_ran_again_without_a_fault_to_lose_it_is_reported(tmp_path: Path) -> None:
    """A worker wrote a returned run's success behind, and it never landed: its attempt ended
    by the lease's lapse. Reported unless its process was killed, a supervisor stopped, or the
    database restarted after the run began."""
    row = rated(1, T0)
    row.attempts = [(1, "lease_expired", "owner", T0), (2, "succeeded", "owner", T0)]
    first = Run(1, 1, 7, "rated", 100.0, end=101.0, outcome="ok", extra={"supervisor": 3})
    again = Run(1, 2, 8, "rated", 120.0, end=121.0, outcome="ok")
    runs, end = [first, again], ended([row])
    assert [(v.invariant, v.jobs) for v in successes_written(runs, end, [], [])] == [("n:success-not-written", {1})]
    assert successes_written(runs, end, [Kill(101.5, 7, "worker-kill9")], []) == []
    assert successes_written(runs, end, [Kill(101.5, 3, "supervisor-sigterm")], []) == []
    assert successes_written(runs, end, [Kill(99.95, 3, "host-kill9")], []) == []  # timed as the run began
    assert successes_written(runs, end, [], [(101.0 + LEASE - 1.0, 101.0 + LEASE + 2.0)]) == []
    assert successes_written(runs, end, [], [(95.0, 100.5)]) == []  # under way as the run began
    # Faults before the run, well after it, or to another worker or supervisor excuse nothing.
    others = [Kill(99.5, 7, "worker-kill9"), Kill(102.0, 8, "worker-kill9"), Kill(101.5, 4, "supervisor-sigterm")]
    assert len(successes_written(runs, end, [*others, Kill(102.0 + LEASE, 7, "worker-kill9")], [])) == 1
    assert len(successes_written(runs, end, [], [(80.0, 82.0), (102.0 + LEASE, 104.0 + LEASE)])) == 1
    ledger = Ledger(tmp_path)
    ledger.note("restart the database, 2.5s", fault=True)
    [(began, back)] = restarts(ledger)
    assert back - began == 2.5
    # A run that raised, or was cancelled, has no success to write.
    raised = Run(1, 1, 7, "rated", 100.0, end=101.0, outcome="raised")
    assert successes_written([raised, again], end, [], []) == []


def test_a_batch_callback_enqueued_but_never_run_is_judged_not_a_crash(tmp_path: Path) -> None:
    # A finished batch of one child fired on_complete as job 3, which had not run at the end:
    # the "after its children" check has no start to compare (whether it should have run is
    # the stuck check's to say).
    child = JobRow(2, "plain", "default", "succeeded", T0, None, None, 1, None, None, "{}")
    fired = JobRow(3, "callback", "default", "pending", T0, None, None, None, None, None, json.dumps(
        {"batch": {"id": 1}, "kind": "on_complete"}
    ))  # fmt: skip
    end = EndState({2: child, 3: fired}, {}, {1: {"finished_at": T0}}, {}, set(), [], {})
    ledger = Ledger(tmp_path, batches={1: {"callbacks": ["on_complete"]}})
    child_run = Run(2, 1, 1, "plain", T0.timestamp(), end=T0.timestamp() + 0.1)
    assert batches([child_run], ledger, end, set()) == []


def test_a_job_whose_last_events_are_still_in_the_outbox_is_not_out_of_order() -> None:
    # Cancelled, reopened by a workflow retry, cancelled again: the second job.cancelled is
    # still in the outbox when the campaign ends (the relay behind), so what arrived ends with
    # job.retrying. That is a delivery still to come, not an order broken.
    arrived = [{"type": kind, "id": str(n), "job": 7} for n, kind in enumerate(["job.enqueued", "job.cancelled"])]
    arrived.append({"type": "job.retrying", "id": "2", "job": 7})
    per_job = {7: arrived}
    assert problems(per_job, {7: "cancelled"}, complete=False, undelivered=frozenset({7})) == []
    assert [job for job, _ in problems(per_job, {7: "cancelled"}, complete=False)] == [7]


def test_a_child_retried_from_the_dead_letters_after_its_batch_fired_is_not_a_late_child(tmp_path: Path) -> None:
    # Child 2 dead-lettered, the batch fired on_complete (job 3, first claimed at +10 s), then
    # an operator retried child 2 from the dead letters (+12 s), and its new run overlapped the
    # callback's (+13 s): a new life, not a child the batch should have waited for.
    child = JobRow(2, "plain", "default", "succeeded", T0, None, None, 1, None, None, "{}")
    fired = JobRow(3, "callback", "default", "succeeded", T0, None, None, None, None, None, json.dumps(
        {"batch": {"id": 1}, "kind": "on_complete"}
    ), attempts=[(1, "succeeded", "owner", T0 + timedelta(seconds=10))])  # fmt: skip
    end = EndState({2: child, 3: fired}, {}, {1: {"finished_at": T0}}, {}, set(), [], {})
    t0 = T0.timestamp()
    runs = [
        Run(2, 1, 1, "plain", t0, end=t0 + 5),
        Run(2, 2, 1, "plain", t0 + 12, end=t0 + 18),
        Run(3, 1, 1, "callback", t0 + 13, end=t0 + 13.1, extra={"batch": 1, "kind": "on_complete"}),
    ]
    retried = Ledger(tmp_path, batches={1: {"callbacks": ["on_complete"]}}, retried={2}, retried_at={2: [t0 + 12]})
    assert batches(runs, retried, end, set()) == []
    never_retried = Ledger(tmp_path, batches={1: {"callbacks": ["on_complete"]}})
    assert [v.invariant for v in batches(runs, never_retried, end, set())] == ["e:callback-before-children-ended"]


def test_a_resume_that_meets_a_database_restart_is_tried_again(sqlite_url: str, tmp_path: Path) -> None:
    """The campaign's own bookkeeping: a pause whose resume failed (the database restarting)
    was forgotten, so the queue stayed paused to the end and every job in it was reported
    stuck (52 violations, PostgreSQL seed 35). Now the queue stays on the list until a
    resume goes through."""
    import random

    import jobsup
    from jobsup.store import faults as injected
    from tests.chaos.faults import Faults
    from tests.chaos.processes import Fleet
    from tests.chaos.sidechannel import Runs

    from helpers import wait_until

    client = jobsup.Client(sqlite_url)
    ledger = Ledger(tmp_path)
    fleet, runs = Fleet(sqlite_url, tmp_path, {}), Runs(tmp_path)
    chaos = Faults(random.Random(1), client, ledger, fleet, runs, {}, tmp_path / "outage", None)
    chaos.pause()
    (queue,) = chaos.paused
    injected.install(client.database.engine, "any", "any:queues@0s+2s")  # the restart, for 2 s
    with pytest.raises(jobsup.JobsupError):
        chaos.resume_due(everything=True)
    looker = jobsup.Client(sqlite_url)  # its own engine: no fault on it
    assert queue in chaos.paused and [q["queue"] for q in looker.queues.list() if q["state"] == "paused"] == [queue]

    def resumed() -> bool:
        try:
            chaos.resume_due(everything=True)
        except jobsup.JobsupError:
            return False
        return True

    wait_until(resumed, timeout=20, what="the resume to go through once the database is back")
    assert chaos.paused == {} and all(q["state"] != "paused" for q in looker.queues.list())
    client.close()
    looker.close()


def test_the_schedule_is_removed_at_quiescence_though_the_database_restarted_last(tmp_path: Path) -> None:
    """The campaign's own bookkeeping: its last fault restarted the private PostgreSQL server,
    and the first call at quiescence (removing the cron schedule) met the connection the
    restart had ended, so the campaign died there with no verdict (CI, seed 12). A call a
    restart may meet is now tried again, as an application would."""
    from tests import pgcluster

    if (problem := pgcluster.unusable()) is not None:
        pytest.fail(problem)  # CI has the binaries: never a silent skip
    import jobsup
    from tests.chaos.campaign import retried
    from tests.chaos.processes import Database

    database = Database("postgresql", tmp_path, own_server=True)
    url = database.create()
    try:
        client = jobsup.Client(url)
        client.add_recurring("chaos-cron", job="cron", cron="* * * * *", payload={}, allow_unknown=True)
        database.restart()
        ledger = Ledger(tmp_path)
        retried("removing the schedule", lambda: client.schedules.remove("chaos-cron"), ledger)
        assert client.schedules.list() == []
        # It did meet the ended connection: the retry is what carried it.
        assert "removing the schedule failed, again: DatabaseUnavailable" in (tmp_path / "operations.log").read_text()
        client.close()
    finally:
        database.drop()


def test_a_child_retried_after_its_batch_fired_is_a_new_life_though_the_callback_was_claimed_later(
    tmp_path: Path,
) -> None:
    # CI, PostgreSQL seed 12: the batch fired when child 2 was dead-lettered (+5 s); the faults
    # retried child 2 (+7 s), whose new run began at +8 s; the callback was first claimed only
    # at +10 s (a loaded host), and ran beside that run. The checker took the callback's claim
    # for the batch's firing, so the new run "began before the batch fired": a false report.
    child = JobRow(2, "plain", "default", "succeeded", T0, None, None, 1, None, None, "{}")
    fired = JobRow(3, "callback", "default", "succeeded", T0, None, None, None, None, None, json.dumps(
        {"batch": {"id": 1}, "kind": "on_complete"}
    ), attempts=[(1, "succeeded", "owner", T0 + timedelta(seconds=10))])  # fmt: skip
    end = EndState({2: child, 3: fired}, {}, {1: {"finished_at": T0 + timedelta(seconds=5)}}, {}, set(), [], {})
    t0 = T0.timestamp()
    runs = [
        Run(2, 1, 1, "plain", t0, end=t0 + 4),
        Run(2, 2, 1, "plain", t0 + 8, end=t0 + 14),
        Run(3, 1, 1, "callback", t0 + 10, end=t0 + 10.1, extra={"batch": 1, "kind": "on_complete"}),
    ]
    retried = Ledger(tmp_path, batches={1: {"callbacks": ["on_complete"]}}, retried={2}, retried_at={2: [t0 + 7]})
    assert batches(runs, retried, end, set()) == []
    # A run of the child that began before the batch fired and outlived the callback's start
    # is still reported.
    early = [*runs[:1], Run(2, 2, 1, "plain", t0 + 3, end=t0 + 14), runs[2]]
    assert [v.invariant for v in batches(early, retried, end, set())] == ["e:callback-before-children-ended"]
    # So is a child retried before the batch fired (+3): it was unfinished when the batch
    # fired (+5), whenever its run began (+8).
    too_soon = Ledger(tmp_path, batches={1: {"callbacks": ["on_complete"]}}, retried={2}, retried_at={2: [t0 + 3]})
    assert [v.invariant for v in batches(runs, too_soon, end, set())] == ["e:callback-before-children-ended"]


def test_a_fleeting_job_purged_before_its_age_or_unfinished_is_reported_one_past_it_is_not(tmp_path: Path) -> None:
    """(r) `fleeting` successes are kept 2 s; the end is read at T0 + 20 s."""
    t0 = T0.timestamp()
    kinds = {1: "fleeting", 2: "fleeting", 3: "fleeting", 4: "fleeting", 5: "fleeting", 6: "plain"}
    ledger = Ledger(tmp_path, jobs=kinds)
    end = EndState({}, {}, {}, {}, set(), [], {}, read_at=t0 + 20)
    runs = [
        Run(1, 1, 1, "fleeting", t0, end=t0 + 5, outcome="ok"),  # seen gone 3 s after: fine
        Run(2, 1, 1, "fleeting", t0, end=t0 + 5, outcome="ok"),  # seen gone 1 s after: early
        Run(4, 1, 1, "fleeting", t0, end=t0 + 1, outcome="ok"),  # its retry raised: not a success
        Run(4, 2, 1, "fleeting", t0 + 2, end=t0 + 3, outcome="raised"),
        Run(5, 1, 1, "fleeting", t0, end=t0 + 1, outcome="ok"),  # then cancelled (its settle lost)
    ]  # job 3 never ran
    seen = Fleeting(gone_at={1: t0 + 8, 2: t0 + 6}, status={5: ("cancelled", t0 + 2)})
    found = {(v.invariant, *v.jobs) for v in retention(runs, ledger, end, seen)}
    assert found == {
        ("r:purged-early", 2),
        ("r:purged-unfinished", 3),
        ("r:purged-unfinished", 4),
        ("r:purged-kept-state", 5),
    }
    assert [(v.invariant, *v.jobs) for v in lost(runs, ledger, end)] == [("g:lost", 6)]  # any other type: lost


def test_fleeting_successes_never_purged_are_reported(tmp_path: Path) -> None:
    t0 = T0.timestamp()
    ledger = Ledger(tmp_path, jobs=dict.fromkeys(range(1, 7), "fleeting"))
    runs = [Run(n, 1, 1, "fleeting", t0, end=t0 + 1, outcome="ok") for n in range(1, 7)]
    kept = {
        n: JobRow(n, "fleeting", "default", "succeeded", T0, None, None, None, None, None, "{}") for n in range(1, 7)
    }
    late = EndState(kept, {}, {}, {}, set(), [], {}, read_at=t0 + 30)
    assert [v.invariant for v in retention(runs, ledger, late, Fleeting())] == ["r:never-purged"]
    soon = EndState(kept, {}, {}, {}, set(), [], {}, read_at=t0 + 5)  # not yet due a purge
    assert retention(runs, ledger, soon, Fleeting()) == []


def test_a_bulk_enqueue_written_in_part_is_reported_whole_or_none_is_not(tmp_path: Path) -> None:
    """(j) a bulk enqueue is all or nothing, whether it returned or raised."""

    def row(job_id: int, tag: str) -> JobRow:
        payload = json.dumps({"s": 0, "bulk": tag})
        return JobRow(job_id, "plain", "default", "succeeded", T0, None, None, None, None, None, payload)

    rows = [row(1, "whole"), row(2, "whole"), row(3, "half"), row(4, "raised-all"), row(5, "raised-all")]
    rows += [row(6, "raised-part"), row(7, "short"), row(8, "short")]
    ledger = Ledger(
        tmp_path,
        bulks={
            "whole": (2, [1, 2]),  # returned, both written: fine
            "half": (2, [3, 9]),  # returned an id with no row of it
            "raised-all": (2, None),  # raised after its commit: all written, fine
            "raised-none": (2, None),  # raised before: none written, fine
            "raised-part": (2, None),  # raised, and one of two written
            "short": (3, [7, 8]),  # returned fewer ids than it was given jobs
        },
    )
    found = sorted((v.invariant, sorted(v.jobs)) for v in bulks(ledger, ended(rows)))
    assert found == [("j:bulk-partial", [6]), ("j:bulk-partial", [7]), ("j:bulk-partial", [9])]


def test_a_worker_that_crashed_is_reported_one_that_logged_a_database_error_is_not() -> None:
    kept = (
        '2026-12-06 22:36:04,469 ERROR [28369] db.error operation=claim worker=default#2 error="cannot reach '
        "the database (2013, 'Lost connection to MySQL server during query')\" retry_in=0.5\n"
        "2026-12-06 22:36:04,479 ERROR [28369] Exception during reset or similar\n"
    )
    crashed = "2026-12-06 22:36:05,001 ERROR [28370] worker.crashed worker=pooled#1 thread=lease exc=KeyError(17)\n"
    assert crashes({"supervisor logs": kept, "events": "worker.crashed"}) == []  # only the logs are read
    found = crashes({"supervisor logs": kept + crashed + kept})
    assert [(v.invariant, v.message) for v in found] == [("m:worker-crashed", crashed.strip())]
