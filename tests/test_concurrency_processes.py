"""Concurrency keys across real competing instances (issue 12, parts 1 and 8): four
`jobsup start` supervisors on one database never run more than a key's limit of its jobs
at once, sampled continuously from the database and from the jobs' own records."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from test_concurrency_keys import invariant_holds

import jobsup
from jobsup.store.schema import job

from harness import records, status_of
from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.many_connections]


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_four_supervisors_never_run_more_than_a_keys_limit(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    specs = [{"name": "keyed-work", "payload": {"seconds": 0.05}, "concurrency_key": f"c{n % 3}"} for n in range(60)]
    ids = client.enqueue_many(specs)
    keys = {job_id: f"customer:c{n % 3}" for n, job_id in enumerate(ids)}
    sampled: Counter[str] = Counter()
    done = threading.Event()

    def sample() -> None:
        statement = (
            select(job.c.concurrency_key, func.count())
            .where(job.c.status == "running", job.c.concurrency_key.is_not(None))
            .group_by(job.c.concurrency_key)
        )
        with client.database.read() as conn:
            while not done.is_set():
                for key, count in conn.execute(statement).all():
                    sampled[key] = max(sampled[key], count)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for _ in range(4):
            start("--queue", "default=2")
        wait_until(
            lambda: all(status_of(client, job_id) == "succeeded" for job_id in ids[-3:]), timeout=120, what="all jobs"
        )
        wait_until(lambda: {status_of(client, job_id) for job_id in ids} == {"succeeded"}, timeout=60, what="all")
    finally:
        done.set()
        sampler.join()
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for job_id in ids:
        lines = records(record, job_id)
        started = [line["at"] for line in lines if line["what"] == "start"]
        ended = [line["at"] for line in lines if line["what"] == "end"]
        assert len(started) == len(ended) == 1, lines
        spans[keys[job_id]].append((started[0], ended[0]))
    peaks = {key: most_at_once(found) for key, found in spans.items()}
    assert max(sampled.values()) <= 2 and max(peaks.values()) <= 2, (sampled, peaks)
    assert max(peaks.values()) == 2  # the limit is two, not one: jobs of a key did run side by side
    with client.database.read() as conn:
        assert conn.execute(select(func.count()).where(job.c.status == "waiting")).scalar_one() == 0
    invariant_holds(client)  # every key's count back to nothing
