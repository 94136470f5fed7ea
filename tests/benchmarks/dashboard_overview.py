"""Server time of the dashboard's overview page (and of the overview API) on a database of
1,000,000 jobs.

Setup: a fresh SQLite file (or `--database-url`, which must be an empty migrated database),
bulk-loaded in batches with copies of one job row written through the client: `--jobs`
jobs in 20 queues, of which 1,000 pending, 50 running, 500 dead-lettered and the rest
succeeded, finished over the last 7 days (about 6,000 of them in the last hour). Then GET /
GET /api/v1/overview and two filtered job lists are sent `--requests` times each to the app in-process (Starlette's
TestClient, a bearer token, no network) and timed with time.perf_counter. The issue's target
is a median under 200 ms. Run from the repository root::

    .venv/bin/python tests/benchmarks/dashboard_overview.py
    .venv/bin/python tests/benchmarks/dashboard_overview.py --jobs 100000 --requests 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select
from starlette.testclient import TestClient

import jobsup
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.schema import job
from jobsup.web.app import build
from jobsup.web.auth import Auth

TOKEN = "bench-token-0123456789abcdef"
BATCH = 20_000


def seed(client: jobsup.Client, total: int) -> None:
    template_id = client.enqueue("bench-job", {"n": 1}, allow_unknown=True)
    with client.database.read("inspect") as conn:
        template = dict(conn.execute(select(job).where(job.c.id == template_id)).one()._mapping)
    template.pop("id")
    now = datetime.now(UTC)
    rows, written = [], 0
    for n in range(total - 1):
        status = "pending" if n < 1000 else "running" if n < 1050 else "dead_lettered" if n < 1550 else "succeeded"
        finished = now - timedelta(seconds=(n * 604_800 / total)) if status in ("succeeded", "dead_lettered") else None
        rows.append(
            {
                **template,
                "queue": f"queue-{n % 20}",
                "status": status,
                "attempts": 0 if status == "pending" else 1,
                "lease_owner": "bench" if status == "running" else None,
                "lease_expires_at": now + timedelta(hours=1) if status == "running" else None,
                "run_at": (finished or now) - timedelta(seconds=2),
                "finished_at": finished,
            }
        )
        if len(rows) == BATCH:
            with client.database.transaction() as conn:
                conn.execute(insert(job), rows)
            written += len(rows)
            rows = []
            print(f"seeded {written:,}", file=sys.stderr, end="\r")
    if rows:
        with client.database.transaction() as conn:
            conn.execute(insert(job), rows)
    print(file=sys.stderr)


def timed(http: TestClient, path: str, requests: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    http.get(path, headers=headers).raise_for_status()  # warm: connections, templates
    found = []
    for _ in range(requests):
        started = time.perf_counter()
        http.get(path, headers=headers).raise_for_status()
        found.append((time.perf_counter() - started) * 1000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    database = Database(url)
    migrate.upgrade(database)
    client = jobsup.Client(database=database)
    started = time.perf_counter()
    seed(client, args.jobs)
    print(f"seeded {args.jobs:,} jobs in {time.perf_counter() - started:.0f}s on {database.safe_url}", file=sys.stderr)
    http = TestClient(build(client, Auth.parse(tokens=f"operator:{TOKEN}")), base_url="http://127.0.0.1")
    # The overview, and the job list filtered by a name no job has (the worst case: a whole
    # 50,000-id stretch read for nothing) and by a queue (one job in 20).
    for path in ("/", "/api/v1/overview", "/api/v1/jobs?name=no-such-job", "/jobs?queue=queue-3"):
        times = timed(http, path, args.requests)
        median, p95 = statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1]
        print(f"GET {path:<30} {args.jobs:,} jobs: median {median:.1f} ms, p95 {p95:.1f} ms, max {max(times):.1f} ms")


if __name__ == "__main__":
    main()
