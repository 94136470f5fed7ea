"""What a process tells about itself: events (`events.emit`), their log lines (`logs`), their
metrics (`metrics`), tracing and OpenTelemetry."""


def subscribe_logs_and_metrics() -> None:
    """Turn this process's events into metrics and log lines from now on. Called where a
    process starts using jobsup: `jobsup.cli.main` (the supervisor, and the workers it
    forks) and `Client` (an application, the dashboard); calling it again changes nothing."""
    # Imported here, not above: every module that emits imports `observe.events`, which runs
    # this file first; it must not load the metrics (prometheus-client, the job types) and
    # the log formats with it.
    from jobsup.observe import events, logs, metrics

    events.subscribe(metrics.record)
    events.subscribe(logs.record)
