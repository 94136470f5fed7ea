"""A small network of hosts (`netns.Network`) around one PostgreSQL cluster the test owns
(`pgcluster.Cluster`), with real `jobsup start` supervisors on the hosts: what the network
tests and the network-path benchmark share.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.schema import metadata

from harness import Supervisor, assert_no_overlap, records
from helpers import wait_until
from netns import Host, Network
from pgcluster import Cluster

DATABASE = "jobsup"
# Jobs enqueued not yet due and made due at once, so no host gets a head start.
HELD_BACK = datetime(2100, 1, 1, tzinfo=UTC)
RELEASE = "UPDATE jobsup_job SET run_at = now() WHERE status = 'pending' AND run_at > now()"


class Lan:
    """The network, its cluster (with a migrated database `jobsup`) and its hosts."""

    def __init__(self, network: Network, cluster: Cluster, hosts: Sequence[Host]) -> None:
        self.network, self.cluster, self.hosts = network, cluster, list(hosts)
        self.url = cluster.url(DATABASE)
        self.supervisors: list[Supervisor] = []

    def start(
        self, host: Host | None, record: Path, log: Path, *args: str, url: str | None = None, **options: str
    ) -> Supervisor:
        """A supervisor on `host` (None: on this machine's own network, beside the bridge)."""
        env = {"JOBSUP_TEST_HOST": host.name if host else "local"}
        prefix = host.prefix if host else ()
        supervisor = Supervisor(url or self.url, record, log, *args, env=env, prefix=prefix, **options)
        self.supervisors.append(supervisor)
        return supervisor

    def reset(self) -> None:
        """Stop every supervisor, undo every cut and impairment, empty the tables."""
        self.reset_network()
        for supervisor in self.supervisors:
            supervisor.stop()
        self.supervisors = []
        db = Database(self.url)
        names = ", ".join(table.name for table in metadata.sorted_tables)
        with db.transaction() as conn:
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))
        db.dispose()

    def reset_network(self) -> None:
        for host in self.hosts:
            self.network.restore(host)

    def release(self) -> float:
        """Make every held-back job due now; returns the moment it did (time.monotonic)."""
        db = Database(self.url)
        with db.transaction() as conn:
            conn.execute(text(RELEASE))
        db.dispose()
        return time.monotonic()


@contextmanager
def built(host_names: Sequence[str], index: int | None = None) -> Iterator[Lan]:
    """A network with these hosts and a cluster with a migrated `jobsup` database; always
    torn down, whatever happens inside."""
    network = Network(index)
    try:
        cluster = Cluster(network.address, f"{network.address.rsplit('.', 1)[0]}.0/24", network.tag)
        try:
            admin = Database(cluster.url())
            with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text(f'CREATE DATABASE "{DATABASE}"'))
            admin.dispose()
            db = Database(cluster.url(DATABASE))
            migrate.upgrade(db)
            db.dispose()
            lan = Lan(network, cluster, [network.add_host(name) for name in host_names])
            try:
                yield lan
            finally:
                lan.reset_network()
                for supervisor in lan.supervisors:
                    supervisor.stop()
        finally:
            cluster.close()
    finally:
        network.close()


# -- what the jobs recorded, and what the database says ---------------------------------------


def statuses(url: str) -> dict[str, int]:
    db = Database(url)
    with db.read() as conn:
        rows = conn.execute(text("SELECT status, count(*) FROM jobsup_job GROUP BY status"))
        found = {status: count for status, count in rows}
    db.dispose()
    return found


def all_succeeded(url: str, count: int) -> bool:
    return statuses(url) == {"succeeded": count}


def attempt_outcomes(url: str) -> dict[int, list[str | None]]:
    db = Database(url)
    with db.read() as conn:
        rows = conn.execute(text("SELECT job_id, outcome FROM jobsup_job_attempt ORDER BY job_id, attempt"))
        found: dict[int, list[str | None]] = defaultdict(list)
        for job_id, outcome in rows:
            found[int(job_id)].append(outcome)
    db.dispose()
    return dict(found)


def assert_promises(url: str, record: Path, job_ids: Sequence[int]) -> dict[int, list[str | None]]:
    """No job lost (every one succeeded), exactly one successful attempt each, and no two
    attempts of one job overlapping in time (from what the jobs recorded). Returns each
    job's attempt outcomes."""
    assert statuses(url) == {"succeeded": len(job_ids)}, statuses(url)
    outcomes = attempt_outcomes(url)
    doubles = {job: found for job in job_ids if (found := outcomes.get(job, [])).count("succeeded") != 1}
    assert not doubles, f"jobs without exactly one success: {dict(list(doubles.items())[:10])}"
    for job in job_ids:
        assert records(record, job), f"job {job} succeeded but never recorded a run"
        assert_no_overlap(record, job)
    return outcomes


def runs(record: Path, job_id: int) -> list[dict[str, Any]]:
    """The start record of each attempt of `job_id` (with the host that ran it)."""
    return [entry for entry in records(record, job_id) if entry["what"] == "start"]


def hosts_of(record: Path, job_ids: Sequence[int], attempt: int = 1) -> dict[int, str]:
    return {job: run["host"] for job in job_ids for run in runs(record, job) if run["attempt"] == attempt}


def wait_all(url: str, count: int, timeout: float) -> None:
    wait_until(
        lambda: all_succeeded(url, count), timeout=timeout, what=lambda: f"{count} jobs to succeed, saw {statuses(url)}"
    )
