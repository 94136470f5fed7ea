"""Claim latency on PostgreSQL while the retention step purges 1,000,000 finished jobs.

What it measures:

1. Setup. A fresh database (jobsup_bench_retention, dropped at the end) is migrated, then
   bulk-loaded with INSERT ... SELECT over generate_series: `--finished` succeeded jobs that
   finished 30 days ago, each with its attempt row (outcome 'succeeded'), followed by a pool
   of `--pending` due jobs, then VACUUM ANALYZE. The rows are copies of one job enqueued
   through the store, so they are in the format the store writes.
2. Baseline. `--claimers` real OS processes (forked; each opens its own `Database` after the
   fork) loop: claim one job (`Store.transitions.claim`, batch 1, lease 300 s), settle it
   with `Store.transitions.complete`. Each claim is timed with time.perf_counter. After
   `--warmup` seconds the claims of the next `--seconds` seconds are kept. No purge runs.
3. With purge. The same claimers again; after the same warmup another process loops
   `PurgeFinished(store, {"succeeded": 7 days}, batch=--batch, max_batches=--max-batches)
   .run_once()` (with `--pause` seconds between ticks) until a tick purges nothing or
   `--purge-timeout` passes. The claims started while the purge ran are kept (and at least
   `--seconds` seconds of them: the claimers run on after a short purge).
4. Both phases sample pg_stat_activity every `--sample` seconds (active backends of the
   bench database and autovacuum workers, by what they run and what they wait on), and
   record WAL written, checkpoints and blocks read, to explain a latency difference.

The report gives claim latency p50/p95/p99/max (ms) and counts of both phases, the ratio
p99 (with purge) / p99 (baseline), target <= 2.0, and the purge's duration, rows and rows/s.
Afterwards the database is checked: no succeeded job older than the retention age is left,
no attempt row of a deleted job is left, and every claim was settled exactly once. Run from
the repository root::

    .venv/bin/python tests/benchmarks/retention_purge.py
    .venv/bin/python tests/benchmarks/retention_purge.py --claimers 4 --seconds 30

PostgreSQL must be on 127.0.0.1:5432 (user postgres, trust auth). Progress goes to stderr,
the results to stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from claim_throughput import LEASE, NOOP, PG_SERVER, QUEUE, has_pending, join_all  # the same job and queue
from sqlalchemy import (
    Engine,
    Interval,
    create_engine,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    text,
    true,
)

from jobsup.observe import subscribe_logs_and_metrics
from jobsup.store import migrate
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.rows import SUCCEEDED as SUCCESS
from jobsup.store.rows import Outcome
from jobsup.store.schema import SUCCEEDED, job, job_attempt
from jobsup.store.store import Store
from jobsup.supervisor.maintenance import PurgeFinished

DATABASE = "jobsup_bench_retention"
URL = f"{PG_SERVER}/{DATABASE}"
RETAIN_SECONDS = 7 * 86400.0
FINISHED_AGE = "30 days"
TARGET_RATIO = 2.0  # p99 with the purge over p99 without, at most
START_TIMEOUT = 60.0  # for the processes to open their connections


# -- the database ---------------------------------------------------------------------------


@contextmanager
def fresh_database() -> Iterator[str]:
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {DATABASE}"))
    try:
        db = Database(URL)
        migrate.upgrade(db)
        db.dispose()
        yield URL
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))
        admin.dispose()


def load(db: Database, *, finished: int, pending: int) -> None:
    """`finished` succeeded jobs of 30 days ago with their attempt rows, then `pending` due jobs."""
    began = time.monotonic()
    copy_job(db, finished, finished=True)
    with db.transaction() as conn:
        attempts = select(
            job.c.id,
            literal(1),
            literal("bench-loader"),
            job.c.finished_at - interval("1 second"),
            job.c.finished_at,
            literal("succeeded"),
        ).where(status_is(SUCCEEDED))
        columns = ["job_id", "attempt", "owner", "started_at", "finished_at", "outcome"]
        conn.execute(insert(job_attempt).from_select(columns, attempts))
    progress(f"loaded {finished:,} succeeded jobs and their attempts in {time.monotonic() - began:.0f} s")
    copy_job(db, pending, finished=False)
    # VACUUM refuses a transaction block; read() connections run without one.
    with db.read() as conn:
        conn.execute(text("VACUUM ANALYZE jobsup_job"))
        conn.execute(text("VACUUM ANALYZE jobsup_job_attempt"))
    progress(f"loaded {pending:,} pending jobs and vacuumed; {time.monotonic() - began:.0f} s in all")


def copy_job(db: Database, count: int, *, finished: bool) -> None:
    """Insert `count` copies of a job enqueued through the store in one INSERT ... SELECT over
    generate_series. Finished copies succeeded 30 days ago, one millisecond apart in id order."""
    [template_id] = Store(db).transitions.enqueue([NOOP])
    template = job.alias("template")
    numbers = func.generate_series(1, count).table_valued("i").render_derived()
    names = ("name", "queue", "priority", "payload", "status", "run_at", "attempts", "max_attempts")
    columns: dict[str, Any] = {name: template.c[name] for name in (*names, "created_at", "updated_at")}
    if finished:
        at = template.c.created_at - interval(FINISHED_AGE) - (count - numbers.c.i) * interval("1 millisecond")
        columns.update(
            status=literal(SUCCEEDED),
            attempts=literal(1),
            run_at=at,
            created_at=at,
            updated_at=at,
            finished_at=at,
        )
    rows = (
        select(*columns.values())
        .select_from(template)
        .join(numbers, true())
        .where(template.c.id == template_id)
        .order_by(numbers.c.i)
    )
    with db.transaction() as conn:
        conn.execute(insert(job).from_select(list(columns), rows))
        conn.execute(delete(job).where(job.c.id == template_id))


def interval(value: str) -> Any:
    return literal_column(f"interval '{value}'", type_=Interval)


# -- the processes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Claims:
    """What one claimer did: each claim's start (time.monotonic) and seconds taken."""

    started: list[float]
    seconds: list[float]
    claimed: int
    settled: int
    ran_dry: bool


