"""Figures for bulk enqueue and for concurrency inside a worker.

1. Bulk enqueue (PostgreSQL): ``Client.enqueue_many`` of ``--jobs`` (20,000) no-op jobs
   into a fresh, migrated database, timed around the call; each run is followed by
   ``../shared/bench/pg_insert_limit.sh 1000 1`` (pgbench inserting 1,000 job rows per
   statement) and shown as a ratio of it. Beside it, the single ``Client.enqueue`` call's
   median time over 500 calls. Target: ratio >= 0.30.
2. Concurrency inside a worker: ``--sleep-jobs`` (20,000) jobs that each sleep 50 ms
   (``time.sleep`` in a thread, ``asyncio.sleep`` on the event loop) through a real
   ``jobsup start --queue bench=2:50`` on SQLite and PostgreSQL; jobs/s from the database
   timestamps (first attempt start to last finish) against the ideal 2 x 50 / 0.05 s =
   2,000 jobs/s. The peak PSS of one worker while 50 jobs run is sampled from
   /proc/PID/smaps_rollup. Targets: >= 0.8 of ideal; worker PSS < 60 MB.

Every part runs ``--repeat`` (3) times, interleaved, and the table shows the median with the
minimum and maximum. Run from the repository root (about 6 minutes on 2 cores)::

    .venv/bin/python tests/benchmarks/enqueue_and_concurrency.py
    .venv/bin/python tests/benchmarks/enqueue_and_concurrency.py --parts bulk --repeat 5
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, func, select, text

from jobsup import Client
from jobsup.ops.benchprocess import children_of, pss_kb
from jobsup.store.schema import SUCCEEDED, job, job_attempt

SHARED_BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench"
JOBSUP = Path(sys.executable).parent / "jobsup"
ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BULK_TARGET, CONCURRENCY_TARGET, WORKER_PSS_TARGET_MB = 0.30, 0.8, 60.0
WORKERS, CONCURRENCY, SLEEP = 2, 50, 0.05

APP = """import asyncio, time
import jobsup


@jobsup.job("sleep-thread", queue="bench")
def sleep_thread(ctx, payload):
    time.sleep(0.05)


@jobsup.job("sleep-async", queue="bench")
async def sleep_async(ctx, payload):
    await asyncio.sleep(0.05)
