"""jobsup.ops: the operator's commands (enqueue, jobs, dead letters, recurring schedules,
definitions, workflows, batches, workers, stats, bench) and their output: aligned tables
for people, ``--json`` for scripts (the API's field names). They read through the same
client as applications do."""


def register() -> None:
    """Add the operator commands to `jobsup.cli.cli` (imported for their effect)."""
    from jobsup.ops import bench, definitions, jobs, keys, links, queues, recurring  # noqa: F401
