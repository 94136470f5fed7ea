"""The invariants, checked at the end against the side channel, the ledger and the rows.

Times are the side channel's (the host clock of the job functions). A run's end is its
``end`` line, else the last moment it was seen alive (`Run.until`, a lower bound of its
process's death), so every overlap reported really happened. The rate windows are checked on
the claims' own times instead (the database's clock), which is what they promise.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobsup.worker.lease import HOLD_WAITING
from tests.chaos.ledger import Ledger
from tests.chaos.limits import BREAKER, FLEETING_KEPT, LIMITS, POOLED, RATES
from tests.chaos.processes import LEASE, Kill
from tests.chaos.sidechannel import Run
from tests.chaos.state import FINAL, EndState, JobRow

AT_END = 0.0  # a violation found by an end check rather than at a moment of the run


@dataclass
class Violation:
    invariant: str
    at: float  # when it happened (side channel time), for "seconds to find"
    message: str
    jobs: set[int] = field(default_factory=set)


@dataclass
class Fleeting:
    """What the monitor saw of the `fleeting` jobs while the campaign ran: when each was
    first seen gone (when that read had ended: never earlier than the purge), and the last
    status seen of each with when that read began."""

    gone_at: dict[int, float] = field(default_factory=dict)
    status: dict[int, tuple[str, float]] = field(default_factory=dict)


def check(
    runs: list[Run],
    ledger: Ledger,
    end: EndState,
    texts: dict[str, str],
    marker: str,
    unmoved: set[int],
    fleeting: Fleeting | None = None,
    kills: Iterable[Kill] = (),
) -> list[Violation]:
    """Every invariant. `unmoved`: the jobs left unfinished when nothing had moved for the
    quiescent end's stall time (none when it gave up while jobs still finished: slow, not stuck);
    `kills`: the campaign's process faults (`Fleet.kills`)."""
    found: list[Violation] = []
    found += overlapping_runs(runs)
    found += key_limits(runs)
    found += rate_windows(runs, end)
    found += probes(runs)
    slow = {job_id for job_id, job in end.jobs.items() if job.status not in FINAL} - unmoved
    found += batches(runs, ledger, end, slow)
    found += workflows(runs, ledger, end, slow)
    found += triggers(runs, ledger, end)
    found += stuck(end, unmoved)
    found += lost(runs, ledger, end)
    found += attempt_rows(runs, end)
    found += successes_written(runs, end, kills, restarts(ledger))
    found += pool_waits(runs, end)
    found += bulks(ledger, end)
    found += retention(runs, ledger, end, fleeting or Fleeting())
    found += secrets(runs, end, texts, marker)
    found += crashes(texts)
    return sorted(found, key=lambda v: v.at or float("inf"))


def _by(runs: Iterable[Run], attribute: str) -> dict[object, list[Run]]:
    grouped: dict[object, list[Run]] = defaultdict(list)
    for run in runs:
        grouped[getattr(run, attribute)].append(run)
    return grouped


def overlapping_runs(runs: list[Run]) -> list[Violation]:
    """(a) two runs of one job never alive at once."""
    found = []
    for job_id, mine in _by(runs, "job").items():
        for a, b in itertools.combinations(sorted(mine, key=lambda r: r.start), 2):
            if b.start < a.until:
                found.append(
                    Violation(
                        "a:two-runs-at-once",
                        b.start,
                        f"job {job_id}: attempt {b.attempt} (pid {b.pid}) started while attempt {a.attempt} "
                        f"(pid {a.pid}) still ran, for {min(a.until, b.until) - b.start:.2f}s",
                        {job_id},
                    )
                )
    return found


def _most_at_once(mine: list[Run]) -> tuple[int, float, list[Run]]:
    """The most runs alive at one moment (each run alive over [start, until)), when, and which."""
    best: tuple[int, float, list[Run]] = (0, 0.0, [])
    for run in mine:
        alive = [run, *(other for other in mine if other is not run and other.start <= run.start < other.until)]
        if len(alive) > best[0]:
            best = (len(alive), run.start, alive)
    return best


