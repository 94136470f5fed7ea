"""The working side of `jobsup.observe.tracing`, imported only when OpenTelemetry is
installed (see there)."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jobsup.observe.tracing import NOT_TRACED, Traced

T = TypeVar("T")
KEPT = 10_000  # run span contexts kept for their settle's link (a bound: a dropped job's is never taken)

_w3c = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("jobsup")  # a proxy: spans go to whichever provider is set, when
_ended: OrderedDict[int, Any] = OrderedDict()  # job id -> its run's span context, until its settle
_lock = threading.Lock()
_UNREAD = object()


def traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _w3c.inject(carrier)
    return carrier.get("traceparent")


class _Running(Traced):
    def __init__(self, current: Any) -> None:
        self.span = current

    def current(self) -> contextlib.AbstractContextManager[object]:
        return trace.use_span(self.span, end_on_exit=False)

    def wrap(self, call: Callable[..., T]) -> Callable[..., T]:
        def wrapped(*args: Any) -> T:
            with self.current():
                return call(*args)

        return wrapped

    def end(self, kind: str, error: str | None) -> None:
        self.span.set_attribute("jobsup.outcome", kind)
        if kind != "succeeded":
            self.span.set_status(Status(StatusCode.ERROR, (error or kind).split(":", 1)[0]))
        self.span.end()


def _recording() -> bool:
    """Whether a TracerProvider that records spans is set. Until the application sets one,
    the API's default hands out spans that record nothing; making them, current and ended,
    was about 10 µs of the 35 each job took in a worker's per-job path (`opentelemetry-api`
    is often installed as another package's dependency, with no provider set). Asked at
    every job, so a provider set later is used from the next one on; read from the API's
    own global, since `trace.get_tracer_provider()` looks up the environment at every call
    while none is set. A provider named by OTEL_PYTHON_TRACER_PROVIDER was loaded into that
    global at import already, when `_tracer` was made."""
    provider = getattr(trace, "_TRACER_PROVIDER", _UNREAD)  # a module global in every 1.x
    if provider is _UNREAD:
        provider = trace.get_tracer_provider()
    return provider is not None and not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def run(job: Any) -> Traced:
    recording = _recording()
    if not job.traceparent and not recording:
        # Nothing to record and no caller's context to hand on to the job's own code: the
        # span would be the invalid one, as with no span at all.
        return NOT_TRACED
    parent = _w3c.extract({"traceparent": job.traceparent}) if job.traceparent else None
    attributes = {
        "jobsup.job.id": job.id,
        "jobsup.job.name": job.name,
        "jobsup.queue": job.queue,
        "jobsup.attempt": job.attempt,
    }
    started = _tracer.start_span(
        f"jobsup.run {job.name}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    )
    context = started.get_span_context()
    if recording and context.is_valid:  # for the link of its settle, whichever thread writes it
        with _lock:
            _ended[job.id] = context
            while len(_ended) > KEPT:
                _ended.popitem(last=False)
    return _Running(started)


@contextlib.contextmanager
def span(name: str, attributes: dict[str, Any], *, job_ids: Iterable[int] = ()) -> Iterator[None]:
    if not _recording():
        yield
        return
    with _lock:
        found = [_ended.pop(job_id, None) for job_id in job_ids]
    links = [Link(context) for context in found if context is not None]
    with _tracer.start_as_current_span(name, attributes=attributes, links=links):
        yield


def failed(exc: BaseException) -> None:
    trace.get_current_span().record_exception(exc)
