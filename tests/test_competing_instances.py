"""Two `jobsup start` supervisors and the xdist workers of this run, each a separate
process, processed one set of jobs from session start (see competing.py), on PostgreSQL and
on MariaDB. Run with `pytest -n 4` for four competing xdist instances besides the supervisors."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine, text

import competing
from helpers import alive, wait_until


@pytest.mark.parametrize(
    "server",
    [pytest.param("postgresql", marks=pytest.mark.postgres), pytest.param("mariadb", marks=pytest.mark.mariadb)],
)
def test_every_job_claimed_exactly_once_across_xdist_workers(server: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue({"postgresql": "pg_server", "mariadb": "mariadb_server"}[server])  # fails if it is down
    backend = competing.BACKENDS[server]
    name = competing.database_name(competing.run_id(request.config), backend)
    engine = create_engine(backend.url(name))
    expected = competing.worker_count()

    def finished() -> list[tuple[str, int | None, str | None]]:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT worker, claimed, error FROM competition_participant WHERE finished")).all()
        return [tuple(row) for row in rows] if len(rows) >= expected else []  # type: ignore[misc]

    participants = wait_until(finished, timeout=120, what=f"{expected} competing workers to finish")
    failed = [p for p in participants if p[2]]
    assert failed == [], f"a competing worker failed: {failed}"

    def drained() -> bool:
        with engine.connect() as conn:
            live = "SELECT count(*) FROM jobsup_job WHERE status IN ('pending', 'running')"
            return conn.execute(text(live)).scalar_one() == 0

    wait_until(drained, timeout=120, what="the supervisors to finish the jobs")
    started = competing.supervisors(name, backend)
    assert len(started) == competing.SUPERVISORS, started  # else the check below checks nothing
    competing.stop_supervisors(name, backend)
    # Stopped, not left idling (and polling) for the rest of the run.
    assert [pid for pid, _ in started if alive(pid)] == []
    records = competing.record_dir(competing.run_id(request.config), backend)
    ran_by_supervisors = [
        int(path.name) for path in records.iterdir() if path.name.isdigit() for _ in path.read_text().splitlines()
    ]
    with engine.connect() as conn:
        twice = conn.execute(
            text("SELECT job_id, count(*) FROM competition_claim GROUP BY job_id HAVING count(*) > 1")
        ).all()
        claimed = conn.execute(text("SELECT count(DISTINCT job_id) FROM competition_claim")).scalar_one()
        statuses = dict(
            conn.execute(text("SELECT status, count(*) FROM jobsup_job GROUP BY status")).all()  # type: ignore[arg-type]
        )
        per_worker = dict(
            conn.execute(text("SELECT worker, count(*) FROM competition_claim GROUP BY worker")).all()  # type: ignore[arg-type]
        )
        by_xdist = list(conn.execute(text("SELECT job_id FROM competition_claim")).scalars())
    engine.dispose()
    everything = by_xdist + ran_by_supervisors
    assert twice == []
    assert len(everything) == competing.JOBS, "a job ran twice or not at all"
    assert set(everything) == set(range(1, competing.JOBS + 1))
    assert statuses == {"succeeded": competing.JOBS}
    assert ran_by_supervisors, "the supervisors ran nothing: they did not compete"
    assert sum(p[1] or 0 for p in participants) == claimed == len(by_xdist)
    # Competed, not taken in turns: several processes claimed. Two xdist workers need not both
    # get some: on a loaded host one may first claim after the supervisors' workers (which
    # drain 2,000 no-op jobs in well under a second) have taken the rest; the supervisors'
    # workers compete as processes of their own.
    supervisor_workers = {
        json.loads(line)["pid"]
        for path in records.iterdir()
        if path.name.isdigit()
        for line in path.read_text().splitlines()
    }
    if expected > 1:
        competitors = len(per_worker) + len(supervisor_workers)
        assert len(per_worker) >= 1 and competitors >= 3, (
            f"the competitors did not overlap: claims per xdist worker {per_worker}, "
            f"supervisor workers {supervisor_workers}"
        )