def key_limits(runs: list[Run]) -> list[Violation]:
    """(b) never more runs of one concurrency key alive at once than its limit."""
    found = []
    for key, mine in _by((r for r in runs if r.key), "key").items():
        limit = LIMITS[str(key).split(":", 1)[0]]
        count, at, alive = _most_at_once(mine)
        if count > limit:
            found.append(
                Violation(
                    "b:key-over-limit",
                    at,
                    f"key {key} (limit {limit}) had {count} runs alive at once: jobs {sorted(r.job for r in alive)}",
                    {r.job for r in alive},
                )
            )
    return found


def rate_windows(runs: list[Run], end: EndState) -> list[Violation]:
    """(c) A window counts a start at the claim (docs/how-to/rate-limits.md: it holds for the claims; a call
    follows its claim by the claim's commit and the worker's scheduling delay). So: never
    more claims in any window of the period than the limit, read from the attempts, whose
    `started_at` is the instant the window recorded (the database's clock); and no call kept
    waiting behind another job of its worker after its claim (a batch's job waiting behind a
    slow one did, before claim batches of rate-limited queues became one job: it ran beside
    the next window's starts, uncounted).

    Not a bound in seconds: how long a commit's fsync and a starved process take is the
    host's, not jobsup's (CI at full load, MariaDB seed 13: a call 1.27 s after its claim,
    nothing between them). The largest gap is reported beside the verdict instead. The
    order of calls says "behind" only for workers that run one job at a time, as the
    campaign's `partner` queue does (`partner=1`): a pool's jobs of one claim start one
    after another too, and would need a check of their own."""
    found = []
    for name, (limit, per) in RATES.items():
        claimed_at = claims(end, {name})
        starts = sorted((at, job_id) for (job_id, _), ats in claimed_at.items() for at in ats)
        for index, (first, _) in enumerate(starts):
            inside = [(at, job_id) for at, job_id in starts[index:] if at < first + per]
            if len(inside) > limit:
                found.append(
                    Violation(
                        "c:rate-window",
                        first,
                        f"{name} ({limit}/{per:g}s): {len(inside)} claims within {per:g}s: "
                        f"jobs {[job_id for _, job_id in inside]}",
                        {job_id for _, job_id in inside},
                    )
                )
                break
        by_process: dict[int, list[Run]] = defaultdict(list)
        for run in runs:
            by_process[run.pid].append(run)
        for run in runs:
            if run.name != name:
                continue
            at = own_claim(claimed_at, run)
            if at is None:
                continue
            ahead = [other for other in by_process[run.pid] if at < other.start < run.start]
            if ahead:
                found.append(
                    Violation(
                        "c:rate-late-call",
                        run.start,
                        f"{name} ({limit}/{per:g}s): job {run.job} attempt {run.attempt} called "
                        f"{run.start - at:.2f}s after its claim, behind job(s) "
                        f"{sorted(other.job for other in ahead)} its worker started in between",
                        {run.job, *(other.job for other in ahead)},
                    )
                )
    return found


def claims(end: EndState, names: set[str]) -> dict[tuple[int, int], list[float]]:
    """Every claim of the jobs of types `names`, by job and attempt (the attempt's start, on
    the database's clock): a released one too, whose attempt's row stays; a later claim of
    the job may carry the same attempt number."""
    claimed_at: dict[tuple[int, int], list[float]] = defaultdict(list)
    for job in end.jobs.values():
        if job.name in names:
            for attempt, _, _, at in job.attempts:
                claimed_at[(job.id, attempt)].append(_epoch(at))
    return claimed_at


def own_claim(claimed_at: dict[tuple[int, int], list[float]], run: Run) -> float | None:
    """The run's own claim: the latest of its job and attempt before it started."""
    return max((t for t in claimed_at.get((run.job, run.attempt), ()) if t <= run.start), default=None)


def claim_to_call(runs: list[Run], end: EndState) -> tuple[float, int] | None:
    """The longest a rate-limited job's call came after its claim, and the job: a figure of
    the host's load, printed with the verdict, not judged."""
    claimed = {
        (job.id, attempt): _epoch(at)
        for job in end.jobs.values()
        if job.name in RATES
        for attempt, _, _, at in job.attempts
    }
    gaps = [
        (run.start - claimed[(run.job, run.attempt)], run.job)
        for run in runs
        if (run.job, run.attempt) in claimed and run.start >= claimed[(run.job, run.attempt)]
    ]
    return max(gaps, default=None)


