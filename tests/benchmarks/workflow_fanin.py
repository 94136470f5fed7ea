"""Workflows and batches: how long a big workflow takes to enqueue, and whether a batch
child's settle stays O(1) as the batch grows.

1. Enqueue. A workflow of `--steps` steps (default 10,000) in layers of 100, each step
   depending on two steps of the layer before, through `client.workflows.enqueue`: seconds,
   median of `--repeat` runs.
2. Fan-in. One process claims and settles (batches of `--claim`, default 1) every child of a
   batch of N children, for N in `--children` (default 1,000 and 20,000): the median time
   of a settle over the first 500 and the last 500 children. O(1) per settle means the two
   are alike and do not grow with N. The same loop over N plain jobs gives the cost of a
   child's settle over a plain one (a transaction and one indexed look at a sibling). On
   PostgreSQL the tables are analysed after each load, as autovacuum would.

Run from the repository root::

    .venv/bin/python tests/benchmarks/workflow_fanin.py
    .venv/bin/python tests/benchmarks/workflow_fanin.py --databases postgresql --children 1000 100000

PostgreSQL must be on 127.0.0.1:5432 (user postgres, trust auth); the script creates and
drops its own database. Progress goes to stderr, the results to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from claim_throughput import TARGETS
from sqlalchemy import text

import jobsup
from jobsup.store.rows import SUCCEEDED, Outcome

SAMPLE = 500


TABLES = ("jobsup_job", "jobsup_job_attempt", "jobsup_job_dependency", "jobsup_workflow", "jobsup_batch")


def empty(client: jobsup.Client) -> None:
    """Empty the tables; on PostgreSQL by TRUNCATE, so no run inherits the last one's dead rows."""
    with client.database.transaction() as conn:
        if client.database.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(TABLES)}"))
            return
        for table in TABLES:
            conn.execute(text(f"DELETE FROM {table}"))


def layered(steps: int, width: int = 100) -> jobsup.Workflow:
    wf = jobsup.Workflow("bench")
    before: list[jobsup.workflow_spec.Step] = []
    layer: list[jobsup.workflow_spec.Step] = []
    for index in range(steps):
        i = len(layer)
        deps = [before[i], before[(i + 1) % width]] if before else []
        layer.append(wf.add("bench-noop", step=f"s{index}", deps=deps))
        if len(layer) == width:
            before, layer = layer, []
    return wf


def enqueue_seconds(client: jobsup.Client, steps: int) -> float:
    empty(client)
    wf = layered(steps)
    started = time.perf_counter()
    client.workflows.enqueue(wf)
    return time.perf_counter() - started


def settle_times(client: jobsup.Client, target: Any, children: int, claim: int, *, batched: bool) -> list[float]:
    """Seconds of each settle, in order, of `children` jobs (in a batch, or plain)."""
    empty(client)
    specs = [{"name": "bench-noop"}] * children
    if batched:
        client.batches.enqueue(specs, on_complete="bench-noop")
    else:
        client.enqueue_many(specs)
    with client.database.read() as conn:  # what autovacuum would have done after a bulk load
        for statement in target.after_load:
            conn.execute(text(statement))
    transitions, times = client.store.transitions, []
    while claimed := transitions.claim("default", "bench", limit=claim, lease=300.0):
        outcomes = [Outcome(job.held, SUCCEEDED) for job in claimed if job.name == "bench-noop"]
        started = time.perf_counter()
        transitions.complete(outcomes)
        times.append((time.perf_counter() - started) / len(outcomes))
    return times[:children]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--children", type=int, nargs="+", default=[1000, 20_000])
    parser.add_argument("--claim", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    jobsup.job("bench-noop")(lambda ctx, payload: None)
    for kind in args.databases:
        with TARGETS[kind]("fanin") as target:  # a fresh, migrated database of that kind
            client = jobsup.Client(target.url)
            runs = [enqueue_seconds(client, args.steps) for _ in range(args.repeat)]
            median = statistics.median(runs)
            print(
                f"{kind}: workflows.enqueue of {args.steps:,} steps: median {median:.2f} s "
                f"(min {min(runs):.2f}, max {max(runs):.2f}, {args.repeat} runs)"
            )
            for children in args.children:
                print(f"{kind}: settling {children:,} children ...", file=sys.stderr)
                child = settle_times(client, target, children, args.claim, batched=True)
                plain = settle_times(client, target, children, args.claim, batched=False)
                first, last = statistics.median(child[:SAMPLE]), statistics.median(child[-SAMPLE:])
                ratio = statistics.median(child) / statistics.median(plain)
                print(
                    f"{kind}: batch of {children:,}: settle per child median first {SAMPLE} {first * 1e3:.3f} ms, "
                    f"last {SAMPLE} {last * 1e3:.3f} ms (last/first {last / first:.2f}); plain job "
                    f"{statistics.median(plain) * 1e3:.3f} ms (child/plain {ratio:.2f})"
                )
            client.close()


if __name__ == "__main__":
    main()
