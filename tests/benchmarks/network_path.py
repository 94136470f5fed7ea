"""What the network path costs: the throughput of 4 `jobsup start` instances, each in its
own network namespace (a veth pair into a bridge, see tests/netns.py), against one
PostgreSQL, beside the same 4 instances on this machine's own network, against the same
cluster, with the same jobs.

The cluster is the tests' own (tests/pgcluster.py: initdb into a temporary folder, its own
port, listening on the bridge's address only, fsync off); the instances on the host
network connect to that same address, so the only difference is the veth and the bridge.
Each round runs both modes, alternating which goes first: the tables are emptied, ``--jobs``
no-op jobs enqueued not yet due, the 4 instances started (``--queue default=WORKERS``) and,
once all their workers are up, the jobs made due at once. jobs/s = jobs / (the last
``finished_at`` - the first attempt's ``started_at``), read from the database, so start-up
does not count. Every job must have succeeded at its first attempt.

Needs root (network namespaces), ip and the PostgreSQL 15 server binaries. Run from the
repository root:

    .venv/bin/python tests/benchmarks/network_path.py
    .venv/bin/python tests/benchmarks/network_path.py --jobs 5000 --rounds 5 --workers 1

Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text

import jobsup
from jobsup.store.database import Database

import jobapps  # noqa: F401 - registers the job types the supervisors run
import lan as lans

INDEX = 200  # the benchmark's own subnet, 10.213.200.0/24, apart from the tests'
INSTANCES = 4
SPAN = """SELECT count(*) FILTER (WHERE j.status = 'succeeded' AND j.attempts = 1),
       EXTRACT(EPOCH FROM max(j.finished_at) - (SELECT min(started_at) FROM jobsup_job_attempt))
FROM jobsup_job j"""


def one_run(lan: lans.Lan, in_namespaces: bool, jobs: int, workers: int, folder: Path) -> float:
    lan.reset()
    client = jobsup.Client(lan.url)
    client.enqueue_many([{"name": "noop", "run_at": lans.HELD_BACK} for _ in range(jobs)])
    client.close()
    hosts = lan.hosts if in_namespaces else [None] * INSTANCES
    supervisors = [
        lan.start(host, folder, folder / f"{n}.log", "--queue", f"default={workers}", metrics_port="-1")
        for n, host in enumerate(hosts)
    ]
    for supervisor in supervisors:
        supervisor.wait_for_workers(workers, timeout=60)
    lan.release()
    lans.wait_all(lan.url, jobs, timeout=600)
    db = Database(lan.url)
    with db.read() as conn:
        first_time, seconds = conn.execute(text(SPAN)).one()
    db.dispose()
    assert first_time == jobs, f"only {first_time} of {jobs} jobs succeeded at their first attempt"
    lan.reset()
    return jobs / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="workers per instance")
    args = parser.parse_args()
    figures: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp, lans.built([f"h{n}" for n in range(INSTANCES)], INDEX) as lan:
        folder = Path(tmp)
        for round_ in range(args.rounds):
            for in_namespaces in (True, False) if round_ % 2 == 0 else (False, True):
                rate = one_run(lan, in_namespaces, args.jobs, args.workers, folder)
                figures[in_namespaces].append(rate)
                where = "namespaces" if in_namespaces else "host network"
                print(f"round {round_ + 1}: {where}: {rate:.0f} jobs/s", file=sys.stderr)
    ratios = [n / h for n, h in zip(figures[True], figures[False], strict=True)]
    print(f"{args.jobs} no-op jobs, {INSTANCES} instances x {args.workers} worker(s), median of {args.rounds} rounds")
    print("| instances | jobs/s median (min-max) |")
    print("| --- | --- |")
    for in_namespaces, label in ((False, "on the host network"), (True, "each in its own network namespace")):
        rates = figures[in_namespaces]
        print(f"| {label} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) |")
    print(f"namespaces / host network: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