def _epoch(at: datetime) -> float:
    """A stored UTC time as seconds since the epoch (the side channel's clock, on this host)."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def probes(runs: list[Run]) -> list[Violation]:
    """(d) at most one half-open probe of a breaker running at a time."""
    mine = [r for r in runs if r.name == BREAKER and r.extra.get("probe")]
    count, at, alive = _most_at_once(mine)
    if count > 1:
        return [
            Violation(
                "d:two-probes",
                at,
                f"{count} probes of {BREAKER} alive at once: jobs {sorted(r.job for r in alive)}",
                {r.job for r in alive},
            )
        ]
    return []


def _alive_at(runs: list[Run], at: float) -> list[Run]:
    return [r for r in runs if r.start < at < r.until]


def _payload(job: JobRow) -> dict[str, Any]:
    try:
        decoded = json.loads(job.payload)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def batches(runs: list[Run], ledger: Ledger, end: EndState, slow: set[int]) -> list[Violation]:
    """(e) every batch fires each callback it should exactly once (the callback jobs in the
    rows; at most one of them ran), after its children ended. A batch with children still
    finishing when the quiescent end gave up (`slow`) is not judged unfired."""
    found = []
    callbacks: dict[tuple[int, str], set[int]] = defaultdict(set)  # enqueued callback jobs
    ran: dict[tuple[int, str], set[int]] = defaultdict(set)
    first_start: dict[int, float] = {}
    for job in end.jobs.values():
        if job.name == "callback":
            payload = _payload(job)
            callbacks[(payload.get("batch", {}).get("id"), payload.get("kind"))].add(job.id)
    for run in runs:
        if run.name == "callback" and run.extra.get("batch") is not None:
            ran[(run.extra["batch"], run.extra.get("kind"))].add(run.job)
            first_start[run.job] = min(first_start.get(run.job, run.start), run.start)
    children = _by((r for r in runs if end.jobs.get(r.job) and end.jobs[r.job].batch_id), "job")
    for batch_id, given in ledger.batches.items():
        row = end.batches.get(batch_id, {})
        members = [j for j in end.jobs.values() if j.batch_id == batch_id]
        if row.get("finished_at") is None:
            unfinished = [j.id for j in members if j.status not in FINAL]
            if slow & set(unfinished):
                continue
            found.append(
                Violation(
                    "e:batch-never-fired",
                    AT_END,
                    f"batch {batch_id} never fired; unfinished children {unfinished}",
                    set(unfinished),
                )
            )
            continue
        succeeded = all(j.status == "succeeded" for j in members)
        expected = {"on_complete"} | ({"on_success" if succeeded else "on_failure"} & set(given["callbacks"]))
        if ledger.retried & {j.id for j in members}:  # a child retried after the batch fired changes its counts
            either = {"on_success", "on_failure"} & set(given["callbacks"])
            fired_either = sum(len(callbacks.get((batch_id, kind), set())) for kind in either)
            if either and fired_either != 1:
                found.append(
                    Violation(
                        "e:batch-callback-count",
                        AT_END,
                        f"batch {batch_id}: on_success and on_failure ran as {fired_either} jobs (expected 1)",
                        {j.id for j in members},
                    )
                )
            expected |= either
        for kind in given["callbacks"]:
            fired = callbacks.get((batch_id, kind), set())
            if kind in expected - {"on_complete"} and ledger.retried & {j.id for j in members}:
                continue
            if len(ran.get((batch_id, kind), set())) > 1 or not ran.get((batch_id, kind), set()) <= fired:
                found.append(
                    Violation(
                        "e:batch-callback-count",
                        AT_END,
                        f"batch {batch_id}: {kind} ran as jobs {sorted(ran[(batch_id, kind)])}, "
                        f"enqueued as {sorted(fired)}",
                        set(fired),
                    )
                )
            if len(fired) != (1 if kind in expected else 0):
                found.append(
                    Violation(
                        "e:batch-callback-count",
                        AT_END,
                        f"batch {batch_id}: {kind} ran as "
                        f"{len(fired)} jobs {sorted(fired)} (expected {1 if kind in expected else 0})",
                        set(fired),
                    )
                )
            for job_id in fired:
                if job_id not in first_start:
                    continue  # enqueued, never run: "nothing stuck" judges whether it should have
                # A child retried from the dead letters after the batch fired runs again beside
                # the callback as a new life, not as a child the batch should have waited for:
                # its runs that began after such a retry do not count. A retry issued before the
                # batch fired leaves the child unfinished, and the batch must wait for it: those
                # runs count. (When it fired is the batch row's finished_at; the callback's first
                # claim, once used instead, may come seconds later on a loaded host: PostgreSQL
                # seed 12.)
                fired_at = _epoch(row["finished_at"])
                late = [
                    r
                    for m in members
                    for r in children.get(m.id, [])
                    if r.start < first_start[job_id] < r.until
                    and not any(fired_at < at <= r.start for at in ledger.retried_at.get(m.id, ()))
                ]
                if late:
                    found.append(
                        Violation(
                            "e:callback-before-children-ended",
                            first_start[job_id],
                            f"batch {batch_id}: {kind} job {job_id} started while child runs still ran: "
                            f"{sorted(r.job for r in late)}",
                            {job_id, *(r.job for r in late)},
                        )
                    )
    return found


def workflows(runs: list[Run], ledger: Ledger, end: EndState, slow: set[int]) -> list[Violation]:
    """(e) every workflow ends (unless a step was still finishing when the quiescent end gave
    up: `slow`); no step starts while a step it depends on runs."""
    found = []
    by_job = _by(runs, "job")
    for workflow_id, steps in ledger.workflows.items():
        unfinished = [s for s in steps if end.jobs[s].status not in FINAL]
        if slow & set(unfinished):
            pass
        elif unfinished or end.workflows.get(workflow_id, {}).get("finished_at") is None:
            found.append(
                Violation(
                    "e:workflow-not-ended",
                    AT_END,
                    f"workflow {workflow_id} did not end; unfinished steps {unfinished}",
                    set(steps),
                )
            )
        for step in steps:
            for run in by_job.get(step, []):
                for dep in end.deps.get(step, []):
                    busy = _alive_at(by_job.get(dep, []), run.start)
                    if busy:
                        found.append(
                            Violation(
                                "e:step-before-dependency-ended",
                                run.start,
                                f"workflow {workflow_id}: step job {step} attempt {run.attempt} started while its "
                                f"dependency {dep} (attempt {busy[0].attempt}) still ran",
                                {step, dep},
                            )
                        )
    return found


def triggers(runs: list[Run], ledger: Ledger, end: EndState) -> list[Violation]:
    """(e) a trigger on="any" fires exactly once per ended job, after its last run."""
    found = []
    fired: dict[str, set[int]] = defaultdict(set)
    started: dict[int, float] = {}
    for run in runs:
        if run.name == "note":
            fired[run.extra.get("parent")].add(run.job)
            started[run.job] = min(started.get(run.job, run.start), run.start)
    by_job = _by(runs, "job")
    enqueued: dict[int, set[int]] = defaultdict(set)  # parent -> its triggered jobs, in the rows
    for job in end.jobs.values():
        if job.name == "note" and job.parent_id is not None:
            enqueued[job.parent_id].add(job.id)
    for tag, parent in ledger.triggers.items():
        jobs, rows = fired.get(tag, set()), enqueued.get(parent, set())
        if (end.jobs[parent].status in FINAL and len(rows) != 1) or len(jobs) > 1 or not jobs <= rows:
            found.append(
                Violation(
                    "e:trigger-count",
                    AT_END,
                    f"job {parent} ended {end.jobs[parent].status}; its trigger was enqueued as jobs {sorted(rows)} "
                    f"and ran as {sorted(jobs)}",
                    {parent, *jobs, *rows},
                )
            )
        for job_id in jobs:
            busy = _alive_at(by_job.get(parent, []), started[job_id])
            if busy:
                found.append(
                    Violation(
                        "e:trigger-before-parent-ended",
                        started[job_id],
                        f"trigger job {job_id} started while its parent {parent} (attempt {busy[0].attempt}) still ran",
                        {job_id, parent},
                    )
                )
    return found


def stuck(end: EndState, unmoved: set[int]) -> list[Violation]:
    """(f) at the quiescent end every job has ended: the queues are resumed, the outage is
    over, retries are due within a second, so nothing has a documented reason to wait."""
    found = []
    admitted: dict[str, int] = defaultdict(int)
    for job in end.jobs.values():
        if job.concurrency_key and job.status in {"pending", "running"}:
            admitted[job.concurrency_key] += 1
    for job in end.jobs.values():
        if job.status in FINAL:
            continue
        if (
            job.status == "waiting"
            and job.concurrency_key
            and admitted[job.concurrency_key] < (job.concurrency_limit or 1)
        ):
            why = f"waits while its key {job.concurrency_key} has room ({admitted[job.concurrency_key]} admitted)"
            found.append(Violation("f:key-waiter-with-room", AT_END, f"job {job.id} ({job.name}) {why}", {job.id}))
        elif job.id in unmoved:
            found.append(
                Violation(
                    "f:not-ended",
                    AT_END,
                    f"job {job.id} ({job.name}, queue {job.queue}) is still "
                    f"{job.status} at the end (run_at {job.run_at})",
                    {job.id},
                )
            )
    return found


def lost(runs: list[Run], ledger: Ledger, end: EndState) -> list[Violation]:
    """(g) every id enqueue returned is a row; every success was seen returning."""
    found = []
    for job_id in ledger.jobs:
        if job_id not in end.jobs and ledger.jobs[job_id] != "fleeting":  # those: `retention`
            found.append(
                Violation("g:lost", AT_END, f"job {job_id} ({ledger.jobs[job_id]}) is not in the table", {job_id})
            )
    returned = {r.job for r in runs if r.outcome in {"ok", "honoured"}}
    for job in end.jobs.values():
        if job.status == "succeeded" and job.id not in returned:
            found.append(
                Violation(
                    "g:success-never-ran",
                    AT_END,
                    f"job {job.id} ({job.name}) succeeded but no run of it returned",
                    {job.id},
                )
            )
    return found


def attempt_rows(runs: list[Run], end: EndState) -> list[Violation]:
    """(k) the history is every attempt once: each run of a job is an attempt the job's
    history holds (a row written when the attempt ended, or the attempt under way on the job
    row), no attempt ended twice (its number may come back only after a release, which does
    not count), and a job that succeeded ended exactly one attempt so, its last."""
    found = []
    ran: dict[int, set[int]] = defaultdict(set)
    for run in runs:
        ran[run.job].add(run.attempt)
    for job in end.jobs.values():
        numbers = {attempt for attempt, _, _, _ in job.attempts}
        if missing := sorted(ran.get(job.id, set()) - numbers):
            found.append(
                Violation("k:run-without-attempt", AT_END, f"job {job.id} ran as attempts {missing}: no row", {job.id})
            )
        ended = [(attempt, outcome) for attempt, outcome, _, _ in job.attempts if outcome not in (None, "released")]
        twice = sorted(attempt for attempt, count in Counter(a for a, _ in ended).items() if count > 1)
        if twice:
            found.append(
                Violation("k:attempt-ended-twice", AT_END, f"job {job.id}: attempts {twice} ended twice", {job.id})
            )
        succeeded = [attempt for attempt, outcome in ended if outcome == "succeeded"]
        if job.status == "succeeded" and (len(succeeded) != 1 or ended[-1][1] != "succeeded"):
            found.append(
                Violation(
                    "k:success-not-one-attempt",
                    AT_END,
                    f"job {job.id} succeeded, its ended attempts say {ended}",
                    {job.id},
                )
            )
    return found


# Seconds a kill's time may come before its signal takes the process (each is timed just
# before its signal is sent; a host's children were once all timed before the first signal,
# and a worker ran a job in between, in a CI run).
KILL_SLACK = 0.1


def restarts(ledger: Ledger) -> list[tuple[float, float]]:
    """When each restart of the database began and ended (its note is written at the end,
    with how long it took: `Faults.restart`)."""
    found = []
    for at, what in ledger.log:
        took = re.search(r"restart the database, ([0-9.]+)s", what)
        if took:
            found.append((at - float(took.group(1)), at))
    return found


def successes_written(
    runs: list[Run], end: EndState, kills: Iterable[Kill], restarted: Iterable[tuple[float, float]]
) -> list[Violation]:
    """(n) a run that returned has its attempt ended `succeeded`, unless something that may
    lose a success came between its start and a lease after its end: its process killed, its
    supervisor stopped (a grace that ends in a kill), or the database restarted (renewals and
    writes fail; a write retried past its lease is given up). A worker writes a large claim's
    successes behind the claim, read back at the next claim's end (`Settler.write_behind`):
    one sent and never read, or lost on the way, would leave its job to run again, which no
    other invariant reports."""
    kills, restarted = list(kills), list(restarted)
    found = []
    for run in runs:
        if run.outcome != "ok" or run.end is None or run.job not in end.jobs:
            continue
        outcomes = {attempt: outcome for attempt, outcome, _, _ in end.jobs[run.job].attempts}
        if outcomes.get(run.attempt) == "succeeded":
            continue
        # Up to a lease after the run (a write is retried that long), by its worker's death (a
        # host's loss names every pid) or its supervisor's stop (a grace that ends in a kill).
        # A kill is noted just before its signals are sent: a job may still run meanwhile.
        ours = {run.pid, run.extra.get("supervisor")}
        killed = any(run.start - KILL_SLACK <= k.at <= run.end + LEASE and k.pid in ours for k in kills)
        # A restart under way between the run's start and a lease after its end.
        outage = any(began <= run.end + LEASE and ended >= run.start for began, ended in restarted)
        if not killed and not outage:
            found.append(
                Violation(
                    "n:success-not-written",
                    run.end,
                    f"job {run.job} attempt {run.attempt} returned (pid {run.pid}) and nothing stopped its worker, "
                    f"but the attempt ended {outcomes.get(run.attempt)!r}",
                    {run.job},
                )
            )
    return found


# Seconds on top of `HOLD_WAITING` a pool's job may take from its claim's start (the database's
# clock) to its call: the claim's own time (a SQLite claim waiting for the write lock) and
# a loaded host's scheduling (`rate_windows`: 1.27 s was seen at CI's full load). The
# workload's long jobs (6-8 s) keep what waits behind them longer than this, unless given back.
CALL_SLACK = 3.0


def pool_waits(runs: list[Run], end: EndState) -> list[Violation]:
    """(l) a pool's job claimed ahead of its free places waits for one at most `HOLD_WAITING`,
    then is given back (`jobsup.worker.ahead`): every call of a job of a queue that runs
    several at once in every supervisor comes within `HOLD_WAITING` and `CALL_SLACK` of its
    claim (its attempt's start, the database's clock). A job that waited longer would hold
    its lease, and its concurrency key's place, while other workers stood idle."""
    claimed_at = claims(end, POOLED)
    found = []
    for run in runs:
        at = own_claim(claimed_at, run)
        if at is not None and run.start - at > HOLD_WAITING + CALL_SLACK:
            found.append(
                Violation(
                    "l:pool-wait",
                    run.start,
                    f"job {run.job} ({run.name}) attempt {run.attempt} called {run.start - at:.2f}s after its claim",
                    {run.job},
                )
            )
    return found


