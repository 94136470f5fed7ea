"""How much CPU idle workers use: ``jobsup start --queue default=2`` with no jobs, for
``--seconds`` (60), on SQLite (FIFO pokes, 1 s poll) and PostgreSQL (LISTEN, 5 s poll);
each worker's user+system CPU over that time, from /proc/PID/stat, as % of one core.
Target (SQLite): under 2 %.

    .venv/bin/python tests/benchmarks/idle_cpu.py
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBSUP = Path(sys.executable).parent / "jobsup"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def workers(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def measure(url: str, seconds: float, folder: Path) -> list[float]:
    subprocess.run([str(JOBSUP), "--database-url", url, "db", "upgrade"], check=True, capture_output=True)
    command = [str(JOBSUP), "--database-url", url, "start", "--queue", "default=2", "--metrics-port", "-1"]
    with open(folder / "idle.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(workers(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # boot settles
        pids = workers(process.pid)
        before = {pid: cpu_seconds(pid) for pid in pids}
        time.sleep(seconds)
        return [100 * (cpu_seconds(pid) - before[pid]) / seconds for pid in pids]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="jobsup-idle-"))
    from sqlalchemy import create_engine, text

    admin = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DROP DATABASE IF EXISTS jobsup_bench_idle WITH (FORCE)"))
        conn.execute(text("CREATE DATABASE jobsup_bench_idle"))
    try:
        for name, url in (
            ("sqlite", f"sqlite:///{folder / 'idle.db'}"),
            ("postgresql", "postgresql+psycopg://postgres@127.0.0.1:5432/jobsup_bench_idle"),
        ):
            shares = measure(url, options.seconds, folder)
            print(f"{name:<10} idle worker CPU over {options.seconds:g} s: " + ", ".join(f"{s:.2f}%" for s in shares))
    finally:
        with admin.connect() as conn:
            conn.execute(text("DROP DATABASE IF EXISTS jobsup_bench_idle WITH (FORCE)"))


if __name__ == "__main__":
    main()
