"""A plain job's claim and settle, this code against another tree's, in one run.

Each round, for each code tree (this checkout, and ``--base``: a folder holding an
installed older ``jobsup``, e.g. ``pip install --no-deps --target /tmp/base_pkg <old
checkout>``), a subprocess makes a fresh PostgreSQL (or SQLite) database with that tree's
schema, enqueues ``--jobs`` no-op jobs, and times ``--cycles`` claim-one-then-complete
cycles through the store (no worker process: the statements alone). The trees alternate
within each round, ``--repeat`` rounds; the table shows the median cycle time per tree and
the ratio new / base per round (median, min-max). What a feature adds to the hot path of
jobs that do not use it shows up here.

    .venv/bin/python tests/benchmarks/plain_claim_settle.py --base /tmp/base_pkg
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, statistics, sys, time, uuid
from sqlalchemy import create_engine, text
import jobsup
from jobsup.store.database import Database
from jobsup.store import migrate
from jobsup.store.rows import Outcome, SUCCEEDED

kind, jobs, cycles, folder = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
events, enqueue_each = sys.argv[5] == "on", sys.argv[6] == "each"
admin = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
if kind == "sqlite":
    url = f"sqlite:///{folder}/{uuid.uuid4().hex}.db"
else:
    name = f"jobsup_bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
try:
    migrate.upgrade(Database(url))
    jobsup.job("bench-plain")(lambda ctx, payload: None)
    if events:  # only then: an older tree may have no jobsup.events
        from jobsup.events import publishing

        publishing.enable()
    client = jobsup.Client(url)
    if jobs:
        client.enqueue_many([{"name": "bench-plain"} for _ in range(jobs)])
    transitions = client.store.transitions
    times = []
    for _ in range(cycles):
        started = time.perf_counter()
        if enqueue_each:
            client.enqueue("bench-plain")
        [claimed] = transitions.claim("default", "bench-worker", limit=1, lease=60.0)
        transitions.complete([Outcome(claimed.held, SUCCEEDED)])
        times.append(time.perf_counter() - started)
    client.close()
    print(json.dumps(statistics.median(times[cycles // 10 :])))
finally:
    if kind != "sqlite":
        engine = create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
"""


def one(
    tree: str | None, kind: str, jobs: int, cycles: int, folder: str, *, events: bool = False, each: bool = False
) -> float:
    """The median cycle of one subprocess: `tree`'s jobsup (None: this checkout's), the
    outbox written (`events`), an enqueue inside each cycle (`each`) or `jobs` beforehand."""
    # No JOBSUP_* setting of the caller's (a publisher, say) changes what is measured.
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_")}
    if tree is not None:
        env["PYTHONPATH"] = tree
    flags = ["on" if events else "off", "each" if each else "before"]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(jobs), str(cycles), folder, *flags],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=folder,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="A folder with the older jobsup installed (--target).")
    parser.add_argument("--databases", nargs="+", default=["postgresql", "sqlite"])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| database | base ms/cycle | new ms/cycle | new / base median (min-max) |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.databases:
            base, new = [], []
            for _ in range(args.repeat):
                base.append(one(args.base, kind, args.jobs, args.cycles, folder))
                new.append(one(None, kind, args.jobs, args.cycles, folder))
            ratios = [n / b for n, b in zip(new, base, strict=True)]
            print(
                f"| {kind} | {statistics.median(base) * 1000:.3f} | {statistics.median(new) * 1000:.3f} | "
                f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |"
            )


if __name__ == "__main__":
    main()
