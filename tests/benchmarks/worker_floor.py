"""Where a worker's CPU goes at claim batch 100, on PostgreSQL: the CPU per 1,000 no-op jobs
of a claim-and-settle loop, with its backends', to four depths: each adds to ``statements``,
``run`` replaces ``bare``'s call with jobsup's, and ``worker`` adds to ``run``
(docs/explanation/performance.md, "Where claim batch 100 stands").

- ``statements``: claim 100 jobs and settle them as succeeded through `Transitions`, the
  statements a worker runs (the claim, which notes each attempt's start on its job row; the
  settle, fenced on the lease's owner and attempt, each job's result in its row and each
  attempt's row written), and nothing else;
- ``bare``: ``statements``, and each job's payload decoded and its function called with one
  context made for all, its outcome recorded: calling a Python function per job at the
  least, whatever the runner;
- ``run``: ``statements``, and each job run as jobsup's worker runs it instead: its function
  looked up, its own context (its log, its cancel event, its progress writer), the call,
  the outcome (`jobsup.worker.execute`);
- ``worker``: a `Worker`'s own claim and `Worker.run_batch`: ``run`` and the loop's
  bookkeeping around each job (the lease keeper's begin and end, with the slot the
  supervisor reads; the start's announcement; the timeout's lookup; the settler's record and
  its write), its lease and settle threads not started.

The loops run in processes forked from one that froze its heap, as a supervisor forks its
workers, with the per-job metric samples summed as a worker sums them; ``--procs 2`` runs
two, claiming from one queue. Left out, against a whole run (`../shared/bench/peers/`,
``cpu_profile.py``): the lease and settle threads' ticks, the supervisor, the INFO line of
each settle, metric files shared between processes, and each process's first batch.
Compare each depth with a peer's whole run in the same session (``cpu_profile.py --peer
pgqueuer --n 20000 --procs 2 --batch-size 100``), round by round, as
`tests/benchmarks/peers.md` says. A process's CPU is `time.process_time`; its backend's is
read from ``/proc/PID/schedstat``, so the database must run on this machine, in the same
pid namespace, reached as ``postgres@127.0.0.1:5432`` (`ADMIN`).

    python tests/benchmarks/worker_floor.py --rounds 3
    python tests/benchmarks/worker_floor.py --rounds 3 --procs 2 --depths worker
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from typing import Any, NoReturn

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEPTHS = ("statements", "bare", "run", "worker")


def noop(ctx: Any, payload: Any) -> None:
    return None


def measure(depth: str, jobs: int, batch: int, procs: int) -> dict[str, float]:
    """One depth's loop over `jobs` no-op jobs in a new database, in `procs` processes forked
    from this one as a supervisor forks its workers, all claiming from the same queue."""
    from sqlalchemy import create_engine, text

    import jobsup
    from jobsup.store import migrate
    from jobsup.store.database import Database

    name = f"jobsup_floor_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"

    def backends_cpu() -> dict[int, float]:
        """Each client backend's time on a CPU, in seconds (`schedstat`: nanoseconds, where
        `stat` counts 10 ms ticks)."""
        with admin.connect() as conn:
            query = text("SELECT pid FROM pg_stat_activity WHERE datname = :name AND backend_type = 'client backend'")
            pids = [row[0] for row in conn.execute(query, {"name": name})]
        times = {}
        for pid in pids:
            with open(f"/proc/{pid}/schedstat") as stat:
                times[pid] = int(stat.read().split()[0]) / 1e9
        return times

    try:
        db = Database(url)
        migrate.upgrade(db)
        db.dispose()
        jobsup.job("floor-noop")(noop)
        client = jobsup.Client(url)
        client.enqueue_many([{"name": "floor-noop"} for _ in range(jobs)])
        client.close()
        # Out of the collector's reach before the fork, as the supervisor does (without it
        # each full collection walks every module's objects: about 2 ms per 1,000 jobs more).
        gc.collect()
        gc.freeze()
        loops: list[Forked] = []
        for index in range(procs):
            loops.append(Forked(depth, url, batch, index, loops))
        for loop in loops:
            loop.wait_ready()
        before = backends_cpu()
        for loop in loops:
            loop.go()
        results = [loop.result() for loop in loops]
        after = backends_cpu()  # the loops' connections are still open
        for loop in loops:
            loop.end()
        done = sum(int(result["jobs"]) for result in results)
        if done + sum(int(result["warm"]) for result in results) != jobs:  # a claim failed and ended a loop early
            sys.exit(f"the loops ran {done} jobs after their first batches, not all {jobs}: see the log above")
        cpu = sum(result["cpu"] for result in results)
        if after.keys() != before.keys():  # a backend's time would be missed
            sys.exit(f"the loops' backends changed during the run: {sorted(before)} then {sorted(after)}")
        db_cpu = sum(after[pid] - before[pid] for pid in after)
        return {"process": cpu / done * 1e6, "backend": db_cpu / done * 1e6, "jobs": done}
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Forked:
    """One loop in a forked process: it connects and runs a batch to warm up, waits for the
    go, runs until the queue is empty, reports its CPU, and keeps its connection until told
    to end (so its backend's time can still be read)."""

    def __init__(self, depth: str, url: str, batch: int, index: int, siblings: list[Forked]) -> None:
        to_child, self.to_child = os.pipe()
        self.from_child, to_parent = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                # The parent's ends, ours and the earlier loops' (each must see its own
                # pipe's end when the parent goes, not when a later sibling does).
                for fd in [self.to_child, self.from_child, *(f for s in siblings for f in s.parent_fds())]:
                    os.close(fd)
                self._child(depth, url, batch, index, to_child, to_parent)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(1)  # never back into the parent's code
        os.close(to_child)
        os.close(to_parent)
        self.replies = os.fdopen(self.from_child)

    def parent_fds(self) -> list[int]:
        return [self.to_child, self.from_child]

    @staticmethod
    def _child(depth: str, url: str, batch: int, index: int, orders: int, replies: int) -> None:
        from jobsup.observe import metrics
        from jobsup.store.database import Database

        loop = Loop(depth, Database(url, role="worker"), owner=f"floor:default#{index + 1}:{os.getpid()}")
        metrics.defer_job_samples()  # as `Worker.run`: the per-job samples summed, not written each
        warm = loop.round(batch)  # warm: the statements prepared, each path taken once
        os.write(replies, b"ready\n")
        if os.read(orders, 1) != b"g":  # the parent is gone
            return
        done, cpu = 0, time.process_time()
        while ran := loop.round(batch):
            done += ran
        cpu = time.process_time() - cpu
        os.write(replies, (json.dumps({"cpu": cpu, "jobs": done, "warm": warm}) + "\n").encode())
        if os.read(orders, 1) == b"e":
            os._exit(0)

    def wait_ready(self) -> None:
        if self.replies.readline() != "ready\n":
            self.failed("before it was ready")

    def go(self) -> None:
        os.write(self.to_child, b"g")

    def result(self) -> dict[str, float]:
        line = self.replies.readline()
        if not line:
            self.failed("in its loop")
        return json.loads(line)

    def failed(self, when: str) -> NoReturn:
        _, status = os.waitpid(self.pid, 0)
        sys.exit(
            f"loop process {self.pid} failed {when} (exit {os.waitstatus_to_exitcode(status)}; its traceback is above)"
        )

    def end(self) -> None:
        os.write(self.to_child, b"e")
        os.waitpid(self.pid, 0)


class Loop:
    """Claim a batch, run it to `depth`, settle it. The `worker` depth is a `Worker`'s own
    claim and `run_batch`, its lease threads not started."""

    def __init__(self, depth: str, db: Any, owner: str) -> None:
        from jobsup.context import JobContext
        from jobsup.settings import load
        from jobsup.worker.boot import open_ahead
        from jobsup.worker.loop import Worker
        from jobsup.worker.slot import SlotTable
        from jobsup.worker.spec import WorkerSpec
        from jobsup.worker.stop import StopRequest

        self.depth, self.owner = depth, owner
        spec = WorkerSpec(load(), "default", 1, owner, os.getppid())
        self.worker = Worker(spec, db, StopRequest(), SlotTable(1, 1).slot(0), owner_lock=None)
        if depth == "worker":
            # As a worker boots: the claim's connection and the one a write sent behind holds,
            # both open before the run, so that no backend joins the run midway.
            open_ahead(db)
        self.transitions, self.services = self.worker.store.transitions, self.worker.services
        self.shared_context = JobContext(0, "floor-noop", "default", 1, 1, {}, None)

    def round(self, batch: int) -> int:
        from jobsup.store.rows import SUCCEEDED, Outcome
        from jobsup.worker.cancel import CancelEvent
        from jobsup.worker.execute import Ran, call, outcome_of, prepare

        if self.depth == "worker":
            claimed_at = time.monotonic()
            jobs = self.worker.claim(limit=batch)
            if jobs:
                self.worker.run_batch(jobs, claimed_at)
            return len(jobs)
        claimed = self.transitions.claim("default", self.owner, limit=batch, lease=300.0)
        outcomes = []
        if self.depth == "statements":
            outcomes = [Outcome(job.held, SUCCEEDED) for job in claimed]
        elif self.depth == "bare":
            for job in claimed:
                started = time.monotonic()
                noop(self.shared_context, json.loads(job.payload))
                outcomes.append(Outcome(job.held, SUCCEEDED, seconds=time.monotonic() - started, worker="floor"))
        else:  # run
            for job in claimed:
                started = time.monotonic()
                prepared = prepare(job, CancelEvent(), self.services)
                ran = prepared if isinstance(prepared, Ran) else call(job, prepared)
                self.services.finished(job)
                outcomes.append(outcome_of(job, ran, None, None, seconds=time.monotonic() - started, worker="floor"))
        if outcomes:
            self.transitions.complete(outcomes)
        return len(claimed)


def one(depth: str, jobs: int, batch: int, procs: int) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_")}
    args = [sys.executable, __file__, "--child", depth, "--jobs", str(jobs), "--batch", str(batch)]
    args += ["--procs", str(procs)]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"the {depth} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs enqueued for each run")
    parser.add_argument("--batch", type=int, default=100, help="jobs a claim takes")
    parser.add_argument("--procs", type=int, default=1, help="loop processes claiming from the one queue")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the depths alternating in each")
    parser.add_argument("--depths", nargs="+", choices=DEPTHS, default=list(DEPTHS))
    parser.add_argument("--child", choices=DEPTHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.jobs, args.batch, args.procs)))
        return
    figures: dict[str, list[dict[str, float]]] = {depth: [] for depth in args.depths}
    for _ in range(args.rounds):  # the depths alternate within each round
        for depth in args.depths:
            figures[depth].append(one(depth, args.jobs, args.batch, args.procs))
    print("| depth | processes, ms per 1,000 jobs (median) | backends (median) | both: median (min-max) |")
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
