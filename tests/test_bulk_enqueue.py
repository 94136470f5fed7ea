"""Enqueueing: a bulk enqueue returns the ids in the order given, across PostgreSQL's
array chunks and with unique keys mixed in, and wakes the workers of every queue it
touched; a plain enqueue on PostgreSQL is one statement."""

from __future__ import annotations

import json
import select
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy import select as sql_select

import jobsup
from jobsup.store.dialects.pginsert import INSERT_CHUNK
from jobsup.store.dialects.postgresql import NotifyListener
from jobsup.store.schema import job


def test_a_bulk_enqueue_returns_ids_in_order_across_chunks_and_unique_keys(url: str) -> None:
    client = jobsup.Client(url)
    held = client.enqueue("a", {"i": -1}, unique_key="k-held")
    # Varying columns with NULLs among their values, and columns one value for a whole chunk.
    specs: list[dict[str, Any]] = [
        {"name": "a", "payload": {"i": i}, **({"actor": f"u{i}", "priority": i % 3} if i % 2 else {})}
        for i in range(2 * INSERT_CHUNK + 7)
    ]
    specs[3] = {"name": "a", "payload": {"i": 3}, "unique_key": "k-held"}  # a live job has this key
    specs[INSERT_CHUNK + 1] = {"name": "b", "payload": {"i": INSERT_CHUNK + 1}, "unique_key": "k-new", "queue": "q2"}
    ids = client.enqueue_many(specs)
    assert len(ids) == len(specs) and ids[3] == held
    with client.database.read() as conn:
        found = conn.execute(sql_select(job.c.id, job.c.payload, job.c.actor, job.c.priority)).all()
    rows = {row.id: row for row in found}
    assert len(rows) == len(specs)  # the held key's job was not written again
    for position, job_id in enumerate(ids):
        expected = -1 if position == 3 else position
        assert json.loads(rows[job_id].payload) == {"i": expected}, f"jobs[{position}] got id {job_id}"
        if position % 2 and position not in (3, INSERT_CHUNK + 1):
            assert (rows[job_id].actor, rows[job_id].priority) == (f"u{position}", position % 3)
        elif position not in (3, INSERT_CHUNK + 1):
            assert (rows[job_id].actor, rows[job_id].priority) == (None, 0)
    new = client.get(ids[INSERT_CHUNK + 1])
    assert new is not None and new.queue == "q2" and new.name == "b"


