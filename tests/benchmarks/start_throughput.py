"""End-to-end figures of the real `jobsup start` command: throughput, idle latency and memory.

Everything goes through the installed `jobsup` command (a subprocess in its own session,
stopped with SIGTERM), on SQLite (WAL, a temporary file) and PostgreSQL (a fresh database
``jobsup_bench_start`` on 127.0.0.1:5432, user postgres, trust auth; dropped afterwards). The
jobs are registered in a small app module that the script writes to a temporary folder at
run time and hands to the supervisor with ``--app`` and ``PYTHONPATH``.

What it measures:

1. Throughput. Per cell (database, workers, claim batch): a fresh database gets its schema
   from ``jobsup db upgrade``, then ``--jobs`` (20,000) no-op jobs from
   ``Client.enqueue_many`` (on PostgreSQL followed by VACUUM ANALYZE, as autovacuum would do
   soon after such a load), and only then is ``jobsup start --queue bench=WORKERS
   --claim-batch BATCH --poll-interval 100ms --no-migrate`` started. The script polls the
   count of succeeded jobs every 0.2 s until all have succeeded, then stops the supervisor.
   jobs/s = jobs / (max(jobsup_job.finished_at) - min(jobsup_job_attempt.started_at)), read
   from the database, so process start-up and the poll do not count. The database is then
   checked: every job succeeded at its first attempt. Beside it: CPU milliseconds per job
   of the workers, the supervisor, the PostgreSQL server's processes and the rest of the
   machine, and how busy the machine was, over the part of the run between the first and
   the last poll; on PostgreSQL also the transactions committed and the WAL written per job. On
   PostgreSQL every run is followed by ``../shared/bench/pg_limit.sh BATCH WORKERS
   8`` (pgbench doing the least work a claim and a settle need) and jobsup's figure is
   shown as a ratio of it (each run's figure over the pg_limit run right after it; the
   median with min-max). Targets: ``TARGET_RATIOS``. With ``--repeat N`` the runs go round
   all cells N times and the table shows the medians.
2. Idle latency: from ``time.time()`` taken as the ``Client.enqueue`` call returns (and,
   beside it, just before the call) to ``time.time()`` taken by the job function itself as
   its first act (it writes it to a file named by the job id). One idle worker, the default
   poll interval (PostgreSQL: LISTEN/NOTIFY wakes the worker, 5 s poll as fallback; SQLite:
   a FIFO poke, 1 s poll as fallback). Jobs go one at a time: enqueue, wait until the job has
   succeeded, then wait a random idle gap before the next, so the worker is idle in its
   wait when a job arrives (without the gap the next job would often be found by the claim
   the worker makes straight after finishing the previous one). On SQLite the gap is spread
   over a whole poll interval, so jobs arrive at every phase of the poll. The first
   ``LATENCY_WARMUP`` jobs are not counted. Shown from the enqueue call returning (and from the
   call). Targets: PostgreSQL p50 < 2.5 ms and p99 < 10 ms; SQLite p50 < 20 ms, p99 < 60 ms.
3. Memory. ``jobsup start --queue bench=4`` with no jobs: once its 4 workers are idle, RSS
   and PSS of the supervisor and of each worker (the supervisor's children) from
   /proc/PID/smaps_rollup. Target: supervisor + 4 idle workers under 150 MB PSS together.

``--profile PATH`` adds an unmeasured PostgreSQL run (4 workers, claim batch 1 or
``--profile-batch``) during which py-spy (``.venv/bin/pip install py-spy``) records one
worker for ``--profile-seconds``, idle frames included (so time waiting for the database
shows): a flame graph goes to PATH (an .svg), the raw stacks beside it (.txt), and a table
of the main thread's hottest functions to stdout.

Run from the repository root (11 to 15 minutes on 2 cores)::

    .venv/bin/python tests/benchmarks/start_throughput.py
    .venv/bin/python tests/benchmarks/start_throughput.py --databases postgresql --workers 4 --batches 1
    .venv/bin/python tests/benchmarks/start_throughput.py --parts latency memory
    .venv/bin/python tests/benchmarks/start_throughput.py --parts --profile /tmp/worker.svg --profile-batch 10

Progress goes to stderr, the results to stdout. Absolute figures depend on the machine;
read the ratios and the targets.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from sqlalchemy import create_engine, func, select, text

from jobsup import Client
from jobsup.ops.bench import percentile
from jobsup.store.database import Database
from jobsup.store.schema import SUCCEEDED, job, job_attempt

PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"
PG_DATABASE = "jobsup_bench_start"
PG_LIMIT_DATABASE = "jobsup_bench_start_limit"
PG_LIMIT = Path(__file__).resolve().parents[3] / "shared" / "bench" / "pg_limit.sh"
JOBSUP = Path(sys.executable).parent / "jobsup"
PY_SPY = Path(sys.executable).parent / "py-spy"
QUEUE = "bench"
APP = "jobsup_bench_start_app"
MARKS_VARIABLE = "BENCH_START_MARKS"  # where the latency job writes its start times

# Of pg_limit.sh BATCH WORKERS run right after each run: by (batch, workers); None: any workers.
TARGET_RATIOS = {(100, 4): 0.45, (100, 2): 0.35, (1, None): 0.6}
TARGET_PG_P50_MS, TARGET_PG_P99_MS = 2.5, 10.0  # from enqueue returning to the job starting
TARGET_SQLITE_P50_MS, TARGET_SQLITE_P99_MS = 20.0, 60.0
TARGET_PSS_MB = 150.0
MEMORY_WORKERS = 4
LATENCY_WARMUP = 5
PROGRESS_POLL = 0.2  # seconds between counts of succeeded jobs
STALL_TIMEOUT = 60.0  # no job finishing for this long fails the run
STOP_TIMEOUT = 60.0

APP_SOURCE = f'''"""Jobs for tests/benchmarks/start_throughput.py, written by it at run time."""

import os
import time

import jobsup


@jobsup.job("noop", queue="{QUEUE}")
def noop(ctx, payload):
    return None


@jobsup.job("latency", queue="{QUEUE}")
def latency(ctx, payload):
    started = time.time()
    path = os.path.join(os.environ["{MARKS_VARIABLE}"], str(ctx.job_id))
    with open(path + ".tmp", "w") as mark:
        mark.write(repr(started))
    os.replace(path + ".tmp", path)
'''


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the app module, the databases, the supervisor -----------------------------------------------


@dataclass(frozen=True)
class Workspace:
    """The temporary folder: the app module, the latency marks, SQLite files, supervisor logs."""

    root: Path

    @property
    def marks(self) -> Path:
        return self.root / "marks"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


@contextmanager
def workspace(keep: bool) -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="jobsup_bench_start_"))
    space = Workspace(root)
    (root / "app").mkdir()
    (root / "app" / f"{APP}.py").write_text(APP_SOURCE)
    space.marks.mkdir()
    space.logs.mkdir()
    try:
        yield space
    finally:
        if keep:
            progress(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def fresh_database(kind: str, space: Workspace, label: str) -> Iterator[str]:
    """A new, empty database with the jobsup schema (from `jobsup db upgrade`); its URL."""
    if kind == "sqlite":
        path = space.root / f"{label}.db"
        url = f"sqlite:///{path}"
        try:
            upgrade(url)
            yield url
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {PG_DATABASE}"))
        url = f"{PG_SERVER}/{PG_DATABASE}"
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)"))
        admin.dispose()


def upgrade(url: str) -> None:
    command = [str(JOBSUP), "db", "upgrade", "--database-url", url]
    done = subprocess.run(command, capture_output=True, text=True, env=clean_environment(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"jobsup db upgrade failed ({done.returncode}): {done.stderr.strip()}")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without JOBSUP_* settings (they would change what is measured)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_")}
    env.update(extra)
    return env


class Supervisor:
    """One `jobsup start` in its own session, logging to a file."""

    def __init__(self, space: Workspace, url: str, label: str, *options: str) -> None:
        self.log_path = space.logs / f"{label}.log"
        command = [str(JOBSUP), "start", "--app", APP, "--database-url", url, *metrics_options(), *options]
        # Latency marks are named by job id, and ids start again in every fresh database.
        self.marks = space.marks / label
        shutil.rmtree(self.marks, ignore_errors=True)  # a repeated run's marks would be read as this one's
        self.marks.mkdir()
        env = clean_environment(PYTHONPATH=str(space.root / "app"), **{MARKS_VARIABLE: str(self.marks)})
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - open for the supervisor's whole life
        self.started = time.time()
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=self.log, env=env, cwd=space.root, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def workers(self) -> list[int]:
        try:
            return [int(pid) for pid in Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()]
        except FileNotFoundError:
            return []

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"jobsup start exited with {self.process.returncode}:\n{self.log_tail()}")

    def wait_for_idle_workers(self, count: int, timeout: float = 60.0) -> list[int]:
        """The worker pids, once `count` of them say "idle" in their process title."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            pids = self.workers()
            if len(pids) >= count and all("idle" in process_title(pid) for pid in pids):
                return pids
            time.sleep(0.1)
        raise RuntimeError(f"{count} idle workers did not appear within {timeout:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then wait; SIGKILL the whole session if it does not stop in time."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    code = self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(self.pid, signal.SIGKILL)
                    self.process.wait(10)
                    raise RuntimeError(f"jobsup start ignored SIGTERM for {STOP_TIMEOUT:g} s") from None
                if code != 0:
                    progress(f"jobsup start exited with {code} after SIGTERM; log tail:\n{self.log_tail()}")
        finally:
            self.log.close()

    def workers_died(self) -> bool:
        self.log.flush()
        return b"worker.died" in self.log_path.read_bytes()

    def log_tail(self, lines: int = 20) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def supervisor(space: Workspace, url: str, label: str, *options: str) -> Iterator[Supervisor]:
    started = Supervisor(space, url, label, *options)
    try:
        yield started
    finally:
        started.stop()


@functools.cache
def metrics_options() -> tuple[str, ...]:
    """``--metrics-port 0`` where `jobsup start` has it: the /metrics endpoint still runs, as by
    default, but on a free port, so that another jobsup on this host cannot make the start fail."""
    help_text = subprocess.run(
        [str(JOBSUP), "start", "--help"], capture_output=True, text=True, env=clean_environment(), check=False
    ).stdout
    return ("--metrics-port", "0") if "--metrics-port" in help_text else ()


def process_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


# -- CPU accounting -------------------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


@dataclass(frozen=True)
class CpuSnapshot:
    at: float
    done: int
    workers: float
    supervisor: float
    postgres: float
    busy: float
    total: float

    @staticmethod
    def take(running: Supervisor, done: int) -> CpuSnapshot:
        busy, total = machine_cpu()
        return CpuSnapshot(
            time.monotonic(),
            done,
            sum(process_cpu(pid) for pid in running.workers()),
            process_cpu(running.pid),
            sum(process_cpu(pid) for pid in postgres_pids()),
            busy,
            total,
        )


def postgres_pids() -> list[int]:
    """Every PostgreSQL server process on this host (the server is local)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().startswith(f"{stat.parent.name} (postgres)"):
                pids.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


@dataclass(frozen=True)
class CpuUse:
    """CPU milliseconds per job between two snapshots, and how busy the machine was."""

    workers_ms: float
    supervisor_ms: float
    postgres_ms: float  # the server's processes that lived through both snapshots (its backends do)
    other_ms: float  # the rest of the machine: this script, and whatever else runs
    busy: float  # fraction of all cores

    @staticmethod
    def between(first: CpuSnapshot, last: CpuSnapshot) -> CpuUse | None:
        jobs = last.done - first.done
        if jobs <= 0 or last.total <= first.total:
            return None
        workers, supervisor = last.workers - first.workers, last.supervisor - first.supervisor
        postgres = max(0.0, last.postgres - first.postgres)
        busy = last.busy - first.busy
        return CpuUse(
            1000 * workers / jobs,
            1000 * supervisor / jobs,
            1000 * postgres / jobs,
            1000 * max(0.0, busy - workers - supervisor - postgres) / jobs,
            busy / (last.total - first.total),
        )


# -- 1. throughput --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    jobs: int
    seconds: float  # first attempt start to last finish, from the database
    boot: float  # process start to the first attempt start
    cpu: CpuUse | None
    problems: tuple[str, ...]
    server: ServerWork | None = None  # PostgreSQL only

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds


@dataclass(frozen=True)
class ServerWork:
    """What PostgreSQL did per job over a whole run (the supervisor's start-up and this
    script's polls included): committed transactions in the database, WAL bytes in the cluster."""

    xacts_per_job: float
    wal_kb_per_job: float


@dataclass
class Cell:
    database: str
    workers: int
    batch: int
    runs: list[Run] = field(default_factory=list)
    ceilings: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.database} workers={self.workers} batch={self.batch}"

    @property
    def jobs_per_second(self) -> float:
        return statistics.median(run.jobs_per_second for run in self.runs)

    @property
    def ceiling(self) -> float | None:
        return statistics.median(self.ceilings) if self.ceilings else None

    @property
    def ratios(self) -> list[float]:
        """Each run's figure over the pg_limit.sh run right after it."""
        return [run.jobs_per_second / ceiling for run, ceiling in zip(self.runs, self.ceilings, strict=False)]

    @property
    def ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def target(self) -> float | None:
        return TARGET_RATIOS.get((self.batch, self.workers), TARGET_RATIOS.get((self.batch, None)))

    def median_of(self, value: Callable[[CpuUse], float]) -> float | None:
        values = [value(run.cpu) for run in self.runs if run.cpu is not None]
        return statistics.median(values) if values else None


def measure_throughput(space: Workspace, options: argparse.Namespace) -> list[Cell]:
    cells = [
        Cell(database, workers, batch)
        for database in options.databases
        for batch in options.batches
        for workers in options.workers
    ]
    for number in range(1, options.repeat + 1):
        for cell in cells:
            where = f"{cell.label} run {number}/{options.repeat}"
            run = throughput_run(space, cell, options.jobs)
            cell.runs.append(run)
            note = f"; PROBLEMS: {'; '.join(run.problems)}" if run.problems else ""
            progress(f"{where}: {run.jobs_per_second:.0f} jobs/s ({run.jobs} in {run.seconds:.2f} s){note}")
            if cell.database == "postgresql" and not options.skip_limit:
                cell.ceilings.append(pg_limit(cell.batch, cell.workers, options.limit_seconds))
                progress(f"{where}: pg_limit {cell.ceilings[-1]:.0f} jobs/s")
    return cells


def throughput_run(space: Workspace, cell: Cell, jobs: int) -> Run:
    label = f"throughput-{cell.database}-w{cell.workers}-b{cell.batch}"
    with fresh_database(cell.database, space, label) as url:
        enqueue_noops(url, jobs, analyze=cell.database == "postgresql")
        db = Database(url)
        try:
            options = [f"--queue={QUEUE}={cell.workers}", f"--claim-batch={cell.batch}"]
            options += ["--poll-interval=100ms", "--no-migrate"]
            before = pg_counters(url) if cell.database == "postgresql" else None
            with supervisor(space, url, label, *options) as running:
                cpu = wait_until_all_succeeded(running, db, jobs)
            run = summarise_run(db, jobs, running.started, cpu)
        finally:
            db.dispose()
        if before is not None:
            after = pg_counters(url)  # the workers' backends have exited, so their counts are in
            xacts, wal = (end - start for start, end in zip(before, after, strict=True))
            run = replace(run, server=ServerWork(xacts / jobs, wal / 1024 / jobs))
        return run


def pg_counters(url: str) -> tuple[int, int]:
    """(transactions committed in the database, WAL bytes written by the cluster)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),"
                    " (SELECT wal_bytes FROM pg_stat_wal)"
                )
            ).one()
        return int(row[0]), int(row[1])
    finally:
        engine.dispose()


def enqueue_noops(url: str, jobs: int, *, analyze: bool) -> None:
    client = Client(url)
    try:
        for start in range(0, jobs, 5000):
            count = min(5000, jobs - start)
            client.enqueue_many([{"name": "noop", "queue": QUEUE}] * count, allow_unknown=True)
    finally:
        client.close()
    if analyze:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text("VACUUM ANALYZE jobsup_job"))
                conn.execute(text("VACUUM ANALYZE jobsup_job_attempt"))
                # Every run starts just after a checkpoint, so each pays the same full-page
                # images; otherwise whether one fell inside a run moved its WAL (0.99 or 1.22 kB
                # a job) and the server's CPU a job by a third, from run to run.
                conn.execute(text("CHECKPOINT"))
        finally:
            engine.dispose()


def count_succeeded(db: Database) -> int:
    with db.read("inspect") as conn:
        return int(conn.execute(select(func.count()).where(job.c.status == SUCCEEDED)).scalar_one())


def wait_until_all_succeeded(running: Supervisor, db: Database, jobs: int) -> CpuUse | None:
    """Poll the count of succeeded jobs until it reaches `jobs`; CPU use over the polls."""
    first: CpuSnapshot | None = None
    last_done, last_change = 0, time.monotonic()
    while True:
        running.check_alive()
        done = count_succeeded(db)
        now = time.monotonic()
        if done != last_done:
            last_done, last_change = done, now
        elif now - last_change > 5.0 and running.workers_died():
            raise RuntimeError(f"workers died and no job succeeded for 5 s:\n{running.log_tail()}")
        elif now - last_change > STALL_TIMEOUT:
            raise RuntimeError(f"no job succeeded for {STALL_TIMEOUT:g} s ({done} of {jobs}):\n{running.log_tail()}")
        if done >= jobs:
            last = CpuSnapshot.take(running, done)
            return CpuUse.between(first, last) if first is not None else None
        if first is None and done > 0:
            first = CpuSnapshot.take(running, done)
        time.sleep(PROGRESS_POLL)


def summarise_run(db: Database, jobs: int, process_started: float, cpu: CpuUse | None) -> Run:
    with db.read("inspect") as conn:
        first_start = conn.execute(select(func.min(job_attempt.c.started_at))).scalar_one()
        last_finish = conn.execute(select(func.max(job.c.finished_at)).where(job.c.status == SUCCEEDED)).scalar_one()
        succeeded = conn.execute(select(func.count()).where(job.c.status == SUCCEEDED)).scalar_one()
        attempts = conn.execute(select(func.count()).select_from(job_attempt)).scalar_one()
        not_first = conn.execute(select(func.count()).where(job.c.attempts != 1)).scalar_one()
        bad_outcomes = conn.execute(
            select(func.count()).where((job_attempt.c.outcome != SUCCEEDED) | job_attempt.c.outcome.is_(None))
        ).scalar_one()
    if not isinstance(first_start, datetime) or not isinstance(last_finish, datetime):
        raise RuntimeError(f"no attempt times in the database: {first_start!r}, {last_finish!r}")
    problems = []
    if succeeded != jobs:
        problems.append(f"{succeeded} of {jobs} jobs succeeded")
    if attempts != jobs:
        problems.append(f"{attempts} attempt rows for {jobs} jobs")
    if not_first:
        problems.append(f"{not_first} jobs did not succeed at their first attempt")
    if bad_outcomes:
        problems.append(f"{bad_outcomes} attempts did not end 'succeeded'")
    seconds = (last_finish - first_start).total_seconds()
    return Run(jobs, seconds, first_start.timestamp() - process_started, cpu, tuple(problems))


def pg_limit(batch: int, clients: int, seconds: float) -> float:
    """jobs/s of pgbench doing a bare claim and settle (../shared/bench/pg_limit.sh)."""
    command = [str(PG_LIMIT), str(batch), str(clients), str(max(1, round(seconds))), PG_LIMIT_DATABASE]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    # One line: pg_limit batch=B clients=C jobs_per_s=N
    fields = dict(word.split("=", 1) for word in output.split() if "=" in word)
    return float(fields["jobs_per_s"])


# -- 2. idle latency ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    database: str
    poll_interval: float
    samples_ms: tuple[float, ...]  # from `Client.enqueue` returning to the job function starting
    enqueue_ms: tuple[float, ...]  # how long each `Client.enqueue` call took

    @property
    def p50(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)

    @property
    def from_call_p50(self) -> float:
        return percentile([a + b for a, b in zip(self.samples_ms, self.enqueue_ms, strict=True)], 50)


def measure_latency(space: Workspace, database: str, count: int, seed: int) -> Latency:
    poll = 1.0 if database == "sqlite" else 5.0  # the dialects' defaults; not passed, not changed
    label = f"latency-{database}"
    gaps = random.Random(seed)
    samples: list[float] = []
    enqueue_calls: list[float] = []
    with fresh_database(database, space, label) as url:
        client, db = Client(url), Database(url)
        try:
            with supervisor(space, url, label, "--queue", f"{QUEUE}=1", "--no-migrate") as running:
                running.wait_for_idle_workers(1)
                for number in range(LATENCY_WARMUP + count):
                    time.sleep(0.05 + gaps.random() * (poll if database == "sqlite" else 0.05))
                    running.check_alive()
                    enqueued = time.time()
                    job_id = client.enqueue("latency", queue=QUEUE, allow_unknown=True)
                    returned = time.time()
                    started = wait_for_mark(running.marks / str(job_id), running)
                    wait_for_success(db, job_id, running)
                    if number >= LATENCY_WARMUP:
                        samples.append(1000 * (started - returned))
                        enqueue_calls.append(1000 * (returned - enqueued))
                    if number % 50 == 49:
                        progress(f"latency {database}: {number + 1 - LATENCY_WARMUP} of {count} jobs")
        finally:
            client.close()
            db.dispose()
    return Latency(database, poll, tuple(samples), tuple(enqueue_calls))


def wait_for_mark(path: Path, running: Supervisor, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return float(path.read_text())
        except FileNotFoundError:
            time.sleep(0.0005)
    running.check_alive()
    raise RuntimeError(f"job {path.name} did not start within {timeout:g} s:\n{running.log_tail()}")


def wait_for_success(db: Database, job_id: int, running: Supervisor, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    query = select(job.c.status).where(job.c.id == job_id)
    while time.monotonic() < deadline:
        with db.read("inspect") as conn:
            if conn.execute(query).scalar_one() == SUCCEEDED:
                return
        time.sleep(0.002)
    raise RuntimeError(f"job {job_id} did not succeed within {timeout:g} s:\n{running.log_tail()}")


# -- 3. memory ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    database: str
    role: str
    pid: int
    rss_mb: float
    pss_mb: float


def measure_memory(space: Workspace, database: str) -> list[Memory]:
    label = f"memory-{database}"
    with fresh_database(database, space, label) as url:
        options = ("--queue", f"{QUEUE}={MEMORY_WORKERS}", "--no-migrate")
        with supervisor(space, url, label, *options) as running:
            workers = running.wait_for_idle_workers(MEMORY_WORKERS)
            time.sleep(3.0)  # a few idle polls and a supervisor heartbeat and maintenance pass
            running.check_alive()
            workers = running.workers()
            found = [memory_of(database, "supervisor", running.pid)]
            found += [memory_of(database, f"worker {n}", pid) for n, pid in enumerate(workers, 1)]
    return found


def memory_of(database: str, role: str, pid: int) -> Memory:
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            values[name] = int(rest.split()[0]) / 1024  # kB to MB
    return Memory(database, role, pid, values["Rss"], values["Pss"])


# -- profiling ------------------------------------------------------------------------------------


def profile_run(space: Workspace, jobs: int, svg: Path, seconds: int, batch: int) -> None:
    """An unmeasured PostgreSQL run (4 workers, claim batch `batch`) with py-spy on its first worker."""
    if not PY_SPY.exists():
        raise SystemExit(f"--profile needs py-spy: {PY_SPY.parent / 'pip'} install py-spy")
    label = f"profile-postgresql-w4-b{batch}"
    jobs = max(jobs, (seconds + 5) * (1000 if batch == 1 else 8000))  # enough to outlast the recording
    with fresh_database("postgresql", space, label) as url:
        enqueue_noops(url, jobs, analyze=True)
        db = Database(url)
        try:
            options = [f"--queue={QUEUE}=4", f"--claim-batch={batch}", "--poll-interval=100ms", "--no-migrate"]
            with supervisor(space, url, label, *options) as running:
                deadline = time.monotonic() + 60
                while count_succeeded(db) == 0 and time.monotonic() < deadline:
                    running.check_alive()
                    time.sleep(0.05)
                time.sleep(0.5)  # into the steady state
                pid = running.workers()[0]
                progress(f"py-spy: recording worker {pid} for {seconds} s")
                raw = svg.with_suffix(".txt")
                # Two recorders of the same worker: a flame graph to look at, raw stacks to tabulate.
                common = ["--pid", str(pid), "--duration", str(seconds), "--idle", "--threads", "--rate", "200"]
                recorders = [
                    subprocess.Popen([str(PY_SPY), "record", *common, "-o", str(svg)], stdout=subprocess.DEVNULL),
                    subprocess.Popen(
                        [str(PY_SPY), "record", *common, "--format", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL
                    ),
                ]
                codes = [recorder.wait(seconds + 60) for recorder in recorders]
                done = count_succeeded(db)
        finally:
            db.dispose()
    if any(codes):
        progress(f"py-spy failed: exit codes {codes}")
        return
    print_profile(raw, svg, done, jobs, batch)


def print_profile(raw: Path, svg: Path, done: int, jobs: int, batch: int) -> None:
    """The main thread's hottest functions: self (the leaf) and inclusive (on the stack)."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count, frames = int(count_text), stack.split(";")
        thread = frames[0].partition(": ")[2] or "?"  # "thread (PID): NAME"
        threads[thread] += count
        if thread != "MainThread":
            continue
        total += count
        names = [strip_line(frame) for frame in frames[1:]] or ["(no python frame)"]
        for name in set(names):
            inclusive[name] += count
        leaf[names[-1]] += count
    print()
    print(f"py-spy profile of one worker, PostgreSQL, 4 workers, batch {batch}; raw stacks {raw}, flame graph {svg}")
    print(f"  ({done} of {jobs} jobs had succeeded when the recording ended)")
    print("  samples per thread: " + ", ".join(f"{name} {count}" for name, count in threads.most_common()))
    if not total:
        return
    print(f"  main thread, {total} samples, idle (waiting) included")
    print(f"  {'self %':>6}  function")
    for name, count in leaf.most_common(15):
        print(f"  {100 * count / total:6.1f}  {name}")
    print(f"  {'incl %':>6}  function (on the stack)")
    for name, count in inclusive.most_common(30):
        print(f"  {100 * count / total:6.1f}  {name}")


def strip_line(frame: str) -> str:
    """``Worker.claim (/x/worker/loop.py:77)`` -> ``Worker.claim (worker/loop.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({'/'.join(Path(path).parts[-2:])})"


# -- the report -----------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def print_throughput(cells: Sequence[Cell], options: argparse.Namespace) -> None:
    print()
    print(
        f"Throughput: {options.jobs} no-op jobs through `jobsup start`, poll 100ms; median of {options.repeat} run(s)"
    )
    print("  cpu ms/job: worker processes / supervisor / PostgreSQL server / the rest of the machine; busy: all cores")
    print("  xact/job, WAL kB/job: PostgreSQL's committed transactions and WAL per job over the whole run")
    header = (
        f"  {'database':<10} {'workers':>7} {'batch':>5} {'jobs/s':>8} {'runs':<22} {'boot s':>6} "
        f"{'cpu ms/job w/s/pg/rest':>22} {'busy':>5} {'xact/job':>8} {'WAL kB/job':>10} "
        f"{'pg_limit':>8} {'ratio':>6} {'min-max':>9}  target"
    )
    print(header)
    for cell in cells:
        runs = " ".join(f"{run.jobs_per_second:.0f}" for run in cell.runs)
        boot = statistics.median(run.boot for run in cell.runs)
        workers = cell.median_of(lambda cpu: cpu.workers_ms)
        sup = cell.median_of(lambda cpu: cpu.supervisor_ms)
        postgres = cell.median_of(lambda cpu: cpu.postgres_ms)
        other = cell.median_of(lambda cpu: cpu.other_ms)
        busy = cell.median_of(lambda cpu: cpu.busy)
        cpu_text = f"{workers:.2f}/{sup:.2f}/{postgres:.2f}/{other:.2f}" if workers is not None else "-"
        busy_text = f"{100 * busy:.0f}%" if busy is not None else "-"
        servers = [run.server for run in cell.runs if run.server is not None]
        xacts = f"{statistics.median(w.xacts_per_job for w in servers):.2f}" if servers else "-"
        wal = f"{statistics.median(w.wal_kb_per_job for w in servers):.2f}" if servers else "-"
        ceiling, ratio, wanted = cell.ceiling, cell.ratio, cell.target
        spread = f"{min(cell.ratios):.2f}-{max(cell.ratios):.2f}" if cell.ratios else "-"
        target = ""
        if ratio is not None and wanted is not None:
            target = f">= {wanted}: {verdict(ratio >= wanted)}"
        print(
            f"  {cell.database:<10} {cell.workers:>7} {cell.batch:>5} {cell.jobs_per_second:>8.0f} "
            f"{runs:<22} {boot:>6.2f} {cpu_text:>22} {busy_text:>5} {xacts:>8} {wal:>10} "
            f"{f'{ceiling:.0f}' if ceiling else '-':>8} {f'{ratio:.2f}' if ratio else '-':>6} {spread:>9}  {target}"
        )
        for number, run in enumerate(cell.runs, 1):
            for problem in run.problems:
                print(f"    run {number} PROBLEM: {problem}")


def print_latency(latencies: Sequence[Latency]) -> None:
    print()
    print("Idle latency: from Client.enqueue returning to the job function starting, one idle worker,")
    print("  default poll interval (woken by NOTIFY on PostgreSQL, by a FIFO poke on SQLite)")
    print("  (enqueue p50: how long the Client.enqueue call took; from call p50: the two added)")
    print(
        f"  {'database':<10} {'jobs':>5} {'poll':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'enqueue p50':>11} {'from call p50':>13}  target"
    )
    for latency in latencies:
        p50, p99 = (TARGET_PG_P50_MS, TARGET_PG_P99_MS) if latency.database == "postgresql" else (
            TARGET_SQLITE_P50_MS, TARGET_SQLITE_P99_MS)  # fmt: skip
        target = f"p50 < {p50:g} ms, p99 < {p99:g} ms: {verdict(latency.p50 < p50 and latency.p99 < p99)}"
        samples = latency.samples_ms
        print(
            f"  {latency.database:<10} {len(samples):>5} {latency.poll_interval:>4g}s {latency.p50:>8.1f} "
            f"{percentile(samples, 90):>8.1f} {latency.p99:>8.1f} {max(samples):>8.1f} "
            f"{percentile(latency.enqueue_ms, 50):>11.1f} {latency.from_call_p50:>13.1f}  {target}"
        )


def print_memory(found: Sequence[Memory]) -> None:
    print()
    print(f"Memory: `jobsup start --queue {QUEUE}={MEMORY_WORKERS}`, idle (from /proc/PID/smaps_rollup)")
    print(f"  {'database':<10} {'process':<11} {'pid':>7} {'RSS MB':>8} {'PSS MB':>8}")
    for database in dict.fromkeys(memory.database for memory in found):
        rows = [memory for memory in found if memory.database == database]
        for memory in rows:
            print(f"  {database:<10} {memory.role:<11} {memory.pid:>7} {memory.rss_mb:>8.1f} {memory.pss_mb:>8.1f}")
        total_pss = sum(memory.pss_mb for memory in rows)
        total_rss = sum(memory.rss_mb for memory in rows)
        print(
            f"  {database:<10} {'total':<11} {'':>7} {total_rss:>8.1f} {total_pss:>8.1f}  "
            f"target PSS < {TARGET_PSS_MB:g} MB: {verdict(total_pss < TARGET_PSS_MB)}"
        )


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--databases", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"])
    parser.add_argument(
        "--parts",
        nargs="*",
        choices=["throughput", "latency", "memory"],
        default=["throughput", "latency", "memory"],
        help="What to measure (default all; none with --profile alone).",
    )
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4], help="Default: 1 2 4.")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 10], help="Claim batch sizes (default 1 10).")
    parser.add_argument("--jobs", type=int, default=20_000, help="Jobs per throughput run (default 20000).")
    parser.add_argument("--repeat", type=int, default=1, help="Runs per throughput cell; medians shown.")
    parser.add_argument("--limit-seconds", type=float, default=8.0, help="pg_limit.sh's SECONDS (default 8).")
    parser.add_argument("--skip-limit", action="store_true", help="Do not run pg_limit.sh.")
    parser.add_argument("--latency-jobs", type=int, default=200, help="Timed jobs per database (default 200).")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the idle gaps between latency jobs.")
    parser.add_argument("--profile", type=Path, help="Also profile a worker with py-spy; flame graph to this .svg.")
    parser.add_argument("--profile-seconds", type=int, default=5)
    parser.add_argument("--profile-batch", type=int, default=1, help="Claim batch of the profiled run (default 1).")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (logs, app, SQLite files).")
    options = parser.parse_args(argv)
    if options.repeat < 1 or options.jobs < 1 or options.latency_jobs < 1:
        parser.error("--repeat, --jobs and --latency-jobs must be at least 1")
    return options


def source_version() -> str:
    """The checkout's commit, and whether the library's files differ from it (others edit them too)."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--", "shared", "worker", "supervisor", "migrations")
    return f"{commit}{' with uncommitted library changes' if changed else ''} ({root})"


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    began = time.monotonic()
    print(f"jobsup start benchmark: {' '.join(sys.argv)}")
    print(f"  {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, jobsup command {JOBSUP}")
    print(f"  jobsup source: {source_version()}")
    print(f"  load average at start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    with workspace(options.keep) as space:
        cells: list[Cell] = []
        latencies: list[Latency] = []
        memory: list[Memory] = []
        if "throughput" in options.parts:
            cells = measure_throughput(space, options)
            print_throughput(cells, options)
        if "latency" in options.parts:
            for database in options.databases:
                latencies.append(measure_latency(space, database, options.latency_jobs, options.seed))
            print_latency(latencies)
        if "memory" in options.parts:
            for database in options.databases:
                memory += measure_memory(space, database)
            print_memory(memory)
        if options.profile is not None:
            profile_run(space, options.jobs, options.profile, options.profile_seconds, options.profile_batch)
    print()
    print(f"load average at the end: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"total time {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
