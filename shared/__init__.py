"""jobsup: durable background jobs that need nothing but the database you already have.

import jobsup

@jobsup.job("send-email", queue="mail", max_attempts=5, timeout="60s")
def send_email(ctx: jobsup.JobContext, payload): ...

client = jobsup.Client("postgresql+psycopg://postgres@127.0.0.1/app")
job_id = client.enqueue("send-email", {"to": "a@example.com"})
"""

from typing import TYPE_CHECKING

from jobsup.asyncclient import AsyncClient
from jobsup.client import Client
from jobsup.client.batches import Batch
from jobsup.client.operations import DeadLetters
from jobsup.context import JobContext
from jobsup.errors import (
    BadInput,
    Cancelled,
    ConfigurationError,
    DatabaseBusy,
    DatabaseError,
    DatabaseUnavailable,
    Discard,
    DuplicateJob,
    InvalidDuration,
    InvalidPayload,
    JobNotFound,
    JobsupError,
    Retry,
    SchemaOutdated,
    UnknownJob,
    UnknownQueue,
    UnsupportedDatabase,
    WaitTimeout,
)
from jobsup.events.hooks import on
from jobsup.params import Sensitive
from jobsup.registry import job, on_worker_start, workflow
from jobsup.store.rows import Attempt, BatchInfo, Definition, Job, StepInfo, WorkflowInfo
from jobsup.workflow_spec import Trigger, Workflow

__all__ = [
    "AsyncClient",
    "Attempt",
    "BadInput",
    "Batch",
    "BatchInfo",
    "Cancelled",
    "Client",
    "ConfigurationError",
    "DatabaseBusy",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeadLetters",
    "Definition",
    "Discard",
    "DuplicateJob",
    "InvalidDuration",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobsupError",
    "Retry",
    "SchemaOutdated",
    "Sensitive",
    "StepInfo",
    "Trigger",
    "UnknownJob",
    "UnknownQueue",
    "UnsupportedDatabase",
    "WaitTimeout",
    "Workflow",
    "WorkflowInfo",
    "job",
    "on",
    "on_worker_start",
    "workflow",
]

if TYPE_CHECKING:
    __version__: str
else:
    # Hidden from type checkers: to mypy a module's `__getattr__` would type every
    # misspelt `jobsup.X` in a user's code as its return type instead of an error.

    def __getattr__(name: str) -> str:
        """`jobsup.__version__`, looked up only when asked for (the installed package's
        metadata), so an `import jobsup` does not pay for it."""
        if name != "__version__":
            raise AttributeError(f"module 'jobsup' has no attribute {name!r}")
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("jobsup")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "unknown (not installed)"
