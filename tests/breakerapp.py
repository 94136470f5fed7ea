"""A job type whose breaker opens, for the breaker's process test (``--app breakerapp``)."""

from __future__ import annotations

import os
import time
from typing import Any

import jobsup


@jobsup.job("breaker-down", queue="down", max_attempts=1, breaker={"failures": 3, "reset": "1h"})
def down(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("the service it calls is down")


@jobsup.job("breaker-probe", queue="probe", max_attempts=1, breaker={"failures": 2, "reset": "2s"})
def probe(ctx: jobsup.JobContext, payload: Any) -> None:
    # Down while the test's flag file exists; the probe after it is gone succeeds.
    if os.path.exists(payload["down_while"]):
        raise RuntimeError("the service it calls is down")
    time.sleep(payload.get("work_for", 0))  # the call itself: long enough to see a second probe
