"""A cancel of a running job is a request: the job's row keeps all it holds (its key's slot,
its place as the breaker's probe, its workflow step unfinished) until the end of its attempt
is written, by its worker or, once that is dead, by its supervisor. Real `jobsup start`
supervisors; each job records its life every 50 ms, so a run is seen while it lasts, even
one whose worker is killed. The jobs here ignore the cancel, the worst case: their workers
end themselves a cancel grace after they learn of it (concurrency review, defect 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import jobsup

from harness import attempt_spans, history, started_by, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow

SUPERVISOR = {"lease": "8s", "heartbeat": "2s", "maintenance_interval": "1s", "poll_interval": "100ms"}


def apart(record: Path, first: tuple[int, int], second: tuple[int, int]) -> None:
    """The runs (job, attempt) `first` and `second` were never alive at once."""
    a, b = attempt_spans(record, first[0])[first[1]], attempt_spans(record, second[0])[second[1]]
    assert a[1] < b[0] or b[1] < a[0], f"run {first} {a} and run {second} {b} were alive at once"


def test_a_cancelled_running_job_keeps_its_key_s_slot_until_it_stops(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("keyed-one", {"seconds": 6}, concurrency_key="k")
    second = client.enqueue("keyed-one", {"seconds": 0.5}, concurrency_key="k")
    assert status_of(client, second) == "waiting"
    start("--queue", "default=2", **SUPERVISOR)
    started_by(record, first)
    assert client.cancel(first)
    wait_until(lambda: status_of(client, second) == "succeeded", timeout=60, what="the second job of the key")
    apart(record, (first, 1), (second, 1))
    assert status_of(client, first) == "cancelled"


def test_a_cancelled_workflow_is_not_retried_beside_its_running_step(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    flow = jobsup.Workflow("nightly")
    flow.add("work", {"seconds": 6}, step="only")
    workflow_id = client.workflows.enqueue(flow)
    info = client.workflows.get(workflow_id)
    assert info is not None
    step = info.steps[0].job_id
    start(**SUPERVISOR)
    started_by(record, step)
    assert client.workflows.cancel(workflow_id) == 1
    with pytest.raises(jobsup.BadInput, match="still running"):
        client.workflows.retry(workflow_id)
    wait_until(lambda: status_of(client, step) == "cancelled", timeout=60, what="the step to end")
    assert client.workflows.retry(workflow_id) == [step]
    wait_until(lambda: 2 in attempt_spans(record, step), timeout=60, what="the step's second attempt")
    apart(record, (step, 1), (step, 2))


def test_a_cancelled_probe_stays_the_only_probe_until_it_stops(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    failing = client.enqueue("probed", {"fail": True})
    start("--queue", "probed=2", **SUPERVISOR)
    wait_until(lambda: status_of(client, failing) == "dead_lettered", timeout=60, what="the breaker to open")
    probe = client.enqueue("probed", {"seconds": 6}, priority=5)
    other = client.enqueue("probed", {"seconds": 0.5})
    started_by(record, probe)
    assert client.cancel(probe)
    wait_until(lambda: status_of(client, other) == "succeeded", timeout=60, what="the next probe")
    apart(record, (probe, 1), (other, 1))
    assert history(client, probe)[-1][0] == 1 and status_of(client, probe) == "cancelled"
