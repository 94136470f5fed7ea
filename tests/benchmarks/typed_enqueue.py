"""What typed and sealed parameters cost an enqueue.

``Client.enqueue_many`` of ``--jobs`` (20,000) jobs of three job types into a fresh,
migrated database: untyped (the payload stored as given), typed (checked against a
dataclass's schema, defaults filled in, the dataclass built once), and typed with one
sensitive field (sealed with AES-GCM, then rewritten once the insert gave the ids). Each is
timed around the call, ``--repeat`` (3) times interleaved; the table shows jobs/s as the
median (min-max) and each typed case as a ratio of the untyped one in the same round.

    .venv/bin/python tests/benchmarks/typed_enqueue.py
    .venv/bin/python tests/benchmarks/typed_enqueue.py --databases sqlite --jobs 5000
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated

from sqlalchemy import create_engine, text

import jobsup
from jobsup.store import migrate
from jobsup.store.database import Database

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@dataclasses.dataclass
class Plain:
    to: str
    retries: int | None = 3
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Secret:
    to: str
    token: Annotated[str, jobsup.Sensitive]
    retries: int | None = 3


def _noop(ctx: jobsup.JobContext, payload: object) -> None:
    return None


jobsup.job("bench-untyped")(_noop)
jobsup.job("bench-typed", params=Plain)(_noop)
jobsup.job("bench-sealed", params=Secret)(_noop)

CASES = {
    "untyped": ("bench-untyped", lambda n: {"to": f"user{n}@example.com", "retries": 3, "tags": []}),
    "typed": ("bench-typed", lambda n: {"to": f"user{n}@example.com"}),
    "sealed": ("bench-sealed", lambda n: {"to": f"user{n}@example.com", "token": f"tok-{n}"}),
}


def fresh_url(kind: str, folder: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}"
    name = f"jobsup_bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop(url: str) -> None:
    if url.startswith("postgresql"):
        engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
        engine.dispose()


def one_run(kind: str, case: str, jobs: int, folder: Path) -> float:
    url = fresh_url(kind, folder)
    try:
        migrate.upgrade(Database(url))
        client = jobsup.Client(url)
        name, payload = CASES[case]
        specs = [{"name": name, "payload": payload(n)} for n in range(jobs)]
        client.enqueue_many(specs[:10])  # connections and statements warm
        started = time.perf_counter()
        client.enqueue_many(specs)
        elapsed = time.perf_counter() - started
        client.close()
        return jobs / elapsed
    finally:
        drop(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("JOBSUP_ENCRYPTION_KEYS", "bench:" + base64.urlsafe_b64encode(os.urandom(32)).decode())
    with tempfile.TemporaryDirectory() as folder:
        print("| database | case | jobs/s median (min-max) | ratio to untyped median (min-max) |")
        print("| --- | --- | --- | --- |")
        for kind in args.databases:
            rates: dict[str, list[float]] = {case: [] for case in CASES}
            for _ in range(args.repeat):
                for case in CASES:
                    rates[case].append(one_run(kind, case, args.jobs, Path(folder)))
            for case, found in rates.items():
                ratios = [rate / base for rate, base in zip(found, rates["untyped"], strict=True)]
                print(
                    f"| {kind} | {case} | {statistics.median(found):,.0f} ({min(found):,.0f}-{max(found):,.0f}) | "
                    f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
                )


if __name__ == "__main__":
    main()
