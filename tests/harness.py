"""Real `jobsup start` processes for the process-level tests."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from children import child_pids, worker_pids

import jobsup

from helpers import wait_until

TESTS = Path(__file__).parent

FAST = {
    "--lease": "30s",
    "--heartbeat": "1s",
    "--poll-interval": "100ms",
    "--maintenance-interval": "500ms",
    "--shutdown-grace": "3s",
    "--metrics-port": "0",
}


_started: list[Supervisor] = []


def stop_all() -> None:
    """Stop every supervisor a test left running (a test that failed before its teardown)."""
    for supervisor in _started:
        supervisor.stop()


class Supervisor:
    """One `jobsup start` in its own session (so a lost host is one killpg away)."""

    def __init__(
        self,
        url: str,
        record: Path,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        **options: str,
    ) -> None:
        """`prefix` runs it through another command that execs it in place, such as
        ``ip netns exec NAME`` (another host's network)."""
        settings = {**FAST, **{f"--{k.replace('_', '-')}": v for k, v in options.items()}}
        self.log_path = log
        command = [*prefix, sys.executable, "-m", "jobsup", "start", "--app", "jobapps", "--database-url", url]
        command += [part for pair in settings.items() for part in pair] + list(args)
        environment = {**os.environ, "PYTHONPATH": str(TESTS), "JOBSUP_TEST_RECORD": str(record), **(env or {})}
        environment.pop("JOBSUP_FAULTS", None)
        self.log = open(log, "ab")  # noqa: SIM115 - open for the supervisor's whole life
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=self.log, env=environment, start_new_session=True
        )
        _started.append(self)

    @property
    def pid(self) -> int:
        return self.process.pid

    def workers(self) -> list[int]:
        return worker_pids(self.pid)

    def wait_for_workers(self, count: int, timeout: float = 30) -> list[int]:
        return wait_until(
            lambda: len(self.workers()) >= count and self.workers(),
            timeout=timeout,
            what=f"{count} workers of supervisor {self.pid}",
        )

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def lose_host(self) -> None:
        """kill -9 the supervisor and all its workers at once (each worker leads its own
        process group, with whatever its job started)."""
        groups = [self.pid, *child_pids(self.pid)]
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.process.wait(10)

    def output(self) -> str:
        if not self.log.closed:  # after stop(), the whole of it
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.log.closed:
            return
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.lose_host()
        self.log.close()


def records(record: Path, job_id: int) -> list[dict[str, Any]]:
    path = record / str(job_id)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def attempt_spans(record: Path, job_id: int) -> dict[int, tuple[float, float]]:
    """Per attempt: the first and the last moment it was seen running."""
    spans: dict[int, tuple[float, float]] = {}
    for entry in records(record, job_id):
        first, last = spans.get(entry["attempt"], (entry["at"], entry["at"]))
        spans[entry["attempt"]] = (min(first, entry["at"]), max(last, entry["at"]))
    return spans


def assert_no_overlap(record: Path, job_id: int) -> None:
    spans = sorted(attempt_spans(record, job_id).values())
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end < start, f"attempts of job {job_id} overlapped: {spans}"


def status_of(client: jobsup.Client, job_id: int) -> str:
    job = client.get(job_id)
    assert job is not None
    return job.status


def history(client: jobsup.Client, job_id: int) -> list[tuple[int, str | None]]:
    job = client.get(job_id)
    assert job is not None
    return [(a.attempt, a.outcome) for a in job.history]


def started_by(record: Path, job_id: int, attempt: int = 1) -> int:
    entries = wait_until(
        lambda: [e for e in records(record, job_id) if e["what"] == "start" and e["attempt"] == attempt],
        timeout=30,
        what=f"attempt {attempt} of job {job_id} to start",
    )
    return int(entries[0]["pid"])


# -- the HTTP endpoints of a running supervisor ----------------------------------------------


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def port_of(supervisor: Supervisor) -> int:
    found = wait_until(
        lambda: re.search(r"metrics.serving url=\S+ port=(\d+)", supervisor.output()), timeout=30, what="metrics port"
    )
    return int(found.group(1))


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample, 0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(found.get(key) == value for key, value in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0
