"""Claim+settle throughput and claim latency of the jobsup store, on SQLite (WAL), PostgreSQL
and MariaDB.

What it measures:

1. Throughput. For each (processes, batch) cell, `processes` real OS processes (forked; each
   opens its own `Database` after the fork) wait on a start barrier, then loop: claim up to
   `batch` jobs with `Store.transitions.claim`, settle them with one
   `Store.transitions.complete`, until the queue is empty or the time budget (`--seconds`)
   ends. jobs/s = jobs settled / wall seconds from the start to the last process stopping;
   the table shows the median of `--repeat` runs. The runs go round the cells in turn, so a
   burst of load from anything else on the machine spreads over all cells. After each run
   the database is checked: every job claimed was settled, no job was claimed twice, and the
   succeeded rows number exactly the jobs settled.
2. The database's ceiling. On PostgreSQL each run is followed by ``../shared/bench/pg_limit.sh
   BATCH CLIENTS SECONDS`` (pgbench doing the least work a claim and a settle need), and the
   table shows jobsup's median as a ratio of pg_limit's median. Target: ratio >= 0.5 with 4
   processes at batch 1 and at batch 10.
3. Claim latency. One process times single claims (batch 1) on two databases, one empty and
   one holding ``--finished-rows`` (10,000,000) finished (succeeded) jobs, alternating
   between them so that both see the same machine. Target: the median with 10M finished
   rows within 1.5x of the empty table's.

Queues are bulk-loaded as copies of one job enqueued through the store, so every row is in
the format the store writes. Run from the repository root::

    .venv/bin/python tests/benchmarks/claim_throughput.py
    .venv/bin/python tests/benchmarks/claim_throughput.py --databases postgresql --processes 4 --batches 1

PostgreSQL must be on 127.0.0.1:5432 (user postgres, trust auth) and MariaDB on
127.0.0.1:3306 (root, no password); the script creates and drops its own databases
(jobsup_bench_*). MariaDB has no pg_limit-like ceiling here. Progress goes to stderr, the results to stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from sqlalchemy import (
    CTE,
    TableClause,
    create_engine,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    table,
    text,
    true,
)

from jobsup.jobtypes import JobType
from jobsup.observe import subscribe_logs_and_metrics
from jobsup.store import migrate
from jobsup.store.builder import build
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.rows import SUCCEEDED as SUCCESS
from jobsup.store.rows import Outcome
from jobsup.store.schema import PENDING, SUCCEEDED, job, job_attempt
from jobsup.store.store import Store

QUEUE = "default"
LEASE = 300.0
NOOP = build(JobType("noop", queue=QUEUE), None, {"priority": 0, "max_attempts": 5})
PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"
MARIADB_SERVER = "mariadb+pymysql://root@127.0.0.1:3306"
PG_LIMIT = Path(__file__).resolve().parents[3] / "shared" / "bench" / "pg_limit.sh"
TARGET_RATIO = 0.5  # of pg_limit, with 4 processes at batch 1 and 10
TARGET_LATENCY_RATIO = 1.5  # 1M finished rows versus an empty table
LATENCY_FINISHED_ROWS = 10_000_000  # the default of --finished-rows
LATENCY_CLAIMS = 1000
LATENCY_WARMUP = 50
LATENCY_PENDING = 1000  # still pending after the last timed claim
START_TIMEOUT = 60.0  # for the processes to open their connections


# -- the databases under test ---------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One database under test, and the few statements that differ between databases."""

    name: str
    url: str
    # A generous guess at the jobs/s of (processes, batch), to size the queue of a run: a
    # run that empties its queue early still measures correctly, only for less time.
    jobs_per_second: Callable[[int, int], int]
    empty_tables: tuple[str, ...]
    # Run after a bulk load. PostgreSQL's autovacuum would analyze the table in production;
    # jobsup never analyzes SQLite, so the benchmark does not either.
    after_load: tuple[str, ...]
    # The database's own jobs/s for (batch, clients, seconds), to compare jobsup with.
    ceiling: Callable[[int, int, float], float] | None


@contextmanager
def sqlite_target(label: str) -> Iterator[Target]:
    with tempfile.TemporaryDirectory(prefix="jobsup_bench_") as folder:
        target = Target(
            name="sqlite",
            url=f"sqlite:///{Path(folder) / label}.db",
            jobs_per_second=lambda processes, batch: 500 + 50 * batch,
            empty_tables=("DELETE FROM jobsup_job_attempt", "DELETE FROM jobsup_job"),
            after_load=(),
            ceiling=None,
        )
        migrate_fresh(target.url)
        yield target


