"""python -m tests.chaos --database sqlite|postgresql|mariadb --seconds 120 --seed 1"""

from __future__ import annotations

import argparse
import signal
import sys

from tests.chaos import campaign, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "mariadb"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the database and the run's folder")
    parser.add_argument(
        "--restarts",
        action="store_true",
        help="PostgreSQL and MariaDB: run a private server (tests/pgcluster.py, tests/mariadbserver.py; each needs "
        "the server binaries) and restart it among the faults",
    )
    options = parser.parse_args(argv)
    # A SIGTERM (a test's timeout) unwinds the campaign, so that it stops its supervisors.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    outcome = campaign.run(
        options.database, options.seconds, options.seed, keep=options.keep, restarts=options.restarts
    )
    found = outcome.violations
    if found:
        text = (outcome.folder / "report.txt").read_text() if outcome.folder else ""
        print(text, end="")
        firsts = report.first_seen(found, outcome.t0)
        print(f"seed={options.seed} database={options.database} folder={outcome.folder}")
        print("first violation of each invariant, seconds from the start:")
        for invariant, at in sorted(firsts.items(), key=lambda item: item[1]):
            print(f"  {invariant}: {'at the end' if at == float('inf') else f'{at:.1f}s'}")
    elif not options.keep:
        campaign.cleanup(outcome)
    print(f"operations={outcome.operations} faults={outcome.faults} violations={len(found)} seed={options.seed}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
