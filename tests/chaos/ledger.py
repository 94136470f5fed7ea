"""What the campaign did, as it did it: every operation with its time, and every id jobsup
returned, so the checker can account for each job without trusting jobsup's own lists."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The numbers in an operation's text that are not job ids: other ids, counts, durations, signals.
NOT_JOB_IDS = re.compile(
    r"\b(batch|id|children|key|tag|attempt)=\S+|\b(\w*workflow|supervisor|worker|host) \d+"
    r"|cancel_workflow \d+ -> \d+|kill -9|\d+\.\d+s?|\(\d+\)"
)


_lock = threading.Lock()  # the workload's and the faults' threads both write


@dataclass
class Ledger:
    folder: Path
    t0: float = field(default_factory=time.time)
    operations: int = 0
    faults: int = 0
    jobs: dict[int, str] = field(default_factory=dict)  # every id enqueue returned -> what made it
    batches: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> callbacks given, children
    workflows: dict[int, list[int]] = field(default_factory=dict)  # id -> step job ids
    triggers: dict[str, int] = field(default_factory=dict)  # tag -> the parent job that carries it
    # tag -> (jobs asked for, the ids returned; None: the call raised). Noted before the call.
    bulks: dict[str, tuple[int, list[int] | None]] = field(default_factory=dict)
    cancelled_running: list[tuple[float, int]] = field(default_factory=list)
    retried: set[int] = field(default_factory=set)  # dead letters the campaign retried
    retried_at: dict[int, list[float]] = field(default_factory=dict)  # each, when its retries were issued
    log: list[tuple[float, str]] = field(default_factory=list)

    def note(self, what: str, *, fault: bool = False) -> None:
        with _lock:
            self._note(what, fault)

    def _note(self, what: str, fault: bool) -> None:
        if fault:
            self.faults += 1
        else:
            self.operations += 1
        self.log.append((time.time(), ("FAULT " if fault else "") + what))
        with open(self.folder / "operations.log", "a") as file:
            file.write(f"{time.time() - self.t0:8.2f} {'FAULT ' if fault else ''}{what}\n")

    def took(self, kind: str, ids: list[int]) -> list[int]:
        with _lock:
            for job_id in ids:
                self.jobs[job_id] = kind
        return ids

    def jobs_now(self) -> list[tuple[int, str]]:
        """The ids taken so far, with their kind (the faults' thread reads while the
        workload's adds: a 30-minute soak died of "dictionary changed size")."""
        with _lock:
            return list(self.jobs.items())

    def mentions(self, job_ids: set[int]) -> list[str]:
        """The operations that named one of `job_ids` (for a violation's history)."""
        found = []
        for at, what in self.log:
            named = re.sub(NOT_JOB_IDS, " ", what)
            words = set(re.sub(r"[^0-9]+", " ", named).split())
            if any(str(job_id) in words for job_id in job_ids):
                found.append(f"{at - self.t0:8.2f}s {what}")
        return found