@contextmanager
def postgresql_target(label: str) -> Iterator[Target]:
    name = f"jobsup_bench_{os.getpid()}_{label}"
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        target = Target(
            name="postgresql",
            url=f"{PG_SERVER}/{name}",
            jobs_per_second=lambda processes, batch: min(processes, 2) * (1000 + 150 * batch),
            empty_tables=("TRUNCATE jobsup_job, jobsup_job_attempt",),
            after_load=("VACUUM ANALYZE jobsup_job", "VACUUM ANALYZE jobsup_job_attempt"),
            ceiling=pg_limit,
        )
        migrate_fresh(target.url)
        yield target
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@contextmanager
def mariadb_target(label: str) -> Iterator[Target]:
    name = f"jobsup_bench_{os.getpid()}_{label}"
    admin = create_engine(f"{MARIADB_SERVER}/mysql", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    try:
        target = Target(
            name="mariadb",
            url=f"{MARIADB_SERVER}/{name}",
            jobs_per_second=lambda processes, batch: min(processes, 2) * (1000 + 150 * batch),
            empty_tables=("DELETE FROM jobsup_job_attempt", "DELETE FROM jobsup_job"),
            after_load=("ANALYZE TABLE jobsup_job", "ANALYZE TABLE jobsup_job_attempt"),
            ceiling=None,
        )
        migrate_fresh(target.url)
        yield target
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


TARGETS: dict[str, Callable[[str], AbstractContextManager[Target]]] = {
    "sqlite": sqlite_target,
    "postgresql": postgresql_target,
    "mariadb": mariadb_target,
}


def migrate_fresh(url: str) -> None:
    db = Database(url)
    migrate.upgrade(db)
    db.dispose()


def pg_limit(batch: int, clients: int, seconds: float) -> float:
    """jobs/s of pgbench doing a bare claim and settle (../shared/bench/pg_limit.sh)."""
    command = [str(PG_LIMIT), str(batch), str(clients), str(max(1, round(seconds)))]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    # One line: pg_limit batch=B clients=C jobs_per_s=N
    fields = dict(word.split("=", 1) for word in output.split() if "=" in word)
    return float(fields["jobs_per_s"])


# -- loading jobs ---------------------------------------------------------------------------


def load(db: Database, target: Target, *, pending: int, finished: int = 0) -> None:
    """Empty the tables, then add `finished` succeeded jobs followed by `pending` due ones."""
    with db.transaction() as conn:
        for statement in target.empty_tables:
            conn.execute(text(statement))
    if finished:
        copy_job(db, finished, finished=True)
    copy_job(db, pending, finished=False)
    # VACUUM refuses a transaction block; read() connections run without one.
    with db.read() as conn:
        for statement in target.after_load:
            conn.execute(text(statement))


def copy_job(db: Database, count: int, *, finished: bool) -> None:
    """Insert `count` copies of a job enqueued through the store, in one INSERT ... SELECT,
    so each row has exactly the stored format of a real job (timestamps on SQLite)."""
    [template_id] = Store(db).transitions.enqueue([NOOP])
    template = job.alias("template")
    columns = copied_columns(template, finished=finished)
    rows = (
        select(*columns.values())
        .select_from(template)
        .join(numbers_to(count) if db.dialect.name != "mariadb" else sequence_to(count), true())
        .where(template.c.id == template_id)
    )
    with db.transaction() as conn:
        conn.execute(insert(job).from_select(list(columns), rows))
        conn.execute(delete(job).where(job.c.id == template_id))


COPIED_COLUMNS = (
    *("name", "queue", "priority", "payload", "status", "run_at", "attempts", "max_attempts"),
    *("created_at", "updated_at", "finished_at"),
)


def copied_columns(template: Any, *, finished: bool) -> dict[str, Any]:
    """What a copy of `template` holds: the same job, pending or already succeeded."""
    columns = {name: template.c[name] for name in COPIED_COLUMNS}
    if finished:
        columns.update(status=literal(SUCCEEDED), attempts=literal(1), finished_at=template.c.created_at)
    return columns


def sequence_to(count: int) -> TableClause:
    """1..count from MariaDB's sequence engine (its recursive CTEs stop at max_recursive_iterations)."""
    return table(f"seq_1_to_{count}")


def numbers_to(count: int) -> CTE:
    """1..count as a recursive CTE, which SQLite (no generate_series), PostgreSQL and MariaDB share."""
    numbers = select(literal_column("1").label("i")).cte("numbers", recursive=True)
    return numbers.union_all(select(numbers.c.i + 1).where(numbers.c.i < count))


# -- throughput -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """What one process did in one run."""

    claimed: int
    settled: int
    stopped_at: float  # time.monotonic(), which is system-wide on Linux


@dataclass(frozen=True)
class Run:
    queued: int
    settled: int
    seconds: float
    problems: tuple[str, ...]

    @property
    def jobs_per_second(self) -> float:
        return self.settled / self.seconds


@dataclass
class Cell:
    """The runs of one (database, processes, batch) cell, and the database's ceiling for it."""

    database: str
    processes: int
    batch: int
    runs: list[Run] = field(default_factory=list)
    ceilings: list[float] = field(default_factory=list)  # pg_limit's jobs/s, where measured

    @property
    def jobs_per_second(self) -> float:
        return statistics.median(run.jobs_per_second for run in self.runs)

    @property
    def ceiling(self) -> float | None:
        return statistics.median(self.ceilings) if self.ceilings else None

    @property
    def ratio(self) -> float | None:
        return self.jobs_per_second / self.ceiling if self.ceiling else None


def measure_cells(target: Target, options: argparse.Namespace) -> list[Cell]:
    shapes = [(processes, batch) for batch in options.batches for processes in options.processes]
    cells = [Cell(target.name, processes, batch) for processes, batch in shapes]
    for number in range(1, options.repeat + 1):
        for cell in cells:
            measure_round(target, cell, f"{number}/{options.repeat}", options)
    return cells


def measure_round(target: Target, cell: Cell, number: str, options: argparse.Namespace) -> None:
    """One run of jobsup in `cell`, then one of the database's ceiling where there is one."""
    where = f"{cell.database} processes={cell.processes} batch={cell.batch} run {number}"
    run = throughput_run(target, cell.processes, cell.batch, options.seconds)
    cell.runs.append(run)
    progress(f"{where}: {run.jobs_per_second:.0f} jobs/s, {run.settled} of {run.queued} in {run.seconds:.1f} s")
    if target.ceiling is not None and not options.skip_limit:
        cell.ceilings.append(target.ceiling(cell.batch, cell.processes, options.seconds))
        progress(f"{where}: pg_limit {cell.ceilings[-1]:.0f} jobs/s")


def throughput_run(target: Target, processes: int, batch: int, seconds: float) -> Run:
    """Load a queue, drain it with `processes` processes, and check what they did."""
    db = Database(target.url)
    queued = round(target.jobs_per_second(processes, batch) * seconds)
    load(db, target, pending=queued)
    db.dispose()  # the children must not inherit pooled connections
    context = multiprocessing.get_context("fork")
    ready, start, tallies = context.Barrier(processes + 1), context.Event(), context.SimpleQueue()
    children = [
        context.Process(target=drain, args=(target.url, batch, seconds, ready, start, tallies))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    ready.wait(START_TIMEOUT)
    started = time.monotonic()
    start.set()
    join_all(children, timeout=seconds + START_TIMEOUT)
    results = [tallies.get() for _ in children]
    settled = sum(tally.settled for tally in results)
    problems = check_settled(db, results)
    db.dispose()
    return Run(queued, settled, max(tally.stopped_at for tally in results) - started, problems)


def drain(url: str, batch: int, seconds: float, ready: Any, start: Any, tallies: Any) -> None:
    """One benchmark process: claim a batch, settle it, until the queue is empty or time is up."""
    store = Store(Database(url))  # its own engine, created after the fork
    owner = f"bench-{os.getpid()}"
    has_pending(store)  # connect before the clock starts
    ready.wait(START_TIMEOUT)
    start.wait()
    deadline = time.monotonic() + seconds
    claimed = settled = 0
    while time.monotonic() < deadline:
        jobs = store.transitions.claim(QUEUE, owner, limit=batch, lease=LEASE)
        # An empty claim can mean that other processes hold (PostgreSQL) or have just taken
        # (SQLite) the rows it wanted: stop only once nothing is pending.
        if not jobs and not has_pending(store):
            break
        claimed += len(jobs)
        settled += len(store.transitions.complete([Outcome(claimed_job.held, SUCCESS) for claimed_job in jobs]))
    tallies.put(Tally(claimed, settled, time.monotonic()))


def has_pending(store: Store) -> bool:
    with store.db.read() as conn:
        return conn.execute(select(job.c.id).where(status_is(PENDING)).limit(1)).first() is not None


def join_all(children: Sequence[BaseProcess], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.is_alive():
            child.kill()
            child.join()
    failed = [child.exitcode for child in children if child.exitcode != 0]
    if failed:
        raise RuntimeError(f"benchmark processes failed (exit codes {failed}); see their tracebacks above")


def check_settled(db: Database, tallies: Sequence[Tally]) -> tuple[str, ...]:
    """What the database says went wrong: nothing, when every claim was settled exactly once."""
    claimed = sum(tally.claimed for tally in tallies)
    settled = sum(tally.settled for tally in tallies)
    with db.read() as conn:
        succeeded = conn.execute(select(func.count()).where(status_is(SUCCEEDED))).scalar_one()
        attempts = conn.execute(select(func.count()).select_from(job_attempt)).scalar_one()
        reclaimed = conn.execute(select(func.count()).where(job.c.attempts > 1)).scalar_one()
    problems = []
    if succeeded != settled:
        problems.append(f"{succeeded} jobs succeeded but the processes settled {settled}")
    if claimed != settled:
        problems.append(f"{claimed} jobs claimed but {settled} settled")
    if attempts != claimed:
        problems.append(f"{attempts} attempt rows for {claimed} claims")
    if reclaimed:
        problems.append(f"{reclaimed} jobs were claimed more than once")
    return tuple(problems)


# -- claim latency --------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    database: str
    finished_rows: int
    median_ms: float
    p99_ms: float


def claim_latencies(empty: Target, full: Target, finished_rows: int) -> list[Latency]:
    """Time single claims by one process on `empty` and on `full` (which first gets
    `finished_rows` finished jobs), one claim on each in turn."""
    stores = {0: loaded_store(empty, 0), finished_rows: loaded_store(full, finished_rows)}
    samples: dict[int, list[float]] = {finished: [] for finished in stores}
    for number in range(LATENCY_WARMUP + LATENCY_CLAIMS):
        for finished, store in stores.items():
            elapsed = timed_claim(store)
            if number >= LATENCY_WARMUP:
                samples[finished].append(elapsed)
    for store in stores.values():
        store.db.dispose()
    return [summarise(empty.name, finished, seconds) for finished, seconds in samples.items()]


def loaded_store(target: Target, finished: int) -> Store:
    db = Database(target.url)
    load(db, target, pending=LATENCY_WARMUP + LATENCY_CLAIMS + LATENCY_PENDING, finished=finished)
    return Store(db)


def timed_claim(store: Store) -> float:
    """Seconds one claim of one job took; the job is then settled (not timed)."""
    began = time.perf_counter()
    claimed = store.transitions.claim(QUEUE, "bench-latency", limit=1, lease=LEASE)
    elapsed = time.perf_counter() - began
    if len(claimed) != 1:
        raise RuntimeError(f"a claim returned {len(claimed)} jobs with jobs pending")
    store.transitions.complete([Outcome(claimed[0].held, SUCCESS)])
    return elapsed


def summarise(database: str, finished_rows: int, seconds: Sequence[float]) -> Latency:
    p99 = statistics.quantiles(seconds, n=100)[98]
    latency = Latency(database, finished_rows, statistics.median(seconds) * 1000, p99 * 1000)
    progress(f"{database} claim latency with {finished_rows:,} finished rows: {latency.median_ms:.2f} ms")
    return latency


# -- report ---------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


THROUGHPUT_ROW = "{:<11} {:>9} {:>5} {:>7} {:>7} {:>8} {:>5}"
LATENCY_ROW = "{:<11} {:>13} {:>9} {:>8}"


def print_throughput(cells: Sequence[Cell], options: argparse.Namespace) -> None:
    print(
        f"\nclaim+settle throughput: jobs settled / wall seconds, median of {options.repeat} runs "
        f"of up to {options.seconds:g} s each"
    )
    print(THROUGHPUT_ROW.format("database", "processes", "batch", "queued", "jobs/s", "pg_limit", "ratio"))
    for cell in cells:
        ceiling = f"{cell.ceiling:.0f}" if cell.ceiling else "-"
        ratio = f"{cell.ratio:.2f}" if cell.ratio is not None else "-"
        jobs_per_second = f"{cell.jobs_per_second:.0f}"
        shape = (cell.database, cell.processes, cell.batch, cell.runs[0].queued)
        print(THROUGHPUT_ROW.format(*shape, jobs_per_second, ceiling, ratio))
    for cell in cells:
        for number, run in enumerate(cell.runs, 1):
            for problem in run.problems:
                where = f"{cell.database} processes={cell.processes} batch={cell.batch} run {number}"
                print(f"WARNING {where}: {problem}")


def print_latency(latencies: Sequence[Latency]) -> None:
    print(f"\nclaim latency: {LATENCY_CLAIMS} single claims, one process, >= {LATENCY_PENDING} jobs pending")
    print(LATENCY_ROW.format("database", "finished rows", "median ms", "p99 ms"))
    for latency in latencies:
        rows, median, p99 = f"{latency.finished_rows:,}", f"{latency.median_ms:.2f}", f"{latency.p99_ms:.2f}"
        print(LATENCY_ROW.format(latency.database, rows, median, p99))


def print_targets(cells: Sequence[Cell], latencies: Sequence[Latency]) -> None:
    lines = []
    for cell in cells:
        if cell.ratio is not None and cell.processes == 4 and cell.batch in (1, 10):
            lines.append(
                f"{cell.database} 4 processes batch {cell.batch}: ratio {cell.ratio:.2f}, "
                f"wanted >= {TARGET_RATIO}: {verdict(cell.ratio, TARGET_RATIO)}"
            )
    empty = {latency.database: latency.median_ms for latency in latencies if not latency.finished_rows}
    for latency in latencies:
        if latency.finished_rows and latency.database in empty:
            ratio = latency.median_ms / empty[latency.database]
            met = verdict(TARGET_LATENCY_RATIO, ratio)  # lower is better
            lines.append(
                f"{latency.database} claim median with {latency.finished_rows:,} finished rows: "
                f"{ratio:.2f}x the empty table's, wanted <= {TARGET_LATENCY_RATIO}x: {met}"
            )
    if lines:
        print("\ntargets", *lines, sep="\n")


def verdict(value: float, wanted: float) -> str:
    """Whether `value` reached at least `wanted`, and if not, by what factor it fell short."""
    if value >= wanted:
        return "met"
    return f"MISSED by {wanted - value:.2f} (a factor of {wanted / value:.2f})"


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    layout = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=layout)
    parser.add_argument("--databases", type=names(list(TARGETS)), default=list(TARGETS))
    parser.add_argument("--processes", type=numbers, default=[1, 2, 4])
    parser.add_argument("--batches", type=numbers, default=[1, 10, 100])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is reported")
    parser.add_argument("--seconds", type=float, default=6.0, help="time budget of one run (and of pg_limit)")
    parser.add_argument("--skip-latency", action="store_true", help="leave out the claim latency test")
    parser.add_argument("--skip-throughput", action="store_true", help="only the claim latency test")
    parser.add_argument(
        "--finished-rows",
        type=int,
        default=LATENCY_FINISHED_ROWS,
        help="finished jobs of the latency test's full table",
    )
    parser.add_argument("--skip-limit", action="store_true", help="do not run pg_limit.sh")
    return parser.parse_args(argv)


def names(known: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        chosen = value.split(",")
        unknown = sorted(set(chosen) - set(known))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(known)}")
        return chosen

    return parse


def numbers(value: str) -> list[int]:
    return [int(number) for number in value.split(",")]


def main(argv: Sequence[str] | None = None) -> None:
    subscribe_logs_and_metrics()  # as a worker is: every event goes to the log and the metrics
    options = parse_args(argv)
    began = time.monotonic()
    print(f"jobsup claim benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    cells: list[Cell] = []
    latencies: list[Latency] = []
    for name in options.databases:
        with TARGETS[name]("main") as target:
            if not options.skip_throughput:
                cells += measure_cells(target, options)
            if not options.skip_latency:
                with TARGETS[name]("finished") as full:
                    latencies += claim_latencies(target, full, options.finished_rows)
    print_throughput(cells, options)
    if latencies:
        print_latency(latencies)
    print_targets(cells, latencies)
    print(f"\ntook {time.monotonic() - began:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
