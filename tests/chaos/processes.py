"""The real processes of a campaign: a fresh database, and `jobsup start` supervisors.

Every supervisor runs in a session of its own (so a lost host is one kill of its process
groups away), with its log in the run's folder. Every kill and signal this module sends is
written to the kill log (`Fleet.kills`), the campaign's own record of process deaths.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.chaos.limits import UNPUBLISHED
from tests.children import child_pids, worker_pids

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
MARIADB_ADMIN = "mariadb+pymysql://root@127.0.0.1:3306/mysql"
LEASE = 8.0  # seconds: every supervisor's
FAST = [
    "--lease",
    f"{LEASE:g}s",
    "--heartbeat",
    "2s",
    "--poll-interval",
    "300ms",
    "--maintenance-interval",
    "1s",
    "--shutdown-grace",
    "2s",
    "--metrics-port",
    "-1",
]


def _admin(url: str, statement: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


@dataclass
class Database:
    """A fresh database of one kind, made for one campaign and dropped after it."""

    kind: str
    folder: Path
    # A private server that may be restarted: a PostgreSQL cluster (tests/pgcluster.py) or a
    # mariadbd (tests/mariadbserver.py), instead of the shared server of that kind.
    own_server: bool = False
    url: str = ""
    name: str = field(default_factory=lambda: f"chaos_{uuid.uuid4().hex[:10]}")
    server: Any = None

    def create(self) -> str:
        if self.kind == "sqlite":
            self.url = f"sqlite:///{self.folder / 'jobsup.db'}"
        elif self.kind == "postgresql" and self.own_server:
            from tests import pgcluster

            self.server = pgcluster.Cluster("127.0.0.1", "127.0.0.1/32", f"chaos{os.getpid()}")
            _admin(self.server.url(), f'CREATE DATABASE "{self.name}"')
            self.url = self.server.url(self.name)
        elif self.kind == "postgresql":
            _admin(PG_ADMIN, f'CREATE DATABASE "{self.name}"')
            self.url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{self.name}"
        elif self.kind == "mariadb" and self.own_server:
            from tests import mariadbserver

            # Its folder is in the campaign's; a server left by a killed campaign (whose
            # process has gone) is stopped and removed here.
            self.server = mariadbserver.Server("chaos", self.folder)
            _admin(self.server.url(), f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            self.url = self.server.url(self.name)
        elif self.kind == "mariadb":
            _admin(MARIADB_ADMIN, f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            self.url = f"mariadb+pymysql://root@127.0.0.1:3306/{self.name}"
        else:
            raise SystemExit(f"unknown database {self.kind!r}: sqlite, postgresql or mariadb")
        upgraded = subprocess.run(
            [sys.executable, "-m", "jobsup", "db", "upgrade", "--database-url", self.url],
            capture_output=True,
            text=True,
            env=environment({}),
            cwd=ROOT,
        )
        if upgraded.returncode != 0:  # say why: a campaign that cannot start checks nothing
            raise SystemExit(f"chaos: jobsup db upgrade failed: {upgraded.stderr.strip() or upgraded.stdout.strip()}")
        return self.url

    def restart(self) -> None:
        """Shut the private server down (PostgreSQL: a fast shutdown; MariaDB: a normal one;
        either cuts every connection), and start it again."""
        self.server.restart()

    def drop(self) -> None:
        if self.server is not None:
            self.server.close()
            return
        with contextlib.suppress(Exception):
            if self.kind == "postgresql":
                _admin(PG_ADMIN, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            elif self.kind == "mariadb":
                _admin(MARIADB_ADMIN, f"DROP DATABASE IF EXISTS `{self.name}`")


def environment(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("JOBSUP_CONFIG", "JOBSUP_FAULTS", "JOBSUP_DATABASE_URL"):
        env.pop(name, None)
    return env


@dataclass
class Supervisor:
    role: str
    args: list[str]
    process: subprocess.Popen[bytes]
    started: float
    stopping: bool = False  # sent SIGTERM: shutting down, no longer a target

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def workers(self) -> list[int]:
        return worker_pids(self.pid)


@dataclass
class Kill:
    at: float
    pid: int
    what: str  # worker-kill9 | host-kill9 | supervisor-sigterm


class Fleet:
    """The campaign's supervisors: started, killed, signalled, and all stopped at the end."""

    def __init__(self, url: str, folder: Path, env: dict[str, str]) -> None:
        self.url, self.folder, self.env = url, folder, env
        self.supervisors: list[Supervisor] = []
        self.kills: list[Kill] = []
        self.starts = 0

    def start(self, role: str, args: list[str]) -> Supervisor:
        self.starts += 1
        log = open(self.folder / f"supervisor-{self.starts:03d}-{role}.log", "ab")  # noqa: SIM115 - the child's
        command = [sys.executable, "-m", "jobsup", "start", "--app", "tests.chaos.chaosapp", "--database-url", self.url]
        process = subprocess.Popen(
            [*command, *FAST, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment({**self.env, **({UNPUBLISHED: "1"} if role == "behind" else {})}),
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()
        supervisor = Supervisor(role, args, process, time.time())
        self.supervisors.append(supervisor)
        return supervisor

    def live(self, role: str | None = None) -> list[Supervisor]:
        """The supervisors running and not shutting down."""
        return [s for s in self.supervisors if s.alive() and not s.stopping and (role is None or s.role == role)]

    def kill_worker(self, supervisor: Supervisor, pid: int) -> None:
        self.kills.append(Kill(time.time(), pid, "worker-kill9"))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def lose_host(self, supervisor: Supervisor) -> None:
        for pid in [supervisor.pid, *child_pids(supervisor.pid)]:
            self.kills.append(Kill(time.time(), pid, "host-kill9"))  # each just before its signal
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            supervisor.process.wait(10)

    def terminate(self, supervisor: Supervisor) -> None:
        supervisor.stopping = True
        self.kills.append(Kill(time.time(), supervisor.pid, "supervisor-sigterm"))
        with contextlib.suppress(ProcessLookupError):
            supervisor.process.send_signal(signal.SIGTERM)

    def stop_all(self, timeout: float = 30) -> None:
        """SIGTERM every supervisor still running, wait, then kill what is left (each worker
        leads its own process group, so the groups of its workers too)."""
        for supervisor in self.supervisors:
            if supervisor.alive():
                with contextlib.suppress(ProcessLookupError):
                    supervisor.process.send_signal(signal.SIGTERM)
        deadline = time.time() + timeout
        for supervisor in self.supervisors:
            with contextlib.suppress(subprocess.TimeoutExpired):
                supervisor.process.wait(max(0.1, deadline - time.time()))
            if supervisor.alive():
                for pid in [supervisor.pid, *child_pids(supervisor.pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                supervisor.process.wait(10)

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.folder.glob("supervisor-*.log")))

    def reap_strays(self) -> None:
        """Kill any process still left in the session of one of this campaign's supervisors
        (each started a session of its own; its workers lead process groups inside it), such
        as a worker of a supervisor killed before its workers could be listed. The session
        is how they are found: their titles (setproctitle) no longer show the command."""
        sessions = {supervisor.pid for supervisor in self.supervisors}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) in sessions:  # state, ppid, pgrp, session
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