def bulks(ledger: Ledger, end: EndState) -> list[Violation]:
    """(j) a bulk enqueue is all or nothing: one that returned wrote exactly the jobs whose
    ids it returned, one that raised wrote all of its jobs or none."""
    written: dict[str, set[int]] = defaultdict(set)
    for job in end.jobs.values():
        if job.name == "plain" and (tag := _payload(job).get("bulk")) is not None:
            written[tag].add(job.id)
    found = []
    for tag, (size, ids) in ledger.bulks.items():
        rows = written.get(tag, set())
        if ids is not None and (len(ids) != size or rows != set(ids)):
            found.append(
                Violation(
                    "j:bulk-partial",
                    AT_END,
                    f"bulk {tag} of {size} returned {len(ids)} ids; {len(rows)} rows are its, "
                    f"{len(rows ^ set(ids))} of them or of the ids not both",
                    (rows ^ set(ids)) or set(ids[:1]),
                )
            )
        elif ids is None and len(rows) not in (0, size):
            said = f"bulk {tag} of {size} raised and wrote {len(rows)} of its jobs"
            found.append(Violation("j:bulk-partial", AT_END, said, rows))
    return found


# A job's end is written (the database's clock) after its function returned (the side
# channel's, the same host's): the margin is for the clocks' reads, not for any skew.
CLOCK_MARGIN = 0.25


