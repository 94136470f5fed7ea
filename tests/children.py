"""A supervisor's worker processes, as the process tests and the fault campaign see them."""

from __future__ import annotations

from pathlib import Path


def worker_pids(supervisor: int) -> list[int]:
    """The children of `supervisor` titled as jobsup workers. Not every child is one:
    croniter, which the supervisor imports, runs `file -b` on the interpreter
    (`platform.architecture()`), and a test that took that short-lived child for a worker saw
    "its workers" gone at once (CI: test_an_orphan_stuck_outside_a_job...). A worker not yet
    titled (just forked) is left out until it is."""
    try:
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [int(pid) for pid in children if _title(int(pid)).startswith("jobsup: worker")]


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""
