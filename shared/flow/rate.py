"""The rate policy of a job type: at most `limit` of its jobs *start* in any window of
`per` seconds, across every instance (`jobsup.store.rates` enforces it in the claim's
transaction). ``rate="10/s"``, ``rate="600/5m"``, or ``rate={"limit": 10, "per": "1s",
"key": "partner-api"}``: job types naming the same key share one window (a partner's API
that several job types call)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jobsup.durations import parse_duration
from jobsup.errors import BadInput

# The window keeps the last `limit` start times of its key, and a rate-limited claim reads
# them all: a bound on that read.
MAX_LIMIT = 10_000
MIN_PER = 0.01  # seconds: finer than this, the clocks of the instances decide, not the window
MAX_PER = 86_400.0
KEYS = {"limit", "per", "key"}
_SHORT = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Rate:
    limit: int  # starts allowed in any window of `per` seconds
    per: float
    key: str | None = None  # a window shared by job types (None: the job type's own)

    def key_for(self, job: str) -> str:
        return self.key or job

    @property
    def spacing(self) -> float:
        """Seconds between the starts of a backlog draining at the full rate."""
        return self.per / self.limit


def parse(value: object, job: str) -> Rate:
    if isinstance(value, str):
        match = _SHORT.fullmatch(value)
        if not match:
            raise BadInput(f"job {job!r}: rate {value!r} is not a rate; write N/PERIOD, e.g. '10/s' or '600/5m'")
        return _checked(int(match.group(1)), match.group(2), None, job)
    if isinstance(value, dict):
        unknown = set(value) - KEYS
        if unknown or not {"limit", "per"} <= set(value):
            raise BadInput(
                f"job {job!r}: rate takes {{'limit': N, 'per': DURATION}} and optionally 'key', not {value!r}"
            )
        return _checked(value["limit"], value["per"], value.get("key"), job)
    raise BadInput(f"job {job!r}: rate takes 'N/PERIOD' or {{'limit': N, 'per': DURATION}}, not {value!r}")


def _checked(limit: object, per: object, key: object, job: str) -> Rate:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise BadInput(f"job {job!r}: a rate limit is a whole number from 1 to {MAX_LIMIT:,}, not {limit!r}")
    # '10/s' reads as ten a second: a bare unit is one of it.
    text = f"1{per}" if isinstance(per, str) and per.strip() in {"ms", "s", "m", "h", "d"} else per
    seconds = parse_duration(text, what=f"job {job!r}: rate period")
    if not MIN_PER <= seconds <= MAX_PER:
        raise BadInput(f"job {job!r}: a rate period is from 10ms to 1 day, not {per!r}")
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 100 or not key.isprintable()):
        raise BadInput(f"job {job!r}: a rate key is a string of 1-100 printable characters, not {key!r}")
    return Rate(limit, seconds, key)


def describe(policy: Rate) -> dict[str, Any]:
    return {"limit": policy.limit, "per": policy.per, **({"key": policy.key} if policy.key else {})}


def load(described: Any) -> Rate:
    return Rate(int(described["limit"]), float(described["per"]), described.get("key"))
