"""`jobsup bench`: how fast jobsup is on your own database, measured end to end.

On a queue of its own (``jobsup-bench-<8 hex>``), so real queues and workers are untouched:

1. enqueue ``--jobs`` jobs with `Client.enqueue_many`, 5,000 at a time: enqueue jobs/s;
2. start a real ``jobsup start --app jobsup.bench`` on that queue and wait until every job
   has succeeded: processing jobs/s = jobs / (the last job's finish - the first attempt's
   start), both read from the database, so start-up and the polling do not count; the
   peak PSS of the supervisor and its workers is sampled meanwhile;
3. with the workers idle, enqueue ``--latency-jobs`` stamp jobs one at a time, a random
   0-50 ms apart: latency = the job's own ``time.time()`` at its start (its result) minus
   the one taken just before the `Client.enqueue` call (one host, one clock). The call's
   own commit is included: a job can start before the call has returned (its worker is
   woken at the commit), so a clock read after the return would make some latencies
   negative;
4. stop the supervisor (SIGTERM) and delete the bench's jobs, unless ``--keep``.
"""

from __future__ import annotations

import json
import random
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

import click

from jobsup.client import Client
from jobsup.durations import parse_duration
from jobsup.errors import BadInput, JobsupError
from jobsup.ops.benchprocess import BenchSupervisor
from jobsup.ops.options import Target, json_option, with_target
from jobsup.settings import MAX_CONCURRENCY
from jobsup.store.schema import SUCCEEDED

CHUNK = 5000  # jobs per enqueue_many call
POLL = 0.2  # seconds between counts of the jobs still to do
STALL = 60.0  # seconds without a job finishing (beyond one job's sleep) that fail the run
LATENCY_POLL = 0.002  # seconds between looks at a latency job
LATENCY_GAP = 0.05  # the longest random idle gap between latency jobs, in seconds
MAX_WORKERS = 256  # a typo such as --workers 20000 would fork until the machine ran out of memory


@dataclass(frozen=True)
class Figures:
    database: str
    jobs: int
    workers: int
    concurrency: int
    claim_batch: int
    sleep_seconds: float
    enqueue_jobs_per_s: float
    jobs_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    peak_pss_mb: float | None


@click.command()
@click.option("--jobs", type=int, default=10_000, show_default=True, help="Jobs to enqueue and process.")
@click.option("--workers", type=int, default=2, show_default=True, help="Worker processes of the bench queue.")
@click.option("--concurrency", type=int, default=1, show_default=True, help="Jobs each worker runs at once.")
@click.option("--claim-batch", "batch", type=int, default=100, show_default=True, help="Jobs claimed at once.")
@click.option("--sleep", default="0", show_default=True, help="Each job sleeps this long (e.g. 50ms); 0: no-ops.")
@click.option("--latency-jobs", type=int, default=100, show_default=True, help="Jobs timed one by one; 0: none.")
@click.option("--keep", is_flag=True, help="Leave the bench's jobs in the database (their queue is printed).")
@json_option
@with_target
def bench(
    target: Target,
    jobs: int,
    workers: int,
    concurrency: int,
    batch: int,
    sleep: str,
    latency_jobs: int,
    keep: bool,
    as_json: bool,
) -> None:
    """Measure enqueue and processing throughput, idle latency and memory on this database.

    A real `jobsup start` works a queue of the bench's own, so other queues and their
    workers are untouched (though they share the database's capacity while it runs)."""
    checked = (("--jobs", jobs), ("--workers", workers), ("--concurrency", concurrency), ("--claim-batch", batch))
    for option, value in checked:
        if value < 1:
            raise BadInput(f"{option} must be at least 1, not {value}")
    if workers > MAX_WORKERS:
        raise BadInput(f"--workers must be at most {MAX_WORKERS}, not {workers}")
    if concurrency > MAX_CONCURRENCY:
        raise BadInput(f"--concurrency must be at most {MAX_CONCURRENCY}, not {concurrency}")
    if latency_jobs < 0:
        raise BadInput(f"--latency-jobs must be 0 or more, not {latency_jobs}")
    seconds = parse_duration(sleep, what="--sleep")
    from jobsup import bench as bench_jobs  # registers the bench's job types here, not at import
    from jobsup.store import migrate

    url = target.settings().database_url
    client = Client(url)
    migrate.upgrade(client.database)
    queue = f"jobsup-bench-{secrets.token_hex(4)}"
    show = not as_json and sys.stderr.isatty()
    name, payload = (bench_jobs.SLEEP, {"seconds": seconds}) if seconds > 0 else (bench_jobs.NOOP, None)
    ids: list[int] = []  # of the enqueue phase, as far as it got
    try:
        enqueue_rate = enqueue_phase(client, queue, name, payload, jobs, ids, show)
        first_id, last_id = min(ids), max(ids)
        shape = f"{workers}:{concurrency}"
        with BenchSupervisor(url, queue, shape, batch, target.config) as supervisor:
            peak = wait_until_done(client, supervisor, queue, jobs, seconds, show)
            rate = processing_rate(client, supervisor, queue, first_id, last_id, jobs)
            samples = latency_phase(client, supervisor, queue, bench_jobs.STAMP, latency_jobs, show)
            peak = _peak(peak, supervisor.pss_mb())
    except KeyboardInterrupt:
        raise click.Abort() from None
    finally:
        try:
            if keep:
                click.echo(f"jobsup bench: kept its jobs on queue {queue}", err=True)
            else:
                client.store.retention.queue_delete(queue, after=min(ids) - 1 if ids else None)
        finally:
            client.close()
    figures = Figures(
        database=client.database.safe_url,
        jobs=jobs,
        workers=workers,
        concurrency=concurrency,
        claim_batch=batch,
        sleep_seconds=seconds,
        enqueue_jobs_per_s=round(enqueue_rate, 1),
        jobs_per_s=round(rate, 1),
        latency_p50_ms=None if not samples else round(percentile(samples, 50), 3),
        latency_p99_ms=None if not samples else round(percentile(samples, 99), 3),
        peak_pss_mb=None if peak is None else round(peak, 1),
    )
    if as_json:
        click.echo(json.dumps(asdict(figures)))
    else:
        show_figures(figures)


