"""What a claim part costs a PostgreSQL claim, measured side by side: the paused-queue part
(``--part queue_not_paused``, the default, `jobsup.store.pauses`) or the circuit-breaker
part (``--part breaker_closed``, `jobsup.store.breakers`).

Two claim statements built by the dialect, one from every claim part and one from every
part but the one measured, claim single jobs from one queue in
strict alternation on one connection, so both see the same machine, the same table and
the same moment; each claimed job is settled (not timed). With ``--paused N`` the
queue-state table holds N other paused queues (the lookup is then an index seek); with
``--open N`` the breaker table holds N other job types' open breakers. Prints
each variant's median and p99 per run, and the ratio of the medians. Run from the
repository root (PostgreSQL on 127.0.0.1:5432, user postgres; it makes and drops its own
database)::

    .venv/bin/python tests/benchmarks/pause_part_cost.py --claims 2000 --repeat 3
    .venv/bin/python tests/benchmarks/pause_part_cost.py --part breaker_closed --open 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from claim_throughput import LEASE, QUEUE, Target, load, postgresql_target
from sqlalchemy import text

from jobsup.observe import subscribe_logs_and_metrics
from jobsup.store import claim as claim_parts
from jobsup.store.claim import claim_params, claimed_job
from jobsup.store.database import Database
from jobsup.store.dialects.postgresql import PostgreSQLDialect
from jobsup.store.rows import SUCCEEDED, Outcome
from jobsup.store.store import Store

WITH = "with the part"


def statements(measured: str) -> dict[str, Any]:
    """The claim with every part, and without the measured part (built while it is left out)."""
    with_part = PostgreSQLDialect().claim_statement
    every = list(claim_parts._PARTS)
    assert any(part.name == measured for part in every), f"no claim part named {measured!r} is registered"
    claim_parts._PARTS[:] = [part for part in every if part.name != measured]
    try:
        without = PostgreSQLDialect().claim_statement
    finally:
        claim_parts._PARTS[:] = every
    return {WITH: with_part, "without": without}


def run(target: Target, claims: int, paused: int, measured: str, open_breakers: int) -> dict[str, list[float]]:
    db = Database(target.url)
    load(db, target, pending=2 * claims + 100)
    with db.transaction() as conn:
        conn.execute(text("TRUNCATE jobsup_queue_state"))
        conn.execute(text("TRUNCATE jobsup_breaker"))
        if open_breakers:
            conn.execute(
                text(
                    "INSERT INTO jobsup_breaker (name, state, failures, opened_at, reopen_at, changed_at) "
                    "SELECT 'other-' || n, 'open', 5, now(), now() + interval '1 hour', now() "
                    "FROM generate_series(1, :n) AS n"
                ),
                {"n": open_breakers},
            )
        if paused:
            conn.execute(
                text(
                    "INSERT INTO jobsup_queue_state (queue, paused, changed_by, changed_at) "
                    "SELECT 'other-' || n, true, 'bench', now() FROM generate_series(1, :n) AS n"
                ),
                {"n": paused},
            )
    with db.read() as conn:
        conn.execute(text("ANALYZE jobsup_queue_state"))
        conn.execute(text("ANALYZE jobsup_breaker"))
    store, variants = Store(db), statements(measured)
    params = claim_params(db.dialect, queue=QUEUE, owner="bench", limit=1, lease=LEASE, now=None)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for index in range(claims):
        order = list(variants) if index % 2 == 0 else list(reversed(variants))
        for name in order:
            with db.statement("claim") as conn:
                began = time.perf_counter()
                rows = conn.execute(variants[name], params).all()
                seconds[name].append(time.perf_counter() - began)
            assert len(rows) == 1, f"{name} claimed {len(rows)} jobs with jobs pending"
            store.transitions.complete([Outcome(claimed_job(rows[0]).held, SUCCEEDED)])
    db.dispose()
    return seconds


def main() -> None:
    subscribe_logs_and_metrics()  # as a worker is: every event goes to the log and the metrics
    parser = argparse.ArgumentParser()
    parser.add_argument("--claims", type=int, default=2000, help="timed claims per variant and run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paused", type=int, default=0, help="other paused queues in jobsup_queue_state")
    parser.add_argument("--part", default="queue_not_paused", help="the claim part measured")
    parser.add_argument("--open", type=int, default=0, help="other job types' open breakers in jobsup_breaker")
    options = parser.parse_args()
    print(f"{options.part} part cost: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    ratios = []
    with postgresql_target("pause") as target:
        for number in range(1, options.repeat + 1):
            seconds = run(target, options.claims, options.paused, options.part, options.open)
            medians = {name: statistics.median(values) * 1000 for name, values in seconds.items()}
            for name, values in seconds.items():
                p99 = statistics.quantiles(values, n=100)[98] * 1000
                print(f"run {number}  {name:<14} median {medians[name]:.3f} ms  p99 {p99:.3f} ms")
            ratios.append(medians[WITH] / medians["without"])
            print(f"run {number}  ratio {ratios[-1]:.3f}")
    spread = f"min {min(ratios):.3f}, max {max(ratios):.3f}"
    print(f"median ratio of {options.repeat} runs: {statistics.median(ratios):.3f} ({spread})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
