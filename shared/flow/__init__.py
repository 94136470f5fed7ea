"""jobsup.flow: flow control, a policy per job type (and per job where it says so).

Each policy lives in its own module with the same three functions: `parse(value, job)` (the
`@jobsup.job` argument, checked; `BadInput` naming the job), `describe(policy)` (JSON for the
definition row) and `load(described)` (back from it; None for a row it cannot read).
`jobsup.flow.limits.Limits` holds a job type's policies together.
"""