@dataclass(frozen=True)
class Purge:
    started: float
    ended: float
    purged: int
    ticks: list[float]  # seconds of each run_once
    finished: bool  # a tick found nothing left

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def claimer(url: str, ready: Any, start: Any, stop: Any, results: Any) -> None:
    """Claim one job, settle it, until told to stop; time every claim."""
    store = Store(Database(url))  # its own engine, created after the fork
    owner = f"bench-{os.getpid()}"
    has_pending(store)  # connect before the clock starts
    ready.wait(START_TIMEOUT)
    start.wait()
    started: list[float] = []
    seconds: list[float] = []
    claimed = settled = 0
    ran_dry = False
    while not stop.is_set():
        at = time.monotonic()
        began = time.perf_counter()
        jobs = store.transitions.claim(QUEUE, owner, limit=1, lease=LEASE)
        elapsed = time.perf_counter() - began
        if not jobs:
            if not has_pending(store):
                ran_dry = True
                break
            continue  # another claimer held the row it wanted; not a claim, not timed
        started.append(at)
        seconds.append(elapsed)
        claimed += len(jobs)
        settled += len(store.transitions.complete([Outcome(claimed_job.held, SUCCESS) for claimed_job in jobs]))
    results.put(Claims(started, seconds, claimed, settled, ran_dry))
    store.db.dispose()


def purger(url: str, options: argparse.Namespace, ready: Any, go: Any, results: Any) -> None:
    """Run the retention step, tick after tick, until it finds nothing left or time is up."""
    store = Store(Database(url))
    has_pending(store)
    step = PurgeFinished(store, {SUCCEEDED: RETAIN_SECONDS}, batch=options.batch, max_batches=options.max_batches)
    ready.wait(START_TIMEOUT)
    go.wait()
    started = time.monotonic()
    deadline = started + options.purge_timeout
    purged, finished = 0, False
    ticks: list[float] = []
    while time.monotonic() < deadline:
        began = time.perf_counter()
        count = step.run_once()
        ticks.append(time.perf_counter() - began)
        purged += count
        if not count:
            finished = True
            break
        if options.pause:
            time.sleep(options.pause)
    results.put(Purge(started, time.monotonic(), purged, ticks, finished))
    store.db.dispose()


# -- what the server was doing --------------------------------------------------------------

