"""`Client.wait` and `AsyncClient.wait`: a job's end as a running `jobsup start` writes it,
on each database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import jobsup


def test_wait_returns_each_end_a_real_worker_writes(client: jobsup.Client, start: Callable[..., object]) -> None:
    start("--queue", "default=2")
    done = client.enqueue("work", {"seconds": 0.3, "result": {"n": 7}})
    dead = client.enqueue("work", {"fail": True}, max_attempts=2)  # retried once, then dead-lettered
    succeeded = client.wait(done, timeout=120)
    assert (succeeded.status, succeeded.result) == ("succeeded", {"n": 7})
    assert [a.outcome for a in succeeded.history] == ["succeeded"]
    dead_lettered = client.wait(dead, timeout="2m")
    assert dead_lettered.status == "dead_lettered" and [a.outcome for a in dead_lettered.history] == ["failed"] * 2


def test_a_cancelled_job_ends_a_wait(client: jobsup.Client) -> None:
    job_id = client.enqueue("work")
    assert client.cancel(job_id)
    assert client.wait(job_id).status == "cancelled"  # no timeout: it returns as it has ended


def test_a_wait_that_runs_out_says_how_the_job_stood(client: jobsup.Client) -> None:
    job_id = client.enqueue("work")  # no worker runs: it stays pending
    with pytest.raises(jobsup.WaitTimeout, match=f"job {job_id} is still pending after 0.2s") as raised:
        client.wait(job_id, timeout=0.2)
    assert isinstance(raised.value, TimeoutError) and raised.value.job.status == "pending"
    with pytest.raises(jobsup.WaitTimeout, match="after 0s"):
        client.wait(job_id, timeout=0)  # looks once


def test_waiting_for_no_job_or_with_a_bad_timeout_is_refused(client: jobsup.Client) -> None:
    with pytest.raises(jobsup.JobNotFound, match="no job with id 123456"):
        client.wait(123456, timeout=1)
    job_id = client.enqueue("work")
    for bad in (-1, "soon", True):
        with pytest.raises(jobsup.InvalidDuration, match="timeout"):
            client.wait(job_id, timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(jobsup.BadInput, match="a job id is a whole number"):
        client.wait("1")  # type: ignore[arg-type]


def test_an_async_wait_leaves_the_loop_free_and_returns_the_finished_job(
    url: str, start: Callable[..., object]
) -> None:
    start("--queue", "default=1")

    async def scenario() -> None:
        client = jobsup.AsyncClient(url)
        try:
            job_id = await client.enqueue("work", {"seconds": 0.3, "result": "ok"})
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.01)

            ticking = asyncio.create_task(tick())
            finished = await client.wait(job_id, timeout=120)
            ticking.cancel()
            assert (finished.status, finished.result) == ("succeeded", "ok")
            assert ticks > 1  # the loop ran other tasks while it waited
            with pytest.raises(jobsup.WaitTimeout):
                await client.wait(await client.enqueue("work", queue="nobody"), timeout=0.05)
        finally:
            await client.close()

    asyncio.run(scenario())
