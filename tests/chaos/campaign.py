"""One campaign: start supervisors on a fresh database, run the seeded workload and faults
for a while, bring everything to a quiescent end, stop the supervisors, check.

Quiescent end: the faults stop, paused queues are resumed, the partner outage ends, the
recurring schedule is removed and every role has a live supervisor; then the campaign waits
until every job has ended (or nothing changed for `STALL` seconds), and for the outbox to
drain, before it stops the supervisors and reads the end state.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

import jobsup
from jobsup.store import schema
from tests.chaos import checker, events, report, state
from tests.chaos.faults import Faults
from tests.chaos.ledger import Ledger
from tests.chaos.limits import QUIET
from tests.chaos.monitor import Monitor
from tests.chaos.processes import Database, Fleet
from tests.chaos.sidechannel import ENV, Runs
from tests.chaos.workload import Workload

STALL = 25.0  # seconds without progress before the quiescent end gives up waiting
# The quiescent end waits at most this long, or a third of the campaign's length if longer:
# a limit-1 key's backlog grows with a long run (a soak) faster than a loaded host drains it.
QUIESCE_CAP = 120.0
OUTBOX_WAIT = 20.0  # then events are checked for order only


@dataclass
class Outcome:
    operations: int
    faults: int
    violations: list[checker.Violation] = field(default_factory=list)
    folder: Path | None = None
    t0: float = 0.0


def roles(rng: random.Random) -> dict[str, list[str]]:
    """Four kinds of supervisor: claim batches of 1, of 5-50 and adaptive (the default),
    queues running one job at a time per worker and queues running several (async and
    threads), and claims of 100 on a queue of its own whose worker publishes no events."""
    q = lambda *specs: [part for spec in specs for part in ("--queue", spec)]  # noqa: E731
    return {
        "one": ["--claim-batch", "1", *q("default=2", "keys=2", "partner=1", "fragile=1", "aio=1:6", "fan=1:4")],
        "batch": [
            "--claim-batch",
            str(rng.choice([5, 10, 50])),
            *q("default=1", "keys=2", "partner=1", "fragile=1", "pool=1:4", "fan=1"),
        ],
        "mixed": [*q("default=1", "keys=1", "aio=1:4", "pool=1:4", "fan=1:4")],
        # The quiet queue's only worker, which publishes no events (`limits.QUIET`).
        "behind": ["--claim-batch", "100", *q(f"{QUIET}=1")],
    }


def run(
    kind: str, seconds: float, seed: int, *, keep: bool = False, say: bool = True, restarts: bool = False
) -> Outcome:
    """`restarts`: on PostgreSQL or MariaDB, run a private server and restart it among the faults."""
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix=f"jobsup-chaos-{kind}-{seed}-"))
    (folder / "runs").mkdir()
    marker = f"chaos-secret-{rng.getrandbits(64):016x}"
    key = "k1:" + base64.urlsafe_b64encode(rng.getrandbits(256).to_bytes(32, "big")).decode()
    receiver = events.Receiver()
    env = {
        ENV: str(folder / "runs"),
        "CHAOS_OUTAGE": str(folder / "outage"),
        "CHAOS_SECRET_DIGEST": hashlib.sha256(marker.encode()).hexdigest(),
        "JOBSUP_ENCRYPTION_KEYS": key,
        "JOBSUP_EVENTS_PUBLISHER": receiver.url,
        "JOBSUP_EVENTS_SECRET": "chaos-webhook-secret-of-32-characters-or-more",
    }
    os.environ.update(
        {k: env[k] for k in ("JOBSUP_ENCRYPTION_KEYS", "JOBSUP_EVENTS_PUBLISHER", "JOBSUP_EVENTS_SECRET")}
    )
    if say:
        print(f"chaos: {kind} seed={seed}: making the database and starting supervisors in {folder}", flush=True)
    database = Database(kind, folder, own_server=restarts and kind in ("postgresql", "mariadb"))
    url = database.create()
    fleet = Fleet(url, folder, env)
    client = jobsup.Client(url)
    ledger = Ledger(folder)
    runs = Runs(folder / "runs")
    plan = roles(rng)
    operator = None
    try:
        start_roles(fleet, plan, ledger)
        ledger.note(f"supervisors up: {', '.join(f'{s.role}={s.pid}' for s in fleet.live())}")
        client.add_recurring("chaos-cron", job="cron", cron="* * * * *", payload={"s": 0.1})
        operator = jobsup.Client(url)  # the faults' own, as another process's would be
        workload = Workload(random.Random(rng.getrandbits(64)), client, ledger, marker)
        restart = database.restart if database.server is not None else None
        faults = Faults(
            random.Random(rng.getrandbits(64)), operator, ledger, fleet, runs, plan, folder / "outage", restart
        )
        monitor = Monitor(client, ledger)
        ledger.t0 = time.time()
        if say:
            print(f"chaos: {kind} seed={seed}: running for {seconds:g}s", flush=True)
        deadline = ledger.t0 + seconds
        threads = [
            Loop("workload", workload.step, workload.rng, deadline, ledger, fault=False, pause=(0.05, 0.3)),
            Loop("faults", faults.step, faults.rng, deadline, ledger, fault=True, pause=(0.2, 1.0)),
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            monitor.look()
            time.sleep(0.5)
        for thread in threads:
            thread.join()
            if thread.error is not None:
                raise thread.error
        quiet = quiesce(client, fleet, faults, plan, ledger, monitor, cap=max(QUIESCE_CAP, seconds / 3))
        fleet.stop_all()
        runs.refresh()
        end = state.read(client)
        texts = {"supervisor logs": fleet.logs(), "events": receiver.text()}
        found = checker.check(runs.all(), ledger, end, texts, marker, quiet.unmoved, monitor.fleeting, fleet.kills)
        found += events_problems(receiver, ledger, end, quiet.drained)
        gap = checker.claim_to_call(runs.all(), end)
        if say and gap is not None:
            print(f"chaos: {kind} seed={seed}: longest claim-to-call of a rated job {gap[0]:.2f}s (job {gap[1]})")
        fleeting = [job_id for job_id, kind_of in ledger.jobs.items() if kind_of == "fleeting"]
        if say:  # a retention invariant that saw no purge would prove nothing: say how many
            gone = sum(job_id not in end.jobs for job_id in fleeting)
            print(
                f"chaos: {kind} seed={seed}: {gone} of {len(fleeting)} fleeting jobs purged by their type's retention"
            )
        if say:  # invariant n watches what is written behind a claim: say how often it was
            behind = texts["supervisor logs"].count("behind=True")
            proves = "" if behind or kind != "postgresql" else " (so invariant n proves nothing of them this run)"
            print(f"chaos: {kind} seed={seed}: {behind} settles written behind a claim{proves}")
        monitor.date(found)
        report.write(folder / "report.txt", found, runs.all(), ledger, end, fleet.kills)
        return Outcome(ledger.operations, ledger.faults, found, folder, ledger.t0)
    finally:
        fleet.stop_all()
        fleet.reap_strays()
        receiver.close()
        client.close()
        if operator is not None:
            operator.close()
        if not keep or database.server is not None:  # a private server is never left running
            database.drop()


class Loop(threading.Thread):
    """Draws operations from one source (the workload, or the faults) until the deadline,
    so that a slow operator action (a cancel waiting for a lock) does not stop the workload."""

    def __init__(
        self,
        name: str,
        step: Callable[[], str | None],
        rng: random.Random,
        deadline: float,
        ledger: Ledger,
        *,
        fault: bool,
        pause: tuple[float, float],
    ) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.step, self.rng, self.deadline, self.ledger = step, rng, deadline, ledger
        self.fault, self.pause = fault, pause
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while time.time() < self.deadline:
                try:
                    said = self.step()
                except (jobsup.JobsupError, SQLAlchemyError) as exc:  # a restart of the database, say
                    said = f"{'fault' if self.fault else 'operation'} failed: {type(exc).__name__}: {exc}"[:300]
                if said:
                    self.ledger.note(said, fault=self.fault)
                time.sleep(self.rng.uniform(*self.pause))
        except BaseException as exc:  # handed to the main thread, which raises it
            self.error = exc


def start_roles(fleet: Fleet, plan: dict[str, list[str]], ledger: Ledger) -> None:
    """Start a supervisor of each role and wait for its workers. A role refused at start
    (exit 2: jobsup may come to refuse a claim batch on a rate-limited queue, one way out of
    a known defect) runs on without the rate-limited queue, and the ledger says so."""
    for role, args in plan.items():
        supervisor = fleet.start(role, args)
        deadline = time.time() + 60
        while time.time() < deadline and supervisor.alive() and not supervisor.workers():
            time.sleep(0.2)
        if supervisor.process.poll() is not None and "partner=1" in args:
            plan[role] = [
                part
                for index, part in enumerate(args)
                if part != "partner=1" and args[index + 1 : index + 2] != ["partner=1"]
            ]
            ledger.note(f"supervisor role {role} ended at start ({supervisor.process.poll()}): it runs without partner")
            fleet.start(role, plan[role])


@dataclass
class Quiet:
    drained: bool  # the outbox emptied
    unmoved: set[int]  # unfinished jobs, when nothing changed for `STALL` seconds: stuck, not slow


def resume_all(faults: Faults, ledger: Ledger) -> None:
    """Resume every queue still paused."""
    retried("resume", lambda: faults.resume_due(everything=True), ledger)


def retried(what: str, call: Callable[[], object], ledger: Ledger, *, within: float = 60) -> None:
    """`call()`, again while the database comes back from a restart: a connection pooled
    before the restart fails once (as an application's would), then the pool reconnects."""
    deadline = time.time() + within
    while True:
        try:
            call()
            return
        except (jobsup.JobsupError, SQLAlchemyError) as exc:
            if time.time() >= deadline:
                raise
            ledger.note(f"quiescence: {what} failed, again: {type(exc).__name__}"[:300])
            time.sleep(0.5)


def quiesce(
    client: jobsup.Client,
    fleet: Fleet,
    faults: Faults,
    plan: dict[str, list[str]],
    ledger: Ledger,
    monitor: Monitor,
    *,
    cap: float,
) -> Quiet:
    ledger.note("quiescence: faults stop")
    resume_all(faults, ledger)
    faults.end_outage()
    retried("removing the schedule", lambda: client.schedules.remove("chaos-cron"), ledger)
    for role, args in plan.items():
        if not fleet.live(role):
            fleet.start(role, args)
    started = last_change = time.time()
    left: dict[int, Any] = {}
    while time.time() - started < cap and time.time() - last_change < STALL:
        with client.database.read() as conn:
            job = schema.job
            rows = conn.execute(
                select(job.c.id, job.c.status, job.c.attempts, job.c.updated_at).where(job.c.status.not_in(state.FINAL))
            )
            now = {row.id: tuple(row) for row in rows}
        if not now:
            left = now
            break
        if now != left:
            left, last_change = now, time.time()
        monitor.look()
        time.sleep(1)
    settled = time.time() - started
    # Stuck only when nothing moved for the stall time; when the cap ends the wait while jobs
    # still finish, the host was too slow for the workload, which says nothing of jobsup.
    unmoved = set(left) if time.time() - last_change >= STALL else set()

    def outbox() -> int:
        with client.database.read() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.outbox)).scalar() or 0)

    drained = events.wait_drained(outbox, OUTBOX_WAIT)
    left_over = ", ".join(f"{job_id}:{row[1]}" for job_id, row in sorted(left.items())[:20])
    judged = "all ended" if not left else "stuck" if unmoved else "still finishing at the cap: not judged"
    ledger.note(
        f"quiescence: {len(left)} jobs unfinished after {settled:.0f}s, {judged} ({left_over}); "
        f"outbox drained={drained} after {time.time() - started - settled:.0f}s more"
    )
    return Quiet(drained, unmoved)


