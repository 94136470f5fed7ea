"""OpenTelemetry traces from enqueue to run, when `opentelemetry-api` is installed
(``pip install 'jobsup[otel]'``); decided once, at import. Without it every function here
is a no-op and nothing of OpenTelemetry is imported.

- **enqueue** stores the caller's W3C trace context (`traceparent`, always the W3C format,
  whatever propagator the application configured) on the job: `traceparent()`.
- **the worker** runs the job inside a span ``jobsup.run <name>`` (kind CONSUMER), a child
  of that context (a root span when it has none), with `jobsup.job.id`, `jobsup.job.name`, `jobsup.queue` and
  `jobsup.attempt`; spans the job's own code starts are its children. An attempt that does
  not succeed sets the span's status to ERROR (and records the exception it raised).
- **claim** and **settle** are spans of their own (``jobsup.claim``, ``jobsup.settle``): a
  failure's settle, written by the worker's thread before the run span ends, is its child;
  successes, written in batches by the settle thread, link to their jobs' run spans.

The spans go wherever the application's TracerProvider sends them; with none set up, a job
without a caller's trace context gets no span at all (`otel._recording`), not the API's
no-op one.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
__all__ = ["ENABLED", "NOT_TRACED", "Traced", "failed", "run", "span", "traceparent"]


def _installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ImportError:  # no `opentelemetry` package at all
        return False


ENABLED = _installed()


_NOTHING: contextlib.AbstractContextManager[object] = contextlib.nullcontext()


class Traced:
    """The span of one job's run, as the worker holds it (this no-op one when tracing is off)."""

    def current(self) -> contextlib.AbstractContextManager[object]:
        """Make the span current in this thread (the job's call, and a settle written here)."""
        return _NOTHING  # shared: a nullcontext holds no state, and every job asks

    def wrap(self, call: Callable[..., T]) -> Callable[..., T]:
        """`call`, run with the span current (a plain job on one of the pool's threads; an
        async job's task takes the context of the thread that submits it)."""
        return call

    def end(self, kind: str, error: str | None) -> None:
        """End the span with how the attempt ended: other than succeeded is an ERROR status."""


NOT_TRACED = Traced()

if ENABLED:
    from jobsup.observe.otel import failed, run, span, traceparent
else:

    def traceparent() -> str | None:
        """The current context's W3C ``traceparent``, or None (no span, or tracing is off)."""
        return None

    def run(job: Any) -> Traced:
        """Start the span of running `job` (a `ClaimedJob`); the worker ends it (`Traced.end`)."""
        return NOT_TRACED

    def span(
        name: str, attributes: dict[str, Any], *, job_ids: Iterable[int] = ()
    ) -> contextlib.AbstractContextManager[None]:
        """A span of jobsup's own (claim, settle), linked to the ended runs of `job_ids`."""
        return _NO_SPAN  # shared: the claim loop makes no generator per claim for nothing

    _NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()

    def failed(exc: BaseException) -> None:
        """Record `exc` on the current span (the job's run span, when it raised)."""
