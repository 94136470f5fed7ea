"""What a campaign prints on a violation: which invariant, when, and a minimal history of
the jobs involved (their side-channel runs, their attempt rows, the operations that named
them, and the kills of the processes that ran them)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.chaos.checker import Violation
from tests.chaos.ledger import Ledger
from tests.chaos.processes import Kill
from tests.chaos.sidechannel import Run
from tests.chaos.state import EndState

DETAILED = 3  # violations of one invariant shown with their history; the rest in one line each
JOBS_SHOWN = 6


def lines(found: list[Violation], runs: list[Run], ledger: Ledger, end: EndState, kills: list[Kill]) -> list[str]:
    t0 = ledger.t0
    by_job: dict[int, list[Run]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    shown: dict[str, int] = defaultdict(int)
    out = []
    for violation in found:
        out.append(
            f"VIOLATION {violation.invariant} at {violation.at - t0:.1f}s: {violation.message}"
            if violation.at
            else f"VIOLATION {violation.invariant} at the end: {violation.message}"
        )
        shown[violation.invariant] += 1
        if shown[violation.invariant] > DETAILED:
            continue
        for job_id in sorted(violation.jobs)[:JOBS_SHOWN]:
            row = end.jobs.get(job_id)
            if row is not None:
                out.append(
                    f"  job {job_id} {row.name} status={row.status} key={row.concurrency_key} "
                    f"batch={row.batch_id} workflow={row.workflow_id}"
                )
                for attempt, outcome, owner, started in row.attempts:
                    at = started.timestamp() - t0 if started is not None else float("nan")
                    kind = "attempt row" if outcome is not None else "attempt under way (job row)"
                    out.append(f"    {kind} {attempt} {outcome} owner={owner} started_at={at:.2f}s")
            for run in by_job.get(job_id, []):
                died = [k for k in kills if k.pid == run.pid and run.end is None and run.start <= k.at <= run.until + 5]
                out.append("    " + run.describe(t0) + (f" [{died[0].what} at {died[0].at - t0:.2f}s]" if died else ""))
            out += ["    op " + line for line in ledger.mentions({job_id})[:8]]
    return out


def write(
    path: Path, found: list[Violation], runs: list[Run], ledger: Ledger, end: EndState, kills: list[Kill]
) -> None:
    path.write_text("\n".join(lines(found, runs, ledger, end, kills)) + "\n")


def first_seen(found: list[Violation], t0: float) -> dict[str, float]:
    """Per invariant, seconds from the start to its first violation (infinity: only the end
    checks found it)."""
    firsts: dict[str, float] = {}
    for violation in found:
        at = max(0.0, violation.at - t0) if violation.at else float("inf")
        firsts[violation.invariant] = min(firsts.get(violation.invariant, at), at)
    return firsts
