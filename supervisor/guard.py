"""The supervisor's error boundary, written once: an error in the loop is reported, counted
and retried on a later turn; it never stops the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from jobsup.errors import JobsupError
from jobsup.observe.events import emit

T = TypeVar("T")


def report_errors(operation: str, action: Callable[[], T], *, event: str = "db.error", **fields: Any) -> T | None:
    """Run `action`; on an error emit `event` (with `operation` and `fields`) and return None.
    A jobsup error (the database is down, a row is bad) is reported by its message; anything
    else is unexpected and its traceback goes to the log."""
    try:
        return action()
    except JobsupError as exc:
        emit(event, operation=operation, **fields, error=exc)
    except Exception as exc:
        emit(event, operation=operation, **fields, error=f"unexpected {type(exc).__name__}: {exc}", exc=exc)
    return None
