"""Retry delays: exponential from 30 s to 1 h with up to 20 % jitter, unless a job type says
otherwise (`@jobsup.job(..., retry_in=lambda attempt: ...)`)."""

from __future__ import annotations

import random

BASE, CAP, JITTER = 30.0, 3600.0, 0.2


def default_retry_in(attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    delay = min(CAP, BASE * 2.0 ** max(0, attempt - 1))
    return delay * (1 - JITTER * random.random())


def retry_in_for(name: str, attempt: int) -> float:
    """The registered job type's delay, or the default for a name this process does not know."""
    from jobsup.registry import lookup

    registered = lookup(name)
    if registered is not None and registered.retry_in is not None:
        return max(0.0, float(registered.retry_in(attempt)))
    return default_retry_in(attempt)
