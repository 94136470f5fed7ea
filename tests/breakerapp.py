"""A job type whose breaker opens, for the breaker's process test (``--app breakerapp``)."""

from __future__ import annotations

from typing import Any

import jobsup


@jobsup.job("breaker-down", queue="down", max_attempts=1, breaker={"failures": 3, "reset": "1h"})
def down(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("the service it calls is down")
