"""What a worker at claim batch 100 cannot spend less than, on PostgreSQL: the CPU per 1,000
no-op jobs of a claim-and-settle loop in one process, with its backend's, at four depths.

- ``statements``: claim 100 jobs and settle them as succeeded through `Transitions`, the
  statements a worker runs (the claim that opens an attempt row, the fenced settle that
  closes it, a result per row), and nothing else;
- ``bare``: the same, and each job's payload decoded and its function called with one
  context made for all, its outcome recorded: running a Python function per job at the
  least, whatever the runner;
- ``run``: instead, each job run as jobsup's worker runs it: its function looked up, its
  payload decoded, its own context made (its log, its cancel event, its progress), the
  call, the outcome (`jobsup.worker.execute`);
- ``worker``: the same, and the worker loop's bookkeeping around each job: the lease
  keeper's begin and end (the slot the supervisor reads), the start's announcement, the
  settler's record (`Worker.run_batch`); not the lease threads' ticks.

A whole run (`../shared/bench/peers/`, ``cpu_profile.py``) adds a second worker process, the
supervisor and the lease threads. Compare each depth with a peer's whole run in the same
session (``cpu_profile.py --peer pgqueuer --n 20000 --procs 2 --batch-size 100``), as
`tests/benchmarks/peers.md` says. The process's CPU is `time.process_time`; its backend's is
read from ``/proc/PID/schedstat``, so the database must run on this machine.

    python tests/benchmarks/worker_floor.py --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEPTHS = ("statements", "bare", "run", "worker")
OWNER = "floor:default#1:0"


def noop(ctx: Any, payload: Any) -> None:
    return None


def measure(depth: str, jobs: int, batch: int) -> dict[str, float]:
    """One depth's loop over `jobs` no-op jobs in a new database (run in a process of its own)."""
    from sqlalchemy import create_engine, text

    import jobsup
    from jobsup.observe import metrics
    from jobsup.store import migrate
    from jobsup.store.database import Database

    name = f"jobsup_floor_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"

    def backends_cpu() -> float:
        with admin.connect() as conn:
            query = text("SELECT pid FROM pg_stat_activity WHERE datname = :name")
            pids = [row[0] for row in conn.execute(query, {"name": name})]
        total = 0.0
        for pid in pids:
            with open(f"/proc/{pid}/schedstat") as stat:  # nanoseconds on a CPU (`stat` counts ticks)
                total += int(stat.read().split()[0]) / 1e9
        return total

    try:
        db = Database(url, role="worker")
        migrate.upgrade(db)
        jobsup.job("floor-noop")(noop)
        client = jobsup.Client(url)
        client.enqueue_many([{"name": "floor-noop"} for _ in range(jobs)])
        client.close()
        loop = Loop(depth, db)
        # Out of the collector's reach, as a worker's heap is (the supervisor freezes what it
        # holds before it forks): otherwise each full collection walks every module's
        # objects, about 2 ms per 1,000 jobs more in the process here.
        gc.collect()
        gc.freeze()
        metrics.defer_job_samples()  # as `Worker.run`: the per-job samples summed, not written each
        loop.round(batch)  # warm: the statements prepared, each path taken once
        done, cpu, db_cpu = 0, time.process_time(), backends_cpu()
        while ran := loop.round(batch):
            done += ran
        cpu, db_cpu = time.process_time() - cpu, backends_cpu() - db_cpu
        return {"process": cpu / done * 1e6, "backend": db_cpu / done * 1e6, "jobs": done}
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Loop:
    """Claim a batch, run it to `depth`, settle it."""

    def __init__(self, depth: str, db: Any) -> None:
        from jobsup.context import JobContext
        from jobsup.settings import load
        from jobsup.store.store import Store
        from jobsup.worker.lease import LeaseKeeper
        from jobsup.worker.services import JobServices
        from jobsup.worker.settler import Settler
        from jobsup.worker.slot import SlotTable
        from jobsup.worker.spec import WorkerSpec
        from jobsup.worker.starts import Starts
        from jobsup.worker.stop import StopRequest

        self.depth = depth
        store = Store(db, holds_leases=True)
        self.transitions = store.transitions
        self.services = JobServices(store)
        self.shared_context = JobContext(0, "floor-noop", "default", 1, 1, {}, None)
        settings = load()
        spec = WorkerSpec(settings, "default", 1, OWNER, os.getppid())
        self.settler = Settler(
            self.transitions, lease=settings.lease, label=spec.label, written=lambda jobs: self.keeper.drop(jobs)
        )
        self.keeper = LeaseKeeper(
            spec,
            self.transitions,
            SlotTable(1, 1).slot(0),
            StopRequest(),
            self.settler,
            ending=threading.Event(),
            pooled=False,
            end_now=lambda running, code: None,
            title=lambda doing: None,
            announce_starts=lambda: None,
        )
        self.starts = Starts(spec.label)

    def round(self, batch: int) -> int:
        from jobsup.store.rows import SUCCEEDED, Outcome
        from jobsup.worker.execute import Ran, call, outcome_of, prepare
        from jobsup.worker.lease import CancelEvent

        claimed_at = time.monotonic()
        claimed = self.transitions.claim("default", OWNER, limit=batch, lease=300.0)
        outcomes = []
        if self.depth == "statements":
            outcomes = [Outcome(job.held, SUCCEEDED) for job in claimed]
        elif self.depth == "bare":
            for job in claimed:
                started = time.monotonic()
                noop(self.shared_context, json.loads(job.payload))
                outcomes.append(Outcome(job.held, SUCCEEDED, seconds=time.monotonic() - started, worker="floor"))
        elif self.depth == "run":
            for job in claimed:
                started = time.monotonic()
                prepared = prepare(job, CancelEvent(), self.services)
                ran = prepared if isinstance(prepared, Ran) else call(job, prepared)
                self.services.finished(job)
                outcomes.append(outcome_of(job, ran, None, None, seconds=time.monotonic() - started, worker="floor"))
        else:  # worker: as `Worker.run_batch` and `Worker.settle`
            self.keeper.hold(claimed, claimed_at)
            self.starts.batch()
            for job in claimed:
                running = self.keeper.begin(job, None)
                assert running is not None
                self.starts.announce(running)
                prepared = prepare(job, running.cancelled, self.services)
                ran = prepared if isinstance(prepared, Ran) else call(job, prepared)
                running.returned = True
                self.services.finished(job)
                seconds = time.monotonic() - running.started
                outcome = outcome_of(job, ran, running.reason, None, seconds=seconds, worker="floor")
                self.keeper.end(running)
                self.settler.add(job, outcome)
            self.starts.announce_held()
            self.settler.write_here()
        if outcomes:
            self.transitions.complete(outcomes)
        return len(claimed)


def one(depth: str, jobs: int, batch: int) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_")}
    args = [sys.executable, __file__, "--child", depth, "--jobs", str(jobs), "--batch", str(batch)]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"the {depth} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depths", nargs="+", choices=DEPTHS, default=list(DEPTHS))
    parser.add_argument("--child", choices=DEPTHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.jobs, args.batch)))
        return
    figures: dict[str, list[dict[str, float]]] = {depth: [] for depth in args.depths}
    for _ in range(args.rounds):  # the depths alternate within each round
        for depth in args.depths:
            figures[depth].append(one(depth, args.jobs, args.batch))
    print("| depth | process ms / 1,000 jobs | backend | both (median, min-max) |")
    print("| --- | ---: | ---: | ---: |")
    for depth, runs in figures.items():
        both = [run["process"] + run["backend"] for run in runs]
        print(
            f"| {depth} | {statistics.median(run['process'] for run in runs):.1f} | "
            f"{statistics.median(run['backend'] for run in runs):.1f} | "
            f"{statistics.median(both):.1f} ({min(both):.1f}-{max(both):.1f}) |"
        )


if __name__ == "__main__":
    main()