def enqueue_phase(client: Client, queue: str, name: str, payload: Any, jobs: int, ids: list[int], show: bool) -> float:
    """Enqueue `jobs` jobs, adding their ids to `ids`; jobs per second."""
    began = time.perf_counter()
    with Progress(show, jobs, "enqueue") as bar:
        for start in range(0, jobs, CHUNK):
            count = min(CHUNK, jobs - start)
            ids += client.enqueue_many([{"name": name, "payload": payload, "queue": queue}] * count)
            bar.update_to(len(ids))
    elapsed = time.perf_counter() - began
    return jobs / max(elapsed, 1e-9)


def wait_until_done(
    client: Client, supervisor: BenchSupervisor, queue: str, jobs: int, sleep: float, show: bool
) -> float | None:
    """Poll until no job of `queue` is pending or running; the peak PSS seen meanwhile."""
    peak: float | None = None
    left, moved = jobs, time.monotonic()
    with Progress(show, jobs, "process") as bar:
        while True:
            supervisor.check_alive()
            now_left = client.store.reads.job_live_count(queue)
            peak = _peak(peak, supervisor.pss_mb())
            bar.update_to(jobs - now_left)
            if now_left == 0:
                return peak
            if now_left != left:
                left, moved = now_left, time.monotonic()
            elif time.monotonic() - moved > STALL + sleep:
                raise JobsupError(
                    f"no bench job finished for {STALL + sleep:g} s ({jobs - left} of {jobs} done); "
                    f"{supervisor.log_tail()}"
                )
            time.sleep(POLL)


def processing_rate(
    client: Client, supervisor: BenchSupervisor, queue: str, first_id: int, last_id: int, jobs: int
) -> float:
    """Jobs per second from the first attempt's start to the last job's finish."""
    succeeded, first_start, last_finish = client.store.reads.job_span(queue, first_id, last_id)
    if succeeded != jobs or first_start is None or last_finish is None:
        raise JobsupError(f"only {succeeded} of the {jobs} bench jobs succeeded; {supervisor.log_tail()}")
    return jobs / max((last_finish - first_start).total_seconds(), 1e-6)


def latency_phase(
    client: Client, supervisor: BenchSupervisor, queue: str, name: str, count: int, show: bool
) -> list[float]:
    """Milliseconds from calling `Client.enqueue` to the job starting, one job at a time."""
    samples: list[float] = []
    gaps = random.Random()
    with Progress(show, count, "latency") as bar:
        for number in range(count):
            time.sleep(gaps.uniform(0, LATENCY_GAP))  # so the worker is idle in its wait
            enqueued = time.time()
            job_id = client.enqueue(name, queue=queue)
            samples.append((started_at(client, supervisor, job_id) - enqueued) * 1000)
            bar.update_to(number + 1)
    return samples


def started_at(client: Client, supervisor: BenchSupervisor, job_id: int) -> float:
    """The start time a bench job returned, once it has succeeded."""
    deadline = time.monotonic() + STALL
    while time.monotonic() < deadline:
        found = client.get(job_id)
        if found is not None and found.status == SUCCEEDED:
            return float(found.result)
        if found is not None and found.finished_at is not None:
            raise JobsupError(f"bench job {job_id} ended {found.status}: {found.last_error}")
        supervisor.check_alive()
        time.sleep(LATENCY_POLL)
    raise JobsupError(f"bench job {job_id} did not succeed within {STALL:g} s; {supervisor.log_tail()}")


def percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * percent // 100))
    return ordered[int(rank) - 1]


def show_figures(figures: Figures) -> None:
    def number(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    rows = [
        ("database", figures.database),
        ("jobs", f"{figures.jobs:,}"),
        ("workers", str(figures.workers)),
        ("concurrency", str(figures.concurrency)),
        ("claim batch", str(figures.claim_batch)),
        ("sleep", f"{figures.sleep_seconds * 1000:g} ms" if figures.sleep_seconds else "0 (no-op jobs)"),
        ("enqueue jobs/s", number(figures.enqueue_jobs_per_s)),
        ("processing jobs/s", number(figures.jobs_per_s)),
        ("latency p50 ms", number(figures.latency_p50_ms, 2)),
        ("latency p99 ms", number(figures.latency_p99_ms, 2)),
        ("peak PSS MB", number(figures.peak_pss_mb)),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"{label.ljust(width)}  {value}")


class Progress:
    """A progress bar on stderr, or nothing at all (with --json, or off a terminal)."""

    def __init__(self, show: bool, length: int, label: str) -> None:
        self._bar = click.progressbar(length=length, label=label.ljust(8), file=sys.stderr) if show else None
        self._done = 0

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def update_to(self, done: int) -> None:
        if self._bar is not None and done > self._done:
            self._bar.update(done - self._done)
        self._done = max(self._done, done)


def _peak(peak: float | None, sample: float | None) -> float | None:
    return sample if peak is None else peak if sample is None else max(peak, sample)
