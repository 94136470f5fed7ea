"""The `jobsup start` that `jobsup bench` measures: a real supervisor in its own session,
logging to a temporary file, and the memory its processes use."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from jobsup.errors import JobsupError

STOP_TIMEOUT = 30.0  # seconds a SIGTERM'd supervisor has before it is killed


class BenchSupervisor:
    """``jobsup start --app jobsup.bench`` on one queue. The database URL goes in the
    environment, not the command line, so a password in it is not in the process list."""

    def __init__(self, url: str, queue: str, shape: str, batch: int, config: Path | None) -> None:
        command = [sys.executable, "-m", "jobsup", "start", "--app", "jobsup.bench", "--queue", f"{queue}={shape}"]
        command += ["--claim-batch", str(batch), "--metrics-port", "-1", "--log-level", "WARNING"]
        if config is not None:
            command += ["--config", str(config)]
        # Only its own queue: no retention purge, process pruning or recurring schedules on
        # a database that real instances may share.
        environment = {**os.environ, "JOBSUP_DATABASE_URL": url, "JOBSUP_HOUSEKEEPING": "false"}
        self.log = tempfile.NamedTemporaryFile(prefix="jobsup-bench-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self.log.name)
        self.failed = False  # it exited on its own: its log is kept, and named in the error
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )

    def __enter__(self) -> BenchSupervisor:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def check_alive(self) -> None:
        """Raise `JobsupError` with the end of its log if the supervisor has exited."""
        code = self.process.poll()
        if code is not None:
            self.failed = True
            raise JobsupError(f"the bench's `jobsup start` exited with status {code}; {self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to its process group, then wait; SIGKILL after `STOP_TIMEOUT`."""
        try:
            if self.process.poll() is None:
                _signal_group(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    _signal_group(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
        finally:
            self.log.close()
            if not self.failed:
                self.log_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 15) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        if not text:
            return f"it logged nothing ({self.log_path})"
        return f"the end of its log ({self.log_path}):\n" + "\n".join(text)

    def pss_mb(self) -> float | None:
        """PSS of the supervisor and its worker processes together, in MB; None without /proc."""
        pid = self.process.pid
        own = pss_kb(pid)
        if own is None:
            return None
        return (own + sum(pss_kb(child) or 0 for child in children_of(pid))) / 1024


def children_of(pid: int) -> list[int]:
    """The child processes of `pid` (empty without /proc, or once it is gone)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def pss_kb(pid: int) -> int | None:
    """The proportional set size of process `pid` in kB; None without /proc."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)
