"""jobsup.ops: the operator's commands (enqueue, jobs, dead letters, recurring schedules,
definitions, workflows, batches, workers, stats, paused queues, circuit breakers, parked events, the audit trail, bench,
the dashboard) and
their output: aligned tables for people, ``--json`` for scripts (the API's field names).
They read through the same client as applications do; every command that changes
something takes ``--actor`` and is audited. `jobsup.cli` lists them."""
