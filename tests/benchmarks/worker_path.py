"""The CPU of a worker's own per-job path at claim batch 100, without the database: a
`Worker`'s `run_batch` over no-op jobs claimed once from PostgreSQL, run again and again with
the settle's write left out (the outcomes are handed to the settler as always, and forgotten
as if written). What it measures is the Python around each job: its start (the lease
keeper's records, the slot, the start's announcement, its span), its context and call, its
outcome's hand-over. No statement runs while it is timed, so it is steady where a whole
run's figures spread by a third on a shared machine: its minimum moves by about 1 %,
enough to see a change of a microsecond a job (`worker_floor.py` has the statements
around it; `../shared/bench/peers/` the whole run beside the peers).

    python tests/benchmarks/worker_path.py               # microseconds a job: min, median, max
    python tests/benchmarks/worker_path.py --profile     # cProfile's top functions

Run it with the installs a user has: `pip install -e '.[test]'` brings OpenTelemetry's API
(with no provider set, a look at its global a job: `docs/how-to/opentelemetry.md`), a venv
with `pip install -e '.[postgresql]'` does not. PostgreSQL as in `worker_floor.py` (`ADMIN`).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import uuid
from typing import Any

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def noop(ctx: Any, payload: Any) -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="no-op jobs claimed, in claims of --batch")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=15, help="times the claimed jobs are run, each timed")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions instead")
    args = parser.parse_args()

    from sqlalchemy import create_engine, text

    import jobsup
    from jobsup.observe import metrics
    from jobsup.settings import load
    from jobsup.store import migrate
    from jobsup.store.database import Database
    from jobsup.worker.loop import Worker
    from jobsup.worker.slot import SlotTable
    from jobsup.worker.spec import WorkerSpec
    from jobsup.worker.stop import StopRequest

    name = f"jobsup_path_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        db = Database(url)
        migrate.upgrade(db)
        db.dispose()
        jobsup.job("path-noop")(noop)
        client = jobsup.Client(url)
        client.enqueue_many([{"name": "path-noop"} for _ in range(args.jobs)])
        client.close()
        spec = WorkerSpec(load(), "default", 1, f"path:default#1:{os.getpid()}", os.getppid())
        worker = Worker(spec, Database(url, role="worker"), StopRequest(), SlotTable(1, 1).slot(0), owner_lock=None)
        metrics.defer_job_samples()  # as `Worker.run`
        batches = []
        while claimed := worker.claim(limit=args.batch):
            batches.append(claimed)
        settler = worker.settler
        # Written as far as the worker can tell: its lease keeper forgets them, nothing more.
        settler._write = lambda batch: settler.written([job for job, _ in batch])  # type: ignore[method-assign]
        gc.collect()
        gc.freeze()  # as the supervisor does before it forks its workers

        def run_all() -> None:
            for jobs in batches:
                worker.run_batch(jobs, time.monotonic())

        run_all()  # warm
        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(lambda: [run_all() for _ in range(3)])
            pstats.Stats(profile).sort_stats("tottime").print_stats(30)
            return
        each = []
        for _ in range(args.repeats):
            cpu = time.process_time()
            run_all()
            each.append((time.process_time() - cpu) / args.jobs * 1e6)
        print(
            f"µs of CPU a job: min {min(each):.2f}, median {statistics.median(each):.2f}, max {max(each):.2f} "
            f"({args.repeats} runs of {args.jobs} jobs)"
        )
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