@pytest.mark.postgres
def test_a_bulk_enqueue_wakes_the_workers_of_each_of_its_queues(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    listeners = {queue: NotifyListener(client.database, queue) for queue in ("mail", "reports", "idle")}
    try:
        client.enqueue_many([{"name": "a", "queue": "mail"}, {"name": "a", "queue": "reports"}] * 3)
        woken = {queue for queue, listener in listeners.items() if select.select([listener.fileno()], [], [], 2.0)[0]}
        assert woken == {"mail", "reports"}
    finally:
        for listener in listeners.values():
            listener.close()


@pytest.mark.postgres
def test_a_plain_enqueue_is_one_statement(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")  # the schema check and the first connection
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    for engine in (client.database.engine, client.database.single):
        event.listen(engine, "before_cursor_execute", seen)
    client.enqueue("a", {"x": 1})
    client.enqueue_many([{"name": "a"}] * 10)
    assert len(statements) == 2, statements
    assert all("pg_notify" in statement for statement in statements)


def test_a_bulk_enqueue_holds_the_garbage_collector_off_and_restores_it(sqlite_url: str) -> None:
    """Each collector pass during a bulk build walks jobs that all stay alive: held off for
    the call (40 % of its CPU), on again after, and left off if the application had it off."""
    import gc

    client = jobsup.Client(sqlite_url)
    jobs = [{"name": "work", "payload": {"n": n}} for n in range(5000)]
    passes: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(phase)

    gc.callbacks.append(count)
    try:
        client.enqueue_many(jobs)
        assert len(passes) <= 1 and gc.isenabled()  # one: the pass due once it is on again (15 without)
        gc.disable()
        client.enqueue_many([{"name": "work"}])
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.remove(count)
    client.close()


def _jobs_written(client: jobsup.Client) -> int:
    with client.database.read() as conn:
        return len(conn.execute(sql_select(job.c.id)).all())


def _builders() -> list[str]:
    import threading

    return [thread.name for thread in threading.enumerate() if thread.name == "jobsup-enqueue-build"]


def _enqueue_within(client: jobsup.Client, specs: Any, seconds: float = 120.0) -> list[int] | BaseException:
    """`client.enqueue_many(specs)` in a thread, given `seconds`: a builder that never
    stopped would hang the call, and this fails the test instead."""
    import threading

    got: list[list[int] | BaseException] = []

    def call() -> None:
        try:
            got.append(client.enqueue_many(specs))
        except BaseException as exc:
            got.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(seconds)
    assert not caller.is_alive(), f"enqueue_many did not return in {seconds} s"
    return got[0]


@pytest.mark.postgres
@pytest.mark.parametrize("bad_at", [7, 2 * INSERT_CHUNK + 2])
def test_a_bad_job_anywhere_in_a_long_bulk_enqueue_names_its_place_and_writes_nothing(
    postgres_url: str, bad_at: int
) -> None:
    # A long list is built a chunk at a time beside the insert of the chunk before
    # (`jobsup.client.bulk`): a bad job in the last chunk is found after the first two were
    # inserted, and they roll back with it.
    client = jobsup.Client(postgres_url)
    assert client.database.dialect.bulk_chunk == INSERT_CHUNK
    specs: list[dict[str, Any]] = [{"name": "a", "payload": {"i": i}} for i in range(2 * INSERT_CHUNK + 3)]
    specs[bad_at] = {"name": "a", "payload": {"when": float("nan")}}
    raised = _enqueue_within(client, specs)
    assert isinstance(raised, jobsup.InvalidPayload)
    assert str(raised).startswith(f"jobs[{bad_at}]: payload['when'] is nan")
    assert _jobs_written(client) == 0
    assert _builders() == []
    assert len(client.enqueue_many(specs[:bad_at] + specs[bad_at + 1 :])) == len(specs) - 1  # the rest, alone
    client.close()


@pytest.mark.postgres
def test_a_long_bulk_enqueue_whose_insert_fails_stops_its_builder_and_writes_nothing(postgres_url: str) -> None:
    from jobsup.store import faults

    client = jobsup.Client(postgres_url)
    client.enqueue("a")  # the schema check, before the fault window opens
    faults.install(client.database.engine, "any", "any:enqueue@0s+60s")
    raised = _enqueue_within(client, [{"name": "a", "payload": {"i": i}} for i in range(3 * INSERT_CHUNK)])
    assert isinstance(raised, jobsup.DatabaseUnavailable)
    assert _builders() == []
    client.close()
    assert _jobs_written(jobsup.Client(postgres_url)) == 1


@pytest.mark.postgres
def test_a_long_bulk_enqueue_takes_any_sequence_or_iterable(postgres_url: str) -> None:
    # The builder slices the list: a sequence that cannot be sliced (a deque) or a
    # generator is made a list first.
    import collections

    client = jobsup.Client(postgres_url)
    specs = [{"name": "a", "payload": {"i": i}} for i in range(INSERT_CHUNK + 2)]
    ids = client.enqueue_many(collections.deque(specs))
    assert len(ids) == len(specs) and ids == sorted(ids)
    assert len(client.enqueue_many(spec for spec in specs)) == len(specs)
    assert _jobs_written(client) == 2 * len(specs)
    client.close()


def test_a_bad_bulk_enqueue_is_refused_before_the_database_is_asked() -> None:
    # Nothing listens on port 1: a call that reached the database would fail with
    # DatabaseUnavailable, not name the bad job.
    client = jobsup.Client("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(jobsup.BadInput, match=r"^jobs\[0\]: job name 5 is not valid"):
        client.enqueue_many([{"name": 5}])
    assert client.enqueue_many([]) == []
    client.close()
