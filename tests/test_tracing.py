"""OpenTelemetry traces from enqueue to run, on every real database, with a real `Worker`
run in this process (no fork) and the SDK's in-memory exporter: the job's run span is a
child of the span that enqueued it, carries the job's attributes, is the parent of the
spans the job's own code starts, records a failure; claim and settle have spans of their
own; and an enqueue outside any span stores no trace context."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy import select

import jobsup
from jobsup.observe import tracing
from jobsup.settings import QueueConfig, Settings
from jobsup.store.database import Database
from jobsup.store.schema import job
from jobsup.worker.loop import Worker
from jobsup.worker.pool import Pool
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

from helpers import wait_until

OWNER = "test-host:traced#1:tracing"
EXPORTER = InMemorySpanExporter()


@jobsup.job("trace-ok", queue="traced")
def traced_ok(ctx: jobsup.JobContext, payload: Any) -> None:
    with trace.get_tracer("the-app").start_as_current_span("inside the job"):
        pass


@jobsup.job("trace-boom", queue="traced", max_attempts=1)
def traced_boom(ctx: jobsup.JobContext, payload: Any) -> None:
    raise ValueError("boom")


@jobsup.job("trace-async", queue="traced")
async def traced_async(ctx: jobsup.JobContext, payload: Any) -> None:
    with trace.get_tracer("the-app").start_as_current_span("inside the job"):
        pass


@pytest.fixture(scope="session")
def provider() -> TracerProvider:
    """The SDK's provider, set once per process (OpenTelemetry refuses a second)."""
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(made)
    assert trace.get_tracer_provider() is made, "another test set a TracerProvider first"
    return made


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture
def worker(url: str) -> Iterator[Worker]:
    settings = Settings(database_url=url, lease=60.0, heartbeat=10.0, queues={"traced": QueueConfig()})
    spec = WorkerSpec(settings, "traced", 1, OWNER, os.getppid())
    slot = SlotTable(1, 3).slot(0)  # room for the pool test's three jobs at once
    slot.reset()
    db = Database(url, role="worker")
    made = Worker(spec, db, StopRequest(), slot, None)
    yield made
    db.dispose()


def run_claimed(worker: Worker) -> None:
    """What the worker's loop does with one job: claim, run, settle (the writes here)."""
    jobs = worker.claim()
    assert len(jobs) == 1
    worker.keeper.hold(jobs, time.monotonic())
    running = worker.keeper.begin(jobs[0], None)
    assert running is not None
    worker.run_one(running)
    worker.settler.write_here()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_tracing_is_on_when_opentelemetry_is_installed() -> None:
    assert tracing.ENABLED


@pytest.mark.parametrize("name", ["trace-ok", "trace-async"])
def test_the_run_span_is_a_child_of_the_enqueuing_span_and_the_jobs_own_spans_its_children(
    client: jobsup.Client, worker: Worker, spans: InMemorySpanExporter, name: str
) -> None:
    with trace.get_tracer("the-web-app").start_as_current_span("POST /reports") as request:
        job_id = client.enqueue(name)
    context = request.get_span_context()
    with client.database.read() as conn:
        stored = conn.execute(select(job.c.traceparent).where(job.c.id == job_id)).scalar()
    assert stored == f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    run_claimed(worker)
    [run] = named(spans, f"jobsup.run {name}")
    assert run.parent is not None and run.parent.span_id == context.span_id
    assert run.context.trace_id == context.trace_id and run.kind == SpanKind.CONSUMER
    assert dict(run.attributes or {}) == {
        "jobsup.job.id": job_id,
        "jobsup.job.name": name,
        "jobsup.queue": "traced",
        "jobsup.attempt": 1,
        "jobsup.outcome": "succeeded",
    }
    assert run.status.status_code != StatusCode.ERROR
    [inside] = named(spans, "inside the job")
    assert inside.parent is not None and inside.parent.span_id == run.context.span_id
    [claimed] = named(spans, "jobsup.claim")
    assert claimed.attributes is not None and claimed.attributes["jobsup.queue"] == "traced"
    [settled] = named(spans, "jobsup.settle")  # a success written after the run ended: linked to it
    assert settled.attributes is not None and settled.attributes["jobsup.transition"] == "complete"
    assert [link.context.span_id for link in settled.links] == [run.context.span_id]


