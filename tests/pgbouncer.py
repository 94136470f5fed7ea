"""A real PgBouncer in transaction mode in front of the test PostgreSQL, for the tests.

Debian's `pgbouncer` (installed by .ci/run, never here) runs as a subprocess on a free port
of its own, with its config, log and pid file in a temporary folder, and trusts every
connection for the user ``postgres`` (the test server trusts 127.0.0.1 too). Any database
name is passed through to 127.0.0.1:5432. PgBouncer refuses to run as root, so under root
it drops to the ``postgres`` user (``-u``). Each xdist worker starts its own.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import wait_until

SERVER_PORT = 5432
POOL_SIZE = 6  # server connections per database: a few, as PostgreSQL's 100 are shared

_CONFIG = """\
[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/users.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 1000
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""


def binary() -> str:
    """Debian's pgbouncer; a test that needs it fails in CI when it is missing."""
    found = shutil.which("pgbouncer") or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(path, os.X_OK)), None
    )
    if found is None:
        message = "pgbouncer is not installed: apt-get install pgbouncer (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


class PgBouncer:
    """One running pgbouncer; `url(name)` reaches database `name` through it."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="jobsup-pgbouncer-"))
        self.port = _free_port()
        (self.folder / "users.txt").write_text('"postgres" ""\n')
        config = self.folder / "pgbouncer.ini"
        config.write_text(
            _CONFIG.format(server_port=SERVER_PORT, port=self.port, folder=self.folder, pool_size=POOL_SIZE)
        )
        command = [binary(), str(config)]
        if os.geteuid() == 0:  # pgbouncer will not run as root
            user = pwd.getpwnam("postgres")
            for path in [self.folder, *self.folder.iterdir()]:
                os.chown(path, user.pw_uid, user.pw_gid)
            command[1:1] = ["-u", "postgres"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(lambda: self._up(), timeout=30, what=lambda: f"pgbouncer on port {self.port}: {self.log()}")

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {self.process.returncode}: {self.log()}")
        return _answers(self.port)

    def url(self, name: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # immediate shutdown: clients are cut off
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)