ACTIVITY = text(
    """
    SELECT backend_type, wait_event_type, wait_event, query
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND state = 'active'
      AND (datname = current_database() OR backend_type = 'autovacuum worker')
    """
)
COUNTERS = text(
    """
    SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal,
           (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) AS checkpoints,
           (SELECT buffers_checkpoint + buffers_clean + buffers_backend FROM pg_stat_bgwriter) AS written,
           (SELECT blks_read FROM pg_stat_database WHERE datname = current_database()) AS blocks_read
    """
)
KINDS = (  # (text in the query, what the backend is doing), first match wins
    ("candidates", "claim"),
    ("DELETE FROM jobsup_job_attempt", "purge: delete attempts"),
    ("DELETE FROM jobsup_job", "purge: delete jobs"),
    ("ORDER BY jobsup_job.finished_at", "purge: select ids"),
    ("changed", "settle"),
    ("LIMIT", "has_pending"),
    ("COMMIT", "purge: commit"),  # only the purge runs transactions; claims and settles autocommit
)


def kind_of(backend_type: str, query: str) -> str:
    if backend_type == "autovacuum worker":
        return "autovacuum"
    return next((kind for needle, kind in KINDS if needle in query), "other")


@dataclass
class Server:
    """pg_stat_activity samples and counter deltas over one phase."""

    samples: int = 0
    activity: Counter[tuple[str, str]] = field(default_factory=Counter)
    counters: dict[str, int] = field(default_factory=dict)

    def sample(self, engine: Engine) -> None:
        with engine.connect() as conn:
            rows = conn.execute(ACTIVITY).all()
        self.samples += 1
        for backend_type, wait_type, wait_event, query in rows:
            wait = f"{wait_type}:{wait_event}" if wait_type else "CPU (no wait)"
            self.activity[(kind_of(backend_type, query or ""), wait)] += 1

    def count(self, engine: Engine, *, end: bool) -> None:
        with engine.connect() as conn:
            now = {key: int(value) for key, value in conn.execute(COUNTERS).one()._mapping.items()}
        self.counters = {key: now[key] - self.counters.get(key, 0) for key in now} if end else now


# -- a phase --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    latencies: list[float]  # seconds, claims started in the window
    window: float  # seconds
    tallies: list[Claims]
    purge: Purge | None
    server: Server

    @property
    def claimed(self) -> int:
        return sum(tally.claimed for tally in self.tallies)

    @property
    def settled(self) -> int:
        return sum(tally.settled for tally in self.tallies)

    @property
    def ran_dry(self) -> bool:
        return any(tally.ran_dry for tally in self.tallies)

    def percentile(self, p: int) -> float:
        return statistics.quantiles(self.latencies, n=100)[p - 1] * 1000

    @property
    def p99(self) -> float:
        return self.percentile(99)


def run_phase(name: str, url: str, options: argparse.Namespace, *, purge: bool) -> Phase:
    context = multiprocessing.get_context("fork")
    parties = options.claimers + (2 if purge else 1)
    ready, start, stop, go = context.Barrier(parties), context.Event(), context.Event(), context.Event()
    claims, purges = context.SimpleQueue(), context.SimpleQueue()
    children = [
        context.Process(target=claimer, args=(url, ready, start, stop, claims)) for _ in range(options.claimers)
    ]
    if purge:
        children.append(context.Process(target=purger, args=(url, options, ready, go, purges)))
    for child in children:
        child.start()
    engine = create_engine(url, isolation_level="AUTOCOMMIT", pool_size=1)  # after the fork
    server = Server()
    ready.wait(START_TIMEOUT)
    start.set()
    progress(f"{name}: {options.claimers} claimers started, {options.warmup:g} s warmup")
    time.sleep(options.warmup)
    server.count(engine, end=False)
    window_start = time.monotonic()
    go.set()
    result: Purge | None = None
    wanted = window_start + options.seconds
    purging = children[-1]
    while True:
        server.sample(engine)
        if purge and result is None and not purges.empty():
            result = purges.get()
            progress(f"{name}: the purge took {result.seconds:.1f} s for {result.purged:,} rows")
        elif purge and result is None and not purging.is_alive():
            stop.set()
            raise RuntimeError(f"the purge process failed (exit code {purging.exitcode}); see its traceback above")
        if time.monotonic() >= wanted and (not purge or result is not None):
            break
        time.sleep(options.sample)
    window_end = result.ended if result is not None else time.monotonic()
    server.count(engine, end=True)
    stop.set()
    tallies = [claims.get() for _ in range(options.claimers)]
    join_all(children, timeout=START_TIMEOUT)
    engine.dispose()
    kept = [
        seconds
        for tally in tallies
        for at, seconds in zip(tally.started, tally.seconds, strict=True)
        if window_start <= at < window_end
    ]
    phase = Phase(name, kept, window_end - window_start, tallies, result, server)
    progress(f"{name}: {len(kept):,} claims in {phase.window:.1f} s, p99 {phase.p99:.2f} ms")
    return phase


