"""The concurrency policy of a job type: at most `limit` of its jobs with one concurrency
key admitted (pending or running) at once, across every instance (`jobsup.store.limits`
enforces it at admission). ``concurrency=1`` is one per key; ``concurrency={"key":
"customer", "limit": 2}`` names a key prefix job types share (a job's key is then
``customer:<its key>``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobsup.errors import BadInput

MAX_LIMIT = 1_000_000


@dataclass(frozen=True)
class Concurrency:
    limit: int
    key: str | None = None  # a prefix shared by job types (None: the job type's own name)


def parse(value: object, job: str) -> Concurrency:
    if isinstance(value, dict):
        unknown = set(value) - {"key", "limit"}
        if unknown or "limit" not in value:
            raise BadInput(f"job {job!r}: concurrency takes {{'limit': N}} and optionally 'key', not {value!r}")
        key = value.get("key")
        if key is not None and (not isinstance(key, str) or not key or len(key) > 100):
            raise BadInput(f"job {job!r}: concurrency key must be a string of 1-100 characters, not {key!r}")
        return Concurrency(_limit(value["limit"], job), key)
    return Concurrency(_limit(value, job))


def _limit(value: object, job: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise BadInput(f"job {job!r}: a concurrency limit is a whole number from 1 to {MAX_LIMIT:,}, not {value!r}")
    return value


def describe(policy: Concurrency) -> dict[str, Any]:
    return {"limit": policy.limit, **({"key": policy.key} if policy.key else {})}


def load(described: Any) -> Concurrency:
    return Concurrency(int(described["limit"]), described.get("key"))


def key_of(policy: Concurrency | None, job: str, given: object) -> tuple[str | None, int | None]:
    """The concurrency key a job of type `job` is counted under, and its limit: under the
    type's policy, the type's name (or the policy's shared key) and the given key; with no
    policy, a given key alone holds one job at a time."""
    if given is not None and (not isinstance(given, str) or not 0 < len(given) <= 100):
        raise BadInput(f"concurrency_key must be a string of 1-100 characters, not {given!r}")
    if policy is None:
        return (None, None) if given is None else (given, 1)
    prefix = policy.key or job
    key = prefix if given is None else f"{prefix}:{given}"
    if len(key) > 200:
        raise BadInput(f"the concurrency key {key[:40]!r}... of job {job!r} is over 200 characters; use a shorter key")
    return key, policy.limit
