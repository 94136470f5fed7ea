"""Why concurrency keys are gated at admission, not in the claim (`jobsup.store.concurrency_keys`).

Builds, in a scratch PostgreSQL database, a bare job table with 10,000 pending jobs of one
saturated key at the head and 2,000 jobs of other keys behind them, and times a claim that
checks the key's count inside the claim statement (a data-modifying CTE on the key's row,
the shape that is correct under competing claimers). Every such claim walks the saturated
key's jobs; jobsup's admission keeps them out of the claim index instead, so its claim does
not change. Prints the median claim time over ``--claims`` claims.

    .venv/bin/python tests/benchmarks/keyed_claim_gate.py
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg

ADMIN = "host=127.0.0.1 user=postgres dbname=postgres"
CLAIM = """
WITH cand AS (
  SELECT id, k, lim FROM j WHERE status = 'pending'
   AND (k IS NULL OR NOT EXISTS (SELECT 1 FROM cc WHERE cc.k = j.k AND cc.running >= j.lim))
  ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED),
ranked AS (SELECT id, k, lim, row_number() OVER (PARTITION BY k ORDER BY id) rn FROM cand),
took AS (UPDATE cc SET running = cc.running + 1 FROM ranked
         WHERE ranked.rn = 1 AND cc.k = ranked.k AND cc.running < ranked.lim RETURNING cc.k),
claimed AS (UPDATE j SET status = 'running' FROM ranked
   WHERE j.id = ranked.id AND (ranked.k IS NULL OR (ranked.rn = 1 AND ranked.k IN (SELECT k FROM took)))
   RETURNING j.id)
SELECT id FROM claimed
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saturated", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=200)
    args = parser.parse_args()
    name = f"jobsup_gate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={name}", autocommit=True) as conn:
            conn.execute("CREATE TABLE j (id bigserial PRIMARY KEY, status text, k text, lim int)")
            conn.execute("CREATE TABLE cc (k text PRIMARY KEY, running int NOT NULL)")
            conn.execute("CREATE INDEX ON j (id) WHERE status = 'pending'")
            conn.execute(
                "INSERT INTO j (status, k, lim) SELECT 'pending', 'K', 1 FROM generate_series(1, %s)",
                (args.saturated,),
            )
            conn.execute("INSERT INTO j (status, k, lim) SELECT 'pending', 'k' || g, 1 FROM generate_series(1, 2000) g")
            conn.execute("INSERT INTO cc SELECT 'k' || g, 0 FROM generate_series(1, 2000) g")
            conn.execute("INSERT INTO cc VALUES ('K', 1)")  # saturated: its one slot is taken
            conn.execute("ANALYZE")
            times = []
            for _ in range(args.claims):
                started = time.perf_counter()
                conn.execute(CLAIM).fetchall()
                times.append(time.perf_counter() - started)
        print(
            f"claim behind {args.saturated:,} jobs of a saturated key: {statistics.median(times) * 1000:.2f} ms median"
        )
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
