"""A worker app that reports to Sentry (tests/test_sentry.py): `sentry_sdk.init` in each worker
after the fork, with a transport that appends each event to the file JOBSUP_TEST_SENTRY names
instead of sending it anywhere."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.logging import LoggingIntegration
from sentry_sdk.transport import Transport

import jobsup


class FileTransport(Transport):
    def capture_envelope(self, envelope: Envelope) -> None:
        with open(os.environ["JOBSUP_TEST_SENTRY"], "a") as file:
            for item in envelope.items:
                event = item.get_event()
                if event is not None:
                    file.write(json.dumps(event, default=str) + "\n")


@jobsup.on_worker_start
def start_sentry() -> None:
    if os.environ.get("JOBSUP_TEST_SENTRY_REFUSE"):
        raise ValueError("no DSN in this environment")
    # As docs/how-to/sentry.md says: sentry-sdk 3 makes no event of an ERROR record unless
    # asked (event_level), and level=None sends no Sentry Log of every INFO line.
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1",
        transport=FileTransport,
        integrations=[LoggingIntegration(level=None, event_level=logging.ERROR)],
    )
    with open(os.environ["JOBSUP_TEST_SENTRY"] + ".started", "a") as file:
        file.write(f"{os.getpid()}\n")


@jobsup.job("sentry-fails", max_attempts=2, retry_in=lambda attempt: 0)
def fails(ctx: jobsup.JobContext, payload: Any) -> None:
    raise KeyError(f"no customer {payload['customer']}")


@jobsup.job("sentry-logs")
def logs(ctx: jobsup.JobContext, payload: Any) -> None:
    logging.getLogger("myapp.billing").info("charged %s through the application's own logger", payload["order"])
