"""A supervisor's worker processes, as the process tests and the fault campaign see them."""

from __future__ import annotations

from pathlib import Path


def child_pids(supervisor: int) -> list[int]:
    """Every child of `supervisor`: what a "kill the whole host" kills (a worker just forked,
    not titled yet, and a dead one not reaped yet, whose process group may hold what its job
    started, included)."""
    try:
        return [int(pid) for pid in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def worker_pids(supervisor: int) -> list[int]:
    """The children of `supervisor` titled as jobsup workers: what a test counts, or picks to
    kill, as a worker. Not every child is one: croniter, which the supervisor imports, runs
    `file -b` on the interpreter (`platform.architecture()`), and a test that took that
    short-lived child for a worker saw "its workers" gone at once (CI:
    test_an_orphan_stuck_outside_a_job...). A worker not yet titled (just forked) is left out
    until it is."""
    return [pid for pid in child_pids(supervisor) if title_of(pid).startswith("jobsup: worker")]


def title_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""
