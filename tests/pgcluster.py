"""A PostgreSQL cluster the test owns: its own data directory, its own port, listening only
on one address (the network tests' bridge), so the namespaces reach it only through their
links, and the test may restart it without disturbing anyone else's server.

initdb refuses to run as root, so the server runs as the ``postgres`` user when the tests
run as root. fsync is off: the cluster lives as long as one test module.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN = Path(os.environ.get("JOBSUP_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
STALE_PATTERN = "jobsup-netns-pg-{tag}-*"


def _as_postgres(*command: str) -> subprocess.CompletedProcess[str]:
    runner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*runner, *command], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def unusable() -> str | None:
    if not (BIN / "initdb").exists():
        return f"no PostgreSQL server binaries in {BIN} (Debian package postgresql-15, or set JOBSUP_TEST_PG_BIN)"
    return None


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


class Cluster:
    """initdb, start, restart, stop and remove one cluster listening on `address` only,
    trusting every client of `subnet`."""

    def __init__(self, address: str, subnet: str, tag: str) -> None:
        self.address = address
        clean_stale(tag)
        self.root = Path(tempfile.mkdtemp(prefix=STALE_PATTERN.format(tag=tag).rstrip("*")))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        _as_postgres(str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.port = free_port(address)
        settings = {
            "listen_addresses": f"'{address}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.data}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {subnet} trust\n")
        self.start()

    def url(self, database: str = "postgres", address: str | None = None, port: int | None = None) -> str:
        return f"postgresql+psycopg://postgres@{address or self.address}:{port or self.port}/{database}"

    def start(self) -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start")

    def restart(self) -> None:
        """Fast shutdown (every connection is cut) and start again."""
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "restart")

    def close(self) -> None:
        stop(self.data)
        shutil.rmtree(self.root, ignore_errors=True)


def stop(data: Path) -> None:
    if (data / "postmaster.pid").exists():
        with contextlib.suppress(RuntimeError):
            _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")


def clean_stale(tag: str) -> None:
    """Stop and remove the clusters of `tag` that a killed run left behind."""
    for root in glob.glob(os.path.join(tempfile.gettempdir(), STALE_PATTERN.format(tag=tag))):
        stop(Path(root) / "data")
        shutil.rmtree(root, ignore_errors=True)