"""


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def database(kind: str, folder: Path, label: str) -> Iterator[str]:
    if kind == "sqlite":
        run = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=folder))  # a fresh file every run
        yield f"sqlite:///{run / 'jobs.db'}"
        return
    name = f"jobsup_bench_{label}".replace("-", "_")
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def upgrade(url: str) -> None:
    subprocess.run([str(JOBSUP), "--database-url", url, "db", "upgrade"], check=True, capture_output=True)


def limit(script: str, *args: str) -> float:
    out = subprocess.run([str(SHARED_BENCH / script), *args], check=True, capture_output=True, text=True).stdout
    return float(out.split("jobs_per_s=")[1].split()[0])


# -- 1. bulk enqueue ------------------------------------------------------------------------------


def bulk_run(folder: Path, jobs: int) -> tuple[float, float]:
    """(enqueue_many jobs/s, single enqueue ms) on a fresh PostgreSQL database."""
    with database("postgresql", folder, "bulk") as url:
        upgrade(url)
        client = Client(url)
        specs = [{"name": "bench-noop", "queue": "bench", "payload": {"i": i}} for i in range(jobs)]
        client.enqueue_many(specs[:100], allow_unknown=True)  # connections and the schema check
        started = time.perf_counter()
        ids = client.enqueue_many(specs, allow_unknown=True)
        rate = jobs / (time.perf_counter() - started)
        assert len(ids) == jobs and ids == sorted(ids), "ids out of order"
        singles = []
        for i in range(500):
            began = time.perf_counter()
            client.enqueue("bench-noop", {"i": i}, queue="bench", allow_unknown=True)
            singles.append(1000 * (time.perf_counter() - began))
        client.close()
    return rate, statistics.median(singles)


# -- 2. concurrency inside a worker ---------------------------------------------------------------


def concurrency_run(folder: Path, kind: str, name: str, jobs: int) -> tuple[float, float]:
    """(jobs/s, peak worker PSS MB) for `jobs` sleeping jobs through jobsup start."""
    with database(kind, folder, f"conc-{kind}") as url:
        upgrade(url)
        client = Client(url)
        for start in range(0, jobs, 5000):
            client.enqueue_many([{"name": name, "queue": "bench"}] * min(5000, jobs - start), allow_unknown=True)
        env = {**os.environ, "PYTHONPATH": str(folder)}
        env.pop("JOBSUP_FAULTS", None)
        command = [str(JOBSUP), "--database-url", url, "start", "--app", "bench_app", "--no-migrate"]
        command += ["--queue", f"bench={WORKERS}:{CONCURRENCY}", "--metrics-port", "-1", "--poll-interval", "100ms"]
        with open(folder / f"conc-{kind}.log", "ab") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        engine = create_engine(url)
        done = select(func.count()).select_from(job).where(job.c.status == SUCCEEDED)
        peak = 0.0
        try:
            while True:
                with engine.connect() as conn:
                    finished = conn.execute(done).scalar_one()
                if finished >= jobs:
                    break
                if process.poll() is not None:
                    raise RuntimeError(f"jobsup start exited {process.returncode}; see {folder}")
                for pid in children_of(process.pid):
                    peak = max(peak, (pss_kb(pid) or 0) / 1024)
                time.sleep(0.2)
            with engine.connect() as conn:
                first = conn.execute(select(func.min(job_attempt.c.started_at))).scalar_one()
                last = conn.execute(select(func.max(job.c.finished_at))).scalar_one()
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(60)
            engine.dispose()
            client.close()
    return jobs / (last - first).total_seconds(), peak


# -- main -----------------------------------------------------------------------------------------


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=["bulk", "concurrency"], default=["bulk", "concurrency"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000, help="Jobs per bulk enqueue (default 20000).")
    parser.add_argument("--sleep-jobs", type=int, default=20_000, help="Jobs per concurrency run (default 20000).")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="jobsup-bench-"))
    (folder / "bench_app.py").write_text(APP)
    print(f"enqueue and concurrency benchmark, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M:%S')} UTC")
    bulk: list[tuple[float, float, float]] = []
    conc: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for number in range(1, options.repeat + 1):
        if "bulk" in options.parts:
            rate, single = bulk_run(folder, options.jobs)
            ceiling = limit("pg_insert_limit.sh", "1000", "1")
            bulk.append((rate, single, ceiling))
            progress(f"bulk run {number}: {rate:.0f} jobs/s, pg_insert_limit {ceiling:.0f}, single {single:.2f} ms")
        if "concurrency" in options.parts:
            for kind in ("postgresql", "sqlite"):
                for name in ("sleep-thread", "sleep-async"):
                    rate, peak = concurrency_run(folder, kind, name, options.sleep_jobs)
                    conc.setdefault((kind, name), []).append((rate, peak))
                    progress(f"concurrency run {number} {kind} {name}: {rate:.0f} jobs/s, worker PSS {peak:.1f} MB")
    if bulk:
        ratios = [rate / ceiling for rate, _, ceiling in bulk]
        print(f"\nBulk enqueue: enqueue_many of {options.jobs} jobs, PostgreSQL; median (min-max) of {len(bulk)} runs")
        print(f"  enqueue_many jobs/s      {spread([b[0] for b in bulk], 0)}")
        print(f"  pg_insert_limit 1000 1   {spread([b[2] for b in bulk], 0)}")
        verdict = "met" if statistics.median(ratios) >= BULK_TARGET else "NOT met"
        print(f"  ratio                    {spread(ratios)}  target >= {BULK_TARGET}: {verdict}")
        print(f"  single enqueue ms        {spread([b[1] for b in bulk])}")
    if conc:
        ideal = WORKERS * CONCURRENCY / SLEEP
        shape = f"--queue bench={WORKERS}:{CONCURRENCY}"
        print(f"\nConcurrency: {options.sleep_jobs} jobs of 50 ms, {shape}, ideal {ideal:.0f} jobs/s")
        print(f"  {'database':<10} {'job':<13} {'jobs/s':<22} {'of ideal':<18} {'worker PSS MB':<20}  targets")
        for (kind, name), runs in conc.items():
            rates, peaks = [r for r, _ in runs], [p for _, p in runs]
            of_ideal = [r / ideal for r in rates]
            met = statistics.median(of_ideal) >= CONCURRENCY_TARGET and max(peaks) < WORKER_PSS_TARGET_MB
            print(
                f"  {kind:<10} {name:<13} {spread(rates, 0):<22} {spread(of_ideal):<18} {spread(peaks, 1):<20}  "
                f">= {CONCURRENCY_TARGET} and < {WORKER_PSS_TARGET_MB:g} MB: {'met' if met else 'NOT met'}"
            )


if __name__ == "__main__":
    main()
