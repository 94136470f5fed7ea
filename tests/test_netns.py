"""Hosts that lose the network: three `jobsup start` instances, each in its own network
namespace, against one PostgreSQL cluster of the test's own that they reach only through
their links (see netns.py, pgcluster.py, lan.py).

Every scenario checks the promises from what the jobs recorded and what the database says:
no job lost, exactly one successful attempt per job, no two attempts of one job running at
the same time.

The 200 ms / 5 % scenario uses `tc netem` where the kernel has it; where the kernel refuses
netem (Firecracker's, on CI), the loss is an iptables ``statistic`` DROP of 5 % of the
host's outgoing packets and the latency a TCP proxy inside the host's namespace that holds
every chunk 100 ms each way (`delayproxy.py`). The tests are skipped only where the kernel
refuses network namespaces; a missing tool fails them on CI.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobsup

import lan as lans
import netns
import pgcluster
from harness import Supervisor, records
from helpers import wait_until
from lan import Lan, assert_promises, hosts_of, runs, statuses, wait_all

pytestmark = pytest.mark.slow

LEASE = {"lease": "8s", "heartbeat": "2s"}  # short, so a lapsed lease costs seconds


@pytest.fixture(scope="module")
def network() -> Iterator[Lan]:
    problem = netns.unusable() or pgcluster.unusable()
    if problem and "refuses" in problem:
        pytest.skip(problem)
    if problem:
        message = f"the network tests cannot run: {problem}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with lans.built(["a", "b", "c"]) as built:
        yield built


@pytest.fixture
def lan(network: Lan) -> Iterator[Lan]:
    network.reset()
    yield network
    network.reset()


def start_all(lan: Lan, record: Path, tmp_path: Path, **options: str) -> dict[str, Supervisor]:
    started = {
        host.name: lan.start(host, record, tmp_path / f"{host.name}.log", "--queue", "default=2", **options)
        for host in lan.hosts
    }
    for supervisor in started.values():
        supervisor.wait_for_workers(2)
    return started


def started_on(record: Path, job_ids: list[int], host: str) -> list[int]:
    return [job for job, ran_on in hosts_of(record, job_ids).items() if ran_on == host]


def test_a_host_cut_off_past_its_lease_ends_its_jobs_in_time_and_rejoins(
    lan: Lan, record: Path, tmp_path: Path
) -> None:
    supervisors = start_all(lan, record, tmp_path, **LEASE)
    a = lan.hosts[0]
    client = jobsup.Client(lan.url)
    # Half ignore cancellation (the worker must end itself), half stop when told.
    jobs = client.enqueue_many([{"name": "work", "payload": {"seconds": 10, "honour": n % 2 == 0}} for n in range(6)])
    wait_until(lambda: len(hosts_of(record, jobs)) == 6, timeout=30, what="every job to start")
    on_a = started_on(record, jobs, "a")
    assert on_a, f"host a ran none of the jobs: {hosts_of(record, jobs)}"

    cut_at = time.time()
    lan.network.cut(a)
    wait_until(
        lambda: all(any(r["attempt"] == 2 for r in runs(record, job)) for job in on_a),
        timeout=40,
        what=lambda: f"the cut host's jobs to run elsewhere: {[runs(record, job) for job in on_a]}",
    )
    # While cut off, a reaps and restarts the workers that ended themselves (its database
    # calls must not hold up its loop), though it cannot register them yet.
    wait_until(lambda: supervisors["a"].output().count("worker.spawned") >= 4, timeout=20, what="a's workers restarted")
    lan.network.mend(a)  # while the reruns run: a's stale writes must change nothing
    wait_all(lan.url, len(jobs), timeout=60)

    for job in on_a:
        first = [entry for entry in records(record, job) if entry["attempt"] == 1]
        assert max(entry["at"] for entry in first) < cut_at + 8, f"job {job} ran on past its lease: {first[-3:]}"
        assert {r["host"] for r in runs(record, job) if r["attempt"] == 2} != {"a"}
    outcomes = assert_promises(lan.url, record, jobs)
    assert all(outcomes[job][0] != "succeeded" for job in on_a), outcomes

    # The cut host rejoins: with the others gone, it alone runs the next jobs.
    for name in ("b", "c"):
        supervisors[name].signal(signal.SIGTERM)
        supervisors[name].wait(30)
    later = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.2}} for _ in range(4)])
    wait_all(lan.url, len(jobs) + len(later), timeout=60)
    assert set(hosts_of(record, later).values()) == {"a"}
    assert_promises(lan.url, record, jobs + later)
    # And it is listed again: its supervisor and the workers it restarted while cut off.
    listed = wait_until(
        lambda: {row["pid"] for row in client.workers.list()} >= {supervisors["a"].pid, *supervisors["a"].workers()},
        timeout=10,
        what=lambda: f"host a's processes listed: {[(r['kind'], r['pid']) for r in client.workers.list()]}",
    )
    assert listed
    client.close()


def test_a_cut_shorter_than_the_lease_reruns_nothing(lan: Lan, record: Path, tmp_path: Path) -> None:
    start_all(lan, record, tmp_path, lease="20s", heartbeat="2s")
    a = lan.hosts[0]
    client = jobsup.Client(lan.url)
    jobs = client.enqueue_many([{"name": "work", "payload": {"seconds": 8, "honour": True}} for _ in range(6)])
    wait_until(lambda: len(hosts_of(record, jobs)) == 6, timeout=30, what="every job to start")
    on_a = started_on(record, jobs, "a")
    assert on_a, f"host a ran none of the jobs: {hosts_of(record, jobs)}"

    lan.network.cut(a)
    time.sleep(4)  # the outage itself (two missed renewals), not a wait for something
    lan.network.mend(a)
    wait_all(lan.url, len(jobs), timeout=60)

    outcomes = assert_promises(lan.url, record, jobs)
    assert all(found == ["succeeded"] for found in outcomes.values()), outcomes
    for job in on_a:
        seen = {entry["what"] for entry in records(record, job)}
        assert "end" in seen and "cancelled" not in seen, seen


def test_latency_and_loss_on_one_host_cost_throughput_but_no_job(
    lan: Lan, record: Path, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    figures = {}
    client = jobsup.Client(lan.url)
    for impaired in (False, True):
        lan.reset()
        urls = {host.name: lan.url for host in lan.hosts}
        how = "none"
        if impaired:
            a = lan.hosts[0]
            address, port, how = lan.network.impair(a, (lan.cluster.address, lan.cluster.port), delay=0.2, loss=0.05)
            urls["a"] = lan.cluster.url(lans.DATABASE, address, port)
        folder = record / ("impaired" if impaired else "clear")
        folder.mkdir()
        for host in lan.hosts:
            log = tmp_path / f"{host.name}-{impaired}.log"
            lan.start(host, folder, log, "--queue", "default=2", url=urls[host.name])
        for supervisor in lan.supervisors:
            supervisor.wait_for_workers(2)
        jobs = client.enqueue_many([{"name": "work", "run_at": lans.HELD_BACK} for _ in range(5000)])
        began = lan.release()
        wait_all(lan.url, len(jobs), timeout=300)
        elapsed = time.monotonic() - began
        assert_promises(lan.url, folder, jobs)
        share = sum(1 for host in hosts_of(folder, jobs).values() if host == "a") / len(jobs)
        figures[how] = (len(jobs) / elapsed, share)
    for how, (rate, share) in figures.items():
        line = f"5000 jobs, 3 hosts x 2 workers, impairment of host a: {how}: {rate:.0f} jobs/s (a ran {share:.0%})"
        print(line)
        record_property(f"throughput ({how})", line)
    client.close()


def test_a_database_restart_mid_run_loses_nothing_and_doubles_nothing(lan: Lan, record: Path, tmp_path: Path) -> None:
    start_all(lan, record, tmp_path, lease="10s", heartbeat="2s")
    client = jobsup.Client(lan.url)
    jobs = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.1}} for _ in range(400)])
    client.close()
    wait_until(lambda: statuses(lan.url).get("succeeded", 0) >= 100, timeout=60, what="a quarter of the jobs")
    lan.cluster.restart()
    wait_all(lan.url, len(jobs), timeout=120)
    assert_promises(lan.url, record, jobs)