NEVER_PURGED = 10.0  # seconds: a fleeting success older than this at the end should be gone


def retention(runs: list[Run], ledger: Ledger, end: EndState, seen: Fleeting) -> list[Violation]:
    """(r) a type's own retention, applied by whichever supervisor purges: a `fleeting` job
    (successes kept `FLEETING_KEPT` s) is gone only once it succeeded (its last attempt's
    run returned, and it was not last seen dead-lettered or cancelled, which are kept for
    days), and not before it had been finished that long (measured to when the monitor first
    saw it gone, else to the end's read); and they are purged at all. A job of any other type
    is never gone (`lost`)."""
    last: dict[int, Run] = {}
    for run in runs:
        if run.job not in last or run.attempt >= last[run.job].attempt:
            last[run.job] = run
    found = []
    fleeting = [job_id for job_id, kind in ledger.jobs.items() if kind == "fleeting"]
    for job_id in fleeting:
        if job_id in end.jobs:
            continue
        run = last.get(job_id)
        if run is None or run.outcome not in {"ok", "honoured"} or run.end is None:
            found.append(
                Violation("r:purged-unfinished", AT_END, f"fleeting job {job_id} is gone but never succeeded", {job_id})
            )
            continue
        status, seen_at = seen.status.get(job_id, ("", 0.0))
        if status in {"dead_lettered", "cancelled"} and run.end < seen_at:  # and nothing ran after
            found.append(
                Violation("r:purged-kept-state", AT_END, f"fleeting job {job_id} is gone, last seen {status}", {job_id})
            )
        gone = seen.gone_at.get(job_id, end.read_at)
        if gone - run.end < FLEETING_KEPT - CLOCK_MARGIN:
            found.append(
                Violation(
                    "r:purged-early",
                    gone,
                    f"fleeting job {job_id} was gone {gone - run.end:.2f}s after it returned (kept {FLEETING_KEPT}s)",
                    {job_id},
                )
            )
    due = [
        job_id
        for job_id in fleeting
        if (run := last.get(job_id)) is not None and run.outcome == "ok" and run.end is not None
        and end.read_at - run.end > NEVER_PURGED
    ]  # fmt: skip
    if len(due) >= 5 and all(job_id in end.jobs for job_id in due):
        found.append(
            Violation(
                "r:never-purged",
                AT_END,
                f"{len(due)} fleeting successes older than {NEVER_PURGED:g}s are all kept",
                set(due),
            )
        )
    return found