def events_problems(
    receiver: events.Receiver, ledger: Ledger, end: state.EndState, drained: bool
) -> list[checker.Violation]:
    """(h); when the outbox did not drain in time, only the order of what arrived is checked."""
    statuses = {job_id: end.jobs[job_id].status for job_id in ledger.jobs if end.jobs.get(job_id)}
    statuses = {job_id: status for job_id, status in statuses.items() if status in state.FINAL}
    # The quiet queue's worker publishes no events: its jobs' ends never reach the outbox, but
    # what others published of them (the enqueue first) still must, and nothing of its own.
    quiet = {job_id for job_id in statuses if end.jobs[job_id].queue == QUIET}
    statuses = {job_id: status for job_id, status in statuses.items() if job_id not in quiet}
    job_column = list(schema.outbox.columns.keys()).index("job_id")
    undelivered = frozenset(row[job_column] for row in end.tables.get(schema.outbox.name, []))
    per_job = receiver.per_job()
    found = [
        checker.Violation("h:events", checker.AT_END, f"job {job_id}: {what}", {job_id})
        for job_id, what in events.problems(per_job, statuses, complete=drained, undelivered=undelivered)
    ]
    for job_id in sorted(quiet):
        kinds = [event["type"] for event in per_job.get(job_id, [])]
        if ((kinds or drained) and (not kinds or kinds[0] != "job.enqueued")) or "job.succeeded" in kinds:
            said = f"job {job_id} (queue {QUIET}, its worker publishes nothing): events {kinds[:5]}"
            found.append(checker.Violation("h:events", checker.AT_END, said, {job_id}))
    return found


def cleanup(outcome: Outcome) -> None:
    if outcome.folder is not None and not outcome.violations:
        shutil.rmtree(outcome.folder, ignore_errors=True)
