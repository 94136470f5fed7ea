"""What the outbox costs the hot path: one job's enqueue, claim and settle, with no
publisher configured (the outbox off: no step registered) and with one (every transition
writes its events in its own transaction; the relay is not running, so this is the write
side alone).

Each round runs a subprocess per mode on a fresh PostgreSQL (or SQLite) database (the child
of `plain_claim_settle.py`); it times ``--cycles`` enqueue-claim-complete cycles through the
store and prints the median cycle.
The table shows the medians and the ratio on / off per round (median, min-max).

    .venv/bin/python tests/benchmarks/outbox_cost.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from plain_claim_settle import one


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
                off.append(one(None, kind, 0, args.cycles, folder, events=False, each=True))
                on.append(one(None, kind, 0, args.cycles, folder, events=True, each=True))
            ratios = [n / b for n, b in zip(on, off, strict=True)]
            print(
                f"| {kind} | {statistics.median(off) * 1000:.3f} | {statistics.median(on) * 1000:.3f} | "
                f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |"
            )


if __name__ == "__main__":
    main()