def secrets(runs: list[Run], end: EndState, texts: dict[str, str], marker: str) -> list[Violation]:
    """(i) the sensitive value is in no table, log line or event; the worker opened it."""
    found = []
    for table, rows in end.tables.items():
        if any(marker in json.dumps(row, default=str) for row in rows):
            found.append(Violation("i:secret-in-table", 0.0, f"the sensitive marker is in clear in table {table}"))
    for where, text in texts.items():
        if marker in text:
            found.append(Violation("i:secret-in-output", 0.0, f"the sensitive marker is in clear in {where}"))
    for run in runs:
        if run.name == "secret" and not run.extra.get("opened"):
            found.append(
                Violation("i:secret-not-opened", run.start, f"job {run.job} did not get its sensitive value", {run.job})
            )
    return found


# The event where the log writes one: after the time, the level and the pid, before its fields
# (not an error text that quotes it).
_CRASHED = re.compile(r"^\S+ \S+ \w+ \[\d+\] worker\.crashed\b.*$", re.MULTILINE)


def crashes(texts: dict[str, str]) -> list[Violation]:
    """(m) no worker crashed: an exception that none of a worker's threads handles (its loop's,
    its settle or lease thread's) ends it with `worker.crashed`. Its jobs come back like those
    of a killed worker, so the other invariants do not see it; no fault of the campaign (kills,
    outages, restarts, hangs) may cause one."""
    logs = texts.get("supervisor logs", "")
    return [Violation("m:worker-crashed", AT_END, line.strip()[:500]) for line in _CRASHED.findall(logs)]
