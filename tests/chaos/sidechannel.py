"""The side channel: what ran, written by the job functions themselves, never by jobsup.

Each process appends JSON lines to a file of its own (``<pid>.jsonl`` in the folder named
by ``CHAOS_RECORD``) with single ``O_APPEND`` writes, so a line is whole even when the
process is killed right after. `Runs` reads the folder back into one `Run` per (job,
attempt, pid): its start, its end if the function returned or raised, and the last moment
it was seen alive (its last tick), which bounds a run whose process died.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "CHAOS_RECORD"
TICK = 0.2


_count = itertools.count(1)


_tokens: dict[int, str] = {}  # pid -> a token of this process: pids are reused (pid_max 32768)


def run_id() -> str:
    """A name for one call of a job function, unique across processes. The pid alone was
    not: a 30-minute soak started enough processes to reuse pids, and a later process's
    first run replaced an earlier one's of the same name (a success "never ran")."""
    token = _tokens.setdefault(os.getpid(), uuid.uuid4().hex[:8])  # a forked child gets its own
    return f"{os.getpid()}-{token}-{next(_count)}"


def write(event: str, **fields: Any) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    line = json.dumps({"ev": event, "pid": os.getpid(), "t": time.time(), **fields}) + "\n"
    fd = os.open(os.path.join(folder, f"{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dataclass(eq=False)
class Run:
    """One call of a job function."""

    job: int
    attempt: int
    pid: int
    name: str
    start: float
    key: str | None = None
    last_seen: float = 0.0
    end: float | None = None
    outcome: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def until(self) -> float:
        """When it stopped, or the last moment it was seen alive (a lower bound of its
        process's death): never later than the truth, so an overlap found is real."""
        return self.end if self.end is not None else max(self.last_seen, self.start)

    def describe(self, t0: float) -> str:
        end = (
            f"{self.end - t0:7.2f}s {self.outcome}"
            if self.end is not None
            else f"no end (seen to {self.until - t0:.2f}s)"
        )
        more = " ".join(f"{k}={v}" for k, v in sorted(self.extra.items()))
        return (
            f"run job={self.job} attempt={self.attempt} {self.name} key={self.key} pid={self.pid} "
            f"{self.start - t0:7.2f}s .. {end} {more}".rstrip()
        )


class Runs:
    """Reads the side channel incrementally (only what was appended since the last read)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.runs: dict[str, Run] = {}
        self.lock = threading.Lock()  # the faults' thread and the main thread both read

    def refresh(self) -> None:
        with self.lock:
            self._refresh()

    def _refresh(self) -> None:
        for path in sorted(self.folder.glob("*.jsonl")):
            offset = self.offsets.get(path, 0)
            with open(path, "rb") as file:
                file.seek(offset)
                data = file.read()
            whole = data[: data.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(whole)
            for line in whole.splitlines():
                if line.strip():
                    self._take(json.loads(line))

    def _take(self, line: dict[str, Any]) -> None:
        key = line["rid"]
        if line["ev"] == "start":
            extra = {
                k: v for k, v in line.items() if k not in {"ev", "rid", "pid", "t", "job", "attempt", "name", "key"}
            }
            self.runs[key] = Run(
                line["job"], line["attempt"], line["pid"], line["name"], line["t"], line["key"], line["t"], extra=extra
            )
            return
        run = self.runs.get(key)
        if run is None:
            return
        run.last_seen = max(run.last_seen, line["t"])
        if line["ev"] == "end":
            run.end, run.outcome = line["t"], line.get("outcome")

    def all(self) -> list[Run]:
        with self.lock:
            return sorted(self.runs.values(), key=lambda run: run.start)

    def running(self) -> list[Run]:
        with self.lock:
            return [run for run in self.runs.values() if run.end is None]