def test_jobs_run_by_the_pool_join_their_traces_plain_and_async(
    client: jobsup.Client, worker: Worker, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("the-web-app").start_as_current_span("POST /both") as request:
        # Two async jobs of one claim: each task takes its own run's span, not the first's.
        client.enqueue_many([{"name": "trace-ok"}, {"name": "trace-async"}, {"name": "trace-async"}])
    pool = Pool(3, worker.aio, worker.services)
    jobs = worker.claim(limit=3)
    worker.keeper.hold(jobs, time.monotonic())
    for each in jobs:
        running = worker.keeper.begin(each, None)
        assert running is not None
        worker.starts.announce(running)
        pool.start(running)
    done: list[Any] = []
    wait_until(lambda: done.extend(pool.collect()) or len(done) == 3, timeout=10, what="the three calls")
    for running, ran in done:
        worker.settle(running, ran)
    worker.settler.write_here()
    runs = [span for span in spans.get_finished_spans() if span.name.startswith("jobsup.run")]
    assert len(runs) == 3 and {span.context.trace_id for span in runs} == {request.get_span_context().trace_id}
    insides = named(spans, "inside the job")
    assert sorted(span.parent.span_id for span in insides if span.parent) == sorted(
        span.context.span_id for span in runs
    )


def test_a_failed_run_records_the_exception_and_its_settle_is_a_child(
    client: jobsup.Client, worker: Worker, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("the-web-app").start_as_current_span("POST /boom") as request:
        client.enqueue_many([{"name": "trace-boom"}])
    run_claimed(worker)
    [run] = named(spans, "jobsup.run trace-boom")
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.status.status_code == StatusCode.ERROR and run.status.description == "ValueError"
    assert [event.name for event in run.events] == ["exception"]
    assert run.events[0].attributes is not None and run.events[0].attributes["exception.type"] == "ValueError"
    [settled] = named(spans, "jobsup.settle")
    assert settled.parent is not None and settled.parent.span_id == run.context.span_id
    assert settled.attributes is not None and settled.attributes["jobsup.transition"] == "fail"


def test_an_enqueue_outside_any_span_stores_no_context_and_runs_as_a_root_span(
    client: jobsup.Client, worker: Worker, spans: InMemorySpanExporter
) -> None:
    job_id = client.enqueue("trace-ok")
    with client.database.read() as conn:
        assert conn.execute(select(job.c.traceparent).where(job.c.id == job_id)).scalar() is None
    run_claimed(worker)
    [run] = named(spans, "jobsup.run trace-ok")
    assert run.parent is None


@pytest.mark.postgres
def test_a_long_bulk_enqueue_built_beside_its_insert_carries_the_callers_trace(
    postgres_url: str, spans: InMemorySpanExporter
) -> None:
    # A long list is built in a thread of its own (`jobsup.client.bulk`), in a copy of the
    # caller's context: its jobs take the caller's trace, as a short list's do.
    client = jobsup.Client(postgres_url)
    chunk = client.database.dialect.bulk_chunk
    with trace.get_tracer("the-web-app").start_as_current_span("POST /import") as request:
        ids = client.enqueue_many([{"name": "trace-ok"}] * (chunk + 1))
    trace_id = format(request.get_span_context().trace_id, "032x")
    with client.database.read() as conn:
        stored = conn.execute(select(job.c.traceparent).where(job.c.id.in_([ids[0], ids[-1]]))).scalars().all()
    assert len(stored) == 2 and all(value is not None and value.split("-")[1] == trace_id for value in stored)
    client.close()


def test_without_opentelemetry_nothing_of_it_is_imported_and_jobs_still_run(sqlite_url: str) -> None:
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # as if it were not installed: importing it fails
import jobsup
from jobsup.observe import tracing
from jobsup.settings import QueueConfig, Settings
from jobsup.store.database import Database
from jobsup.worker.loop import Worker
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest
import os, time

@jobsup.job("untraced", queue="traced")
def untraced(ctx, payload):
    return 1

assert not tracing.ENABLED
client = jobsup.Client({sqlite_url!r})
job_id = client.enqueue("untraced")
settings = Settings(database_url={sqlite_url!r}, queues={{"traced": QueueConfig()}})
spec = WorkerSpec(settings, "traced", 1, "w", os.getppid())
worker = Worker(spec, Database({sqlite_url!r}), StopRequest(), SlotTable(1, 1).slot(0), None)
[claimed] = worker.claim()
assert claimed.traceparent is None
worker.keeper.hold([claimed], time.monotonic())
worker.run_one(worker.keeper.begin(claimed, None))
worker.settler.write_here()
assert client.get(job_id).status == "succeeded", client.get(job_id)
assert not [name for name in sys.modules if name.startswith("opentelemetry") and sys.modules[name] is not None]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_with_opentelemetry_installed_and_no_provider_set_a_job_makes_no_span_until_one_is_set(
    sqlite_url: str,
) -> None:
    """No span object for a job while nothing would record it (`opentelemetry-api` installed
    as another package's dependency): the job's own code sees no current span, as before; a
    job enqueued inside a caller's trace still hands that trace on to its own code; and a
    provider set later records the next job's run."""
    script = f"""
import os, time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import jobsup
from jobsup.observe import tracing
from jobsup.observe import otel  # after tracing, which imports it
from jobsup.settings import QueueConfig, Settings
from jobsup.store.database import Database
from jobsup.worker.loop import Worker
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

seen = []

@jobsup.job("looks", queue="traced")
def looks(ctx, payload):
    seen.append(trace.get_current_span().get_span_context())

client = jobsup.Client({sqlite_url!r})
settings = Settings(database_url={sqlite_url!r}, queues={{"traced": QueueConfig()}})
worker = Worker(WorkerSpec(settings, "traced", 1, "w", os.getppid()), Database({sqlite_url!r}),
                StopRequest(), SlotTable(1, 1).slot(0), None)
traced = []

def run_one():
    [claimed] = worker.claim()
    worker.keeper.hold([claimed], time.monotonic())
    running = worker.keeper.begin(claimed, None)
    worker.run_one(running)
    traced.append(running.traced is not tracing.NOT_TRACED)
    worker.settler.write_here()

client.enqueue("looks")
run_one()
parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
trace_id = int(parent.split("-")[1], 16)
from jobsup.store.schema import job
jid = client.enqueue("looks")
with client.database.transaction() as conn:
    conn.execute(job.update().where(job.c.id == jid).values(traceparent=parent))
run_one()
assert not otel._ended, otel._ended  # no link kept for a settle span that will not be made
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
client.enqueue("looks")
run_one()
assert traced == [False, True, True], traced
assert not seen[0].is_valid, seen
assert seen[1].trace_id == trace_id, seen
runs = [span.name for span in exporter.get_finished_spans() if span.name.startswith("jobsup.run")]
assert runs == ["jobsup.run looks"], runs
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
