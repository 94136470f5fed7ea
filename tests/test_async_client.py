"""`jobsup.AsyncClient`: the client's calls awaited on SQLAlchemy's asyncio engine, with the
same checks, statements and guarantees as `jobsup.Client`, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
from sqlalchemy import make_url, text

import jobsup
from jobsup.store.dialects.mssql import SQLServerDialect

from harness import status_of
from helpers import wait_until


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_enqueue_get_list_and_cancel_awaited(url: str) -> None:
    async def scenario() -> None:
        client = jobsup.AsyncClient(url)
        try:
            job_id = await client.enqueue("a", {"x": 1}, priority=3, actor="alice")
            ids = await client.enqueue_many([{"name": "b", "payload": {"i": i}} for i in range(3)])
            found = await client.get(job_id)
            assert found is not None and (found.name, found.payload, found.priority) == ("a", {"x": 1}, 3)
            listed = await client.list_jobs(status="pending")
            assert {job.id for job in listed} == {job_id, *ids}
            assert await client.cancel(job_id) is True
            assert await client.cancel(job_id) is False
            assert (await client.get(job_id)).status == "cancelled"  # type: ignore[union-attr]
            assert await client.get(10**9) is None
        finally:
            await client.close()

    run(scenario())
    assert jobsup.Client(url).get(1) is not None, "written for every client to see"


def test_bad_input_is_refused_as_by_client_and_writes_nothing(url: str) -> None:
    async def scenario() -> None:
        client = jobsup.AsyncClient(url)
        try:
            with pytest.raises(jobsup.UnknownJob, match="no job type named 'nobody'"):
                await client.enqueue("nobody")
            with pytest.raises(jobsup.InvalidPayload, match="is a set"):
                await client.enqueue("a", {"s": {1}})
            with pytest.raises(jobsup.BadInput, match=r"jobs\[1\]"):
                await client.enqueue_many([{"name": "a"}, {"payload": 1}])
            assert await client.list_jobs() == []
        finally:
            await client.close()

    run(scenario())


def test_concurrent_tasks_each_get_their_own_connection(url: str) -> None:
    async def scenario() -> list[int]:
        client = jobsup.AsyncClient(url)
        try:
            return await asyncio.gather(*(client.enqueue("a", {"i": i}) for i in range(20)))
        finally:
            await client.close()

    ids = run(scenario())
    assert len(set(ids)) == 20
    payloads = {job.id: job.payload for job in jobsup.Client(url).list_jobs(limit=50)}
    assert {payloads[job_id]["i"] for job_id in ids} == set(range(20))


def test_an_enqueue_in_the_callers_async_transaction_commits_and_rolls_back_with_it(url: str) -> None:
    async def scenario() -> tuple[int, int]:
        client = jobsup.AsyncClient(url)
        try:
            async with client.engine.connect() as conn:
                async with conn.begin():
                    kept = await client.enqueue("a", {"kept": True}, connection=conn)
                transaction = await conn.begin()
                dropped = await client.enqueue("a", {"kept": False}, connection=conn)
                await conn.execute(text("SELECT 1"))
                await transaction.rollback()
            return kept, dropped
        finally:
            await client.close()

    kept, dropped = run(scenario())
    client = jobsup.Client(url)
    assert client.get(kept) is not None and client.get(dropped) is None


def test_the_callers_connection_is_left_as_it_was_given(url: str) -> None:
    """jobsup's own reads (the schema check, the definitions) must not change the caller's
    connection or join its transaction: an enqueue on a connection the caller then rolls
    back is gone, on the first call of a client and after it."""

    async def scenario() -> list[int]:
        client = jobsup.AsyncClient(url)
        dropped = []
        try:
            for _ in range(2):
                async with client.engine.connect() as conn:
                    dropped.append(await client.enqueue("a", connection=conn))
                    await conn.rollback()
                async with client.engine.connect() as conn:
                    transaction = await conn.begin()
                    dropped.append(await client.enqueue_many([{"name": "a"}] * 3, connection=conn))
                    await transaction.rollback()
        finally:
            await client.close()
        return [job_id for entry in dropped for job_id in (entry if isinstance(entry, list) else [entry])]

    dropped = run(scenario())
    client = jobsup.Client(url)
    assert all(client.get(job_id) is None for job_id in dropped)


def test_a_missing_schema_names_the_upgrade(tmp_path: Path) -> None:
    async def scenario() -> None:
        client = jobsup.AsyncClient(f"sqlite:///{tmp_path / 'empty.db'}")
        try:
            with pytest.raises(jobsup.SchemaOutdated, match="jobsup db upgrade"):
                await client.enqueue("a", allow_unknown=True)
        finally:
            await client.close()

    run(scenario())


def test_sql_server_is_refused_with_a_clear_error() -> None:
    """Offline (no pyodbc here): the dialect itself refuses an asyncio engine."""
    with pytest.raises(jobsup.UnsupportedDatabase, match="AsyncClient supports SQLite and PostgreSQL"):
        SQLServerDialect().create_async_engine(make_url("mssql+pyodbc://u:p@dsn"))


@pytest.mark.slow
def test_a_job_enqueued_by_the_async_client_is_run_by_a_worker(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    async def enqueue() -> int:
        client = jobsup.AsyncClient(url)
        try:
            return await client.enqueue("work", {"result": 7})
        finally:
            await client.close()

    start("--queue", "default=1")
    job_id = run(enqueue())
    client = jobsup.Client(url)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=30, what="the async-enqueued job")
    assert client.get(job_id).result == 7  # type: ignore[union-attr]


def test_an_unreachable_database_names_host_and_port_and_hides_the_password() -> None:
    async def scenario() -> None:
        client = jobsup.AsyncClient("postgresql://app:secret@127.0.0.1:1/app")
        try:
            with pytest.raises(jobsup.DatabaseUnavailable, match=r"host 127\.0\.0\.1, port 1") as caught:
                await client.get(1)
            assert "secret" not in str(caught.value)
        finally:
            await client.close()

    run(scenario())


def test_the_clients_parts_are_awaited_and_take_the_callers_transaction(url: str) -> None:
    async def scenario() -> tuple[int, int]:
        client = jobsup.AsyncClient(url)
        workflow = jobsup.Workflow("etl")
        workflow.add("b", deps=[workflow.add("a")])
        try:
            async with client.engine.connect() as conn:
                async with conn.begin():
                    kept = await client.workflows.enqueue(workflow, connection=conn)
                transaction = await conn.begin()
                dropped = await client.workflows.enqueue(workflow, connection=conn)
                await transaction.rollback()
            info = await client.workflows.get(kept)
            assert info is not None and sorted(step.name for step in info.steps) == ["a", "b"]
            assert await client.queues.pause("default", reason="deploy", actor="alice") is True
            [queue] = [row for row in await client.queues.list() if row["queue"] == "default"]
            assert (queue["state"], queue["reason"]) == ("paused", "deploy")
            assert [entry.action for entry in await client.audit.list(actor="alice")] == ["queue.pause"]
            assert await client.dead_letters.list() == []
            with pytest.raises(jobsup.BadInput, match=r"an open batch .* use batches\.enqueue"):
                await client.batches.open(on_complete="b")
            with pytest.raises(AttributeError):
                client.workflows._core  # noqa: B018 (only the part's public calls are awaited)
            async with client.engine.connect() as conn:  # refused before the connection is used
                with pytest.raises(jobsup.BadInput, match="resume takes no connection="):
                    await client.queues.resume("default", connection=conn)
            assert copy.copy(client.queues) is not None and hasattr(client.batches, "open")
            return kept, dropped
        finally:
            await client.close()

    kept, dropped = run(scenario())
    client = jobsup.Client(url)
    assert client.workflows.get(kept) is not None and client.workflows.get(dropped) is None
