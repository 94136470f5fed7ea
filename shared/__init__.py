"""jobsup: durable background jobs that need nothing but the database you already have.

import jobsup

@jobsup.job("send-email", queue="mail", max_attempts=5, timeout="60s")
def send_email(ctx: jobsup.JobContext, payload): ...

client = jobsup.Client("postgresql+psycopg://postgres@127.0.0.1/app")
job_id = client.enqueue("send-email", {"to": "a@example.com"})
"""

from typing import TYPE_CHECKING

# Where each public name lives. An `import jobsup` loads none of them: each is imported when
# first used, so `jobsup --version`, `jobsup --help` and a process that only registers jobs
# do not pay for SQLAlchemy and the store (`tests/test_cli_imports.py` holds that).
_WHERE = {
    "AsyncClient": "jobsup.asyncclient",
    "Client": "jobsup.client",
    "Batch": "jobsup.client.batches",
    "DeadLetters": "jobsup.client.operations",
    "JobContext": "jobsup.context",
    **dict.fromkeys(
        (
            "BadInput",
            "Cancelled",
            "ConfigurationError",
            "DatabaseBusy",
            "DatabaseError",
            "DatabaseMisconfigured",
            "DatabaseUnavailable",
            "Deadlock",
            "Discard",
            "DuplicateJob",
            "InvalidDuration",
            "InvalidPayload",
            "JobNotFound",
            "JobsupError",
            "Retry",
            "SchemaOutdated",
            "UnknownJob",
            "UnknownQueue",
            "UnsupportedDatabase",
            "WaitTimeout",
        ),
        "jobsup.errors",
    ),
    "on": "jobsup.events.hooks",
    "Sensitive": "jobsup.params",
    **dict.fromkeys(("Template", "template"), "jobsup.templates"),
    **dict.fromkeys(("job", "on_worker_start", "workflow"), "jobsup.registry"),
    **dict.fromkeys(
        ("Attempt", "BatchInfo", "Definition", "Job", "JobStatus", "StepInfo", "WorkflowInfo"), "jobsup.store.rows"
    ),
    **dict.fromkeys(("Trigger", "Workflow"), "jobsup.workflow_spec"),
}

__all__ = [  # the names of `_WHERE`, spelt out for type checkers and linters
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
    "DatabaseMisconfigured",
    "DatabaseUnavailable",
    "DeadLetters",
    "Deadlock",
    "Definition",
    "Discard",
    "DuplicateJob",
    "InvalidDuration",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobStatus",
    "JobsupError",
    "Retry",
    "SchemaOutdated",
    "Sensitive",
    "StepInfo",
    "Template",
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
    "template",
    "workflow",
]

if TYPE_CHECKING:
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
        DatabaseMisconfigured,
        DatabaseUnavailable,
        Deadlock,
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
    from jobsup.store.rows import Attempt, BatchInfo, Definition, Job, JobStatus, StepInfo, WorkflowInfo
    from jobsup.templates import Template, template
    from jobsup.workflow_spec import Trigger, Workflow

    __version__: str
else:
    # Hidden from type checkers, which see the imports above: to mypy a module's
    # `__getattr__` would type every misspelt `jobsup.X` in a user's code as its return
    # type instead of an error.

    def __getattr__(name: str) -> object:
        """A public name, imported when first asked for (then kept as a plain attribute);
        `jobsup.__version__` from the installed package's metadata."""
        if name == "__version__":
            from importlib.metadata import PackageNotFoundError, version

            try:
                return version("jobsup")
            except PackageNotFoundError:  # run from a source tree that was never installed
                return "unknown (not installed)"
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module 'jobsup' has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(where), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_WHERE, "__version__"})