# -- checks ---------------------------------------------------------------------------------


def check(url: str, phases: Sequence[Phase], finished: int) -> list[str]:
    """What the database says went wrong: nothing, when the purge left no old succeeded job and
    no orphan attempt, and every claim was settled once."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        old = conn.execute(
            select(func.count()).where(
                status_is(SUCCEEDED), job.c.finished_at < func.now() - interval(f"{RETAIN_SECONDS:.0f} seconds")
            )
        ).scalar_one()
        orphans = conn.execute(
            text(
                "SELECT count(*) FROM jobsup_job_attempt a"
                " WHERE NOT EXISTS (SELECT 1 FROM jobsup_job j WHERE j.id = a.job_id)"
            )
        ).scalar_one()
        succeeded = conn.execute(select(func.count()).where(status_is(SUCCEEDED))).scalar_one()
        attempts = conn.execute(select(func.count()).select_from(job_attempt)).scalar_one()
        reclaimed = conn.execute(select(func.count()).where(job.c.attempts > 1)).scalar_one()
    engine.dispose()
    claimed = sum(phase.claimed for phase in phases)
    settled = sum(phase.settled for phase in phases)
    purged = sum(phase.purge.purged for phase in phases if phase.purge is not None)
    lines = [
        f"succeeded jobs older than the retention age left: {old} (wanted 0)",
        f"attempt rows of deleted jobs left: {orphans} (wanted 0)",
        f"rows purged: {purged:,} of {finished:,} loaded",
        f"claimed {claimed:,}, settled {settled:,}; succeeded rows now {succeeded:,}, attempt rows {attempts:,}",
        f"jobs claimed more than once: {reclaimed}",
    ]
    problems = []
    if old:
        problems.append(f"{old} old succeeded jobs were not purged")
    if orphans:
        problems.append(f"{orphans} attempt rows of deleted jobs remain")
    if purged != finished:
        problems.append(f"purged {purged} rows, loaded {finished}")
    if claimed != settled or succeeded != settled or attempts != claimed:
        problems.append("claims, settles, succeeded rows and attempt rows disagree")
    if reclaimed:
        problems.append(f"{reclaimed} jobs were claimed more than once")
    return lines + [f"PROBLEM: {problem}" for problem in problems]


# -- report ---------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


LATENCY_ROW = "{:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}"


def print_latency(phases: Sequence[Phase], options: argparse.Namespace) -> None:
    print(f"\nclaim latency: batch 1, {options.claimers} claimer processes, claims started in the window")
    print(LATENCY_ROW.format("phase", "claims", "seconds", "claims/s", "p50 ms", "p95 ms", "p99 ms", "max ms"))
    for phase in phases:
        cells = (f"{phase.percentile(p):.2f}" for p in (50, 95, 99))
        rate = f"{len(phase.latencies) / phase.window:.0f}"
        top = f"{max(phase.latencies) * 1000:.1f}"
        print(LATENCY_ROW.format(phase.name, f"{len(phase.latencies):,}", f"{phase.window:.1f}", rate, *cells, top))
    baseline = phases[0].p99
    for phase in phases:
        slow = sum(1 for seconds in phase.latencies if seconds * 1000 > 2 * baseline)
        share = slow / len(phase.latencies)
        print(f"{phase.name}: {slow:,} claims ({share:.2%}) slower than 2x the baseline p99 ({2 * baseline:.2f} ms)")
        if phase.ran_dry:
            print(f"WARNING {phase.name}: the pending pool ran dry; raise --pending")


def print_purge(purge: Purge, options: argparse.Namespace) -> None:
    ticks = sorted(purge.ticks)
    print(f"\npurge: PurgeFinished batch={options.batch} max_batches={options.max_batches} pause={options.pause:g} s")
    state = "finished" if purge.finished else f"STOPPED after --purge-timeout {options.purge_timeout:g} s"
    print(
        f"rows deleted: {purge.purged:,} in {purge.seconds:.1f} s ({purge.purged / purge.seconds:,.0f} rows/s), {state}"
    )
    print(
        f"ticks: {len(ticks)}, seconds per tick median {statistics.median(ticks):.2f}, max {ticks[-1]:.2f}"
        f" ({options.max_batches} batches of {options.batch} a tick)"
    )


def print_server(phases: Sequence[Phase]) -> None:
    print("\nserver during each window: WAL written, checkpoints, buffers written, blocks read")
    for phase in phases:
        counters = phase.server.counters
        print(
            f"{phase.name}: WAL {counters['wal'] / 2**20:,.0f} MB, checkpoints {counters['checkpoints']},"
            f" buffers written {counters['written']:,}, blocks read {counters['blocks_read']:,}"
        )
    print("\npg_stat_activity: active backends seen per sample, by what they ran and waited on")
    for phase in phases:
        server = phase.server
        print(f"{phase.name} ({server.samples} samples):")
        for (kind, wait), seen in sorted(server.activity.items(), key=lambda item: (item[0][0], -item[1])):
            print(f"  {kind:<24} {wait:<32} {seen / server.samples:6.2f}")


def print_target(phases: Sequence[Phase]) -> None:
    baseline, purging = phases
    ratio = purging.p99 / baseline.p99
    met = "met" if ratio <= TARGET_RATIO else f"MISSED by {ratio - TARGET_RATIO:.2f} (a factor of {ratio / 2:.2f})"
    print("\ntarget")
    print(
        f"claim p99 with the purge / without: {purging.p99:.2f} / {baseline.p99:.2f} ms = {ratio:.2f}x,"
        f" wanted <= {TARGET_RATIO}x: {met}"
    )


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    layout = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=layout)
    parser.add_argument("--finished", type=int, default=1_000_000, help="succeeded jobs to purge")
    parser.add_argument("--pending", type=int, default=200_000, help="pending jobs for the claimers")
    parser.add_argument("--claimers", type=int, default=2, help="claimer processes")
    parser.add_argument("--seconds", type=float, default=20.0, help="the baseline window, and the least with purge")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of claims not kept, each phase")
    parser.add_argument("--batch", type=int, default=1000, help="PurgeFinished batch")
    parser.add_argument("--max-batches", type=int, default=20, help="PurgeFinished max_batches (a tick)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between purge ticks")
    parser.add_argument("--purge-timeout", type=float, default=300.0, help="stop the purge after this long")
    parser.add_argument("--sample", type=float, default=0.25, help="seconds between pg_stat_activity samples")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    subscribe_logs_and_metrics()  # as a worker is: every event goes to the log and the metrics
    options = parse_args(argv)
    began = time.monotonic()
    print(f"jobsup retention purge benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    with fresh_database() as url:
        db = Database(url)
        with db.read() as conn:
            settings = {
                name: conn.execute(text(f"SHOW {name}")).scalar_one()
                for name in ("server_version", "shared_buffers", "autovacuum", "synchronous_commit", "max_wal_size")
            }
        print("postgresql " + ", ".join(f"{name}={value}" for name, value in settings.items()))
        load(db, finished=options.finished, pending=options.pending)
        db.dispose()  # the children must not inherit pooled connections
        phases = [
            run_phase("baseline", url, options, purge=False),
            run_phase("with purge", url, options, purge=True),
        ]
        checks = check(url, phases, options.finished)
    print_latency(phases, options)
    purge = phases[1].purge
    assert purge is not None
    print_purge(purge, options)
    print_server(phases)
    print("\nchecks", *checks, sep="\n")
    print_target(phases)
    print(f"\ntook {time.monotonic() - began:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
