"""The limits the campaign's job types declare (`tests.chaos.chaosapp`), as the checker needs
them: a module of its own, so the checker can be imported without registering the types."""

LIMITS = {"k1": 1, "k3": 3}  # concurrency key -> its limit
RATES = {"rated": (5, 1.0)}  # job type -> (starts, per seconds)
# Job types whose queue runs several jobs at once in every supervisor (`campaign.roles`).
POOLED = {"pooled", "aio"}
BREAKER = "fragile"  # the job type behind a circuit breaker
# `fleeting` jobs' successes are kept this many seconds (`retain=`); every other type's for days.
FLEETING_KEPT = 2.0
# A queue only the `behind` role runs (`campaign.roles`), whose workers publish no events
# (`chaosapp.unpublished`): the outbox's step keeps a settle in line, and without it a large
# claim's successes are written behind the claim on PostgreSQL (`Settler.write_behind`).
QUIET = "quiet"
UNPUBLISHED = "CHAOS_UNPUBLISHED"  # in a supervisor's environment: its workers publish nothing
