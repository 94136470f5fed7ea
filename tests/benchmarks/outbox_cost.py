"""What the outbox costs the hot path: one job's enqueue, claim and settle, with no
publisher configured (the outbox off: no step registered) and with one (every transition
writes its events in its own transaction; the relay is not running, so this is the write
side alone).

Each round runs a subprocess per mode on a fresh PostgreSQL (or SQLite) database; it times
``--cycles`` enqueue-claim-complete cycles through the store and prints the median cycle.
The table shows the medians and the ratio on / off per round (median, min-max).

    .venv/bin/python tests/benchmarks/outbox_cost.py
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
from jobsup.events import record
from jobsup.store import Database, migrate
from jobsup.store.rows import Outcome, SUCCEEDED

kind, mode, cycles, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
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
    if mode == "on":
        record.enable()
    client = jobsup.Client(url)
    transitions = client.store.transitions
    times = []
    for _ in range(cycles):
        started = time.perf_counter()
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


def one(mode: str, kind: str, cycles: int, folder: str) -> float:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, mode, str(cycles), folder],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        cwd=folder,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", nargs="+", default=["postgresql", "sqlite"])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| database | off ms/cycle | on ms/cycle | on / off median (min-max) |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.databases:
            off, on = [], []
            for _ in range(args.repeat):
                off.append(one("off", kind, args.cycles, folder))
                on.append(one("on", kind, args.cycles, folder))
            ratios = [n / b for n, b in zip(on, off, strict=True)]
            print(
                f"| {kind} | {statistics.median(off) * 1000:.3f} | {statistics.median(on) * 1000:.3f} | "
                f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |"
            )


if __name__ == "__main__":
    main()
