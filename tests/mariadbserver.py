"""A MariaDB server the test owns: its own data directory (made by mariadb-install-db), its
own port on 127.0.0.1 and its own socket, so the test may stop and start it without
disturbing the shared server on 127.0.0.1:3306 that other tests use.

Every option is given on the command line after --no-defaults: /etc/mysql/my.cnf names the
shared server's data directory, socket and port. Root logs in over TCP without a password,
as the tests expect of the shared server. The durability setting is relaxed (the log is
written at each commit but not flushed to the disk): the server lives as long as one
campaign, and its restarts are clean shutdowns, which lose nothing either way.

mariadbd refuses to run as root unless told --user=root. As root we give it --user=mysql
instead: the user Debian's package makes for the server and runs the shared one as, so this
one cannot write anywhere a root process could; mariadbd switches to it by itself at start,
so the process we start is the server and we can wait for its exit. The price is that mysql
must reach the server's folder, so its parent gets search (not read) permission for others.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql

MARIADBD = Path("/usr/sbin/mariadbd")
INSTALL_DB = "mariadb-install-db"
RUN_AS = "mysql"
# A server's folder is PREFIX, its owner's pid, "-" and mkdtemp's suffix: a server whose owner
# has gone was left by a killed run (a live owner's belongs to another run going on now).
PREFIX = "jobsup-mariadb-{tag}-"
STOP_WAIT = 60.0
START_WAIT = 60.0


def unusable() -> str | None:
    if not MARIADBD.exists() or shutil.which(INSTALL_DB) is None:
        return f"no MariaDB server binaries ({MARIADBD}, {INSTALL_DB}: Debian package mariadb-server)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            return f"running as root, and no {RUN_AS} user to run mariadbd as"
    return None


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """install, start, restart, stop and remove one server in a folder of its own inside
    `parent` (the temporary directory, or a folder directly in it, where `clean_stale` looks)."""

    def __init__(self, tag: str, parent: Path | None = None) -> None:
        if not tag.isalnum():  # the owner's pid follows the tag in the folder's name
            raise ValueError(f"tag {tag!r}: letters and digits only")
        clean_stale(tag)
        parent = Path(parent or tempfile.gettempdir())
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX.format(tag=tag)}{os.getpid()}-", dir=parent))
        self.user = [f"--user={RUN_AS}"] if os.geteuid() == 0 else []
        if self.user:
            parent.chmod(parent.stat().st_mode | 0o011)
            shutil.chown(self.root, RUN_AS, RUN_AS)
        self.data = self.root / "data"
        self.socket = self.root / "mysqld.sock"
        self.log = self.root / "server.log"
        _run(
            INSTALL_DB,
            "--no-defaults",
            f"--datadir={self.data}",
            *self.user,
            "--auth-root-authentication-method=normal",  # root@127.0.0.1 without a password
            "--skip-test-db",
        )
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, database: str = "mysql") -> str:
        return f"mariadb+pymysql://root@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server and wait until it answers over TCP."""
        options = [
            f"--datadir={self.data}",
            *self.user,
            "--bind-address=127.0.0.1",
            f"--port={self.port}",
            f"--socket={self.socket}",
            f"--pid-file={self.root / 'mariadbd.pid'}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--max-connections=200",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
        ]
        with open(self.log, "ab") as log:
            # A session of its own: a Ctrl-C meant for the test does not stop the server
            # under it; close() does (or clean_stale, after a killed run).
            self.process = subprocess.Popen(
                [str(MARIADBD), "--no-defaults", *options],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.time() + START_WAIT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd ended at start ({self.process.returncode}): {self._log_tail()}")
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=2).close()
                return
            except pymysql.MySQLError:
                if time.time() > deadline:
                    raise RuntimeError(f"mariadbd does not answer after {START_WAIT:g}s: {self._log_tail()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """A normal shutdown (SIGTERM: the server cuts every connection, and we wait for its
        exit); killed if it has not ended after STOP_WAIT seconds, and then RuntimeError."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError(f"mariadbd did not shut down within {STOP_WAIT:g}s: {self._log_tail()}") from None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no log)"


def clean_stale(tag: str) -> None:
    """Stop and remove the servers of `tag` that a killed run left behind: those whose owner
    has gone, in the temporary directory or a folder directly in it (a campaign's)."""
    prefix = PREFIX.format(tag=tag)
    top = tempfile.gettempdir()
    for root in glob.glob(os.path.join(top, prefix + "*")) + glob.glob(os.path.join(top, "*", prefix + "*")):
        owner = Path(root).name[len(prefix) :].split("-")[0]
        if not owner.isdigit() or _alive(int(owner)):
            continue
        for pid in _servers_of(Path(root)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.time() + STOP_WAIT
            while _alive(pid) and time.time() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _servers_of(root: Path) -> list[int]:
    """The mariadbd processes whose data directory is in `root` (found by their command line,
    not a pid file, which a server killed at start may not have written)."""
    found = []
    wanted = f"--datadir={root / 'data'}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if arguments[0].endswith(b"mariadbd") and wanted in arguments:
            found.append(int(entry.name))
    return found
