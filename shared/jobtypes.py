"""Job types: a job's settings (queue, priority, attempts, timeout, retry policy), resolved in
one place for the client, the worker, the supervisor and cron.

`Resolver.find(name)` answers from this process's registration (`@jobsup.job`) when it has
one, else from the definition published in the database by the processes that do (`jobsup
start` publishes its apps' job types at boot, `jobsup definitions sync` as a deploy step), so
a web process that enqueues by name without importing the workers' code gets the workers'
queue, attempts and timeout. A name that neither knows is `UnknownJob`.
"""

from __future__ import annotations

import difflib
import functools
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobsup.errors import DatabaseError, UnknownJob
from jobsup.observe.events import emit

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds to wait after a failed attempt: exponential from `base` to `cap` with up to
    `jitter` (a fraction) taken off at random, unless `custom(attempt)` says otherwise."""

    base: float = 30.0
    cap: float = 3600.0
    jitter: float = 0.2
    custom: Callable[[int], float] | None = field(default=None, compare=False)

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        if self.custom is not None:
            return max(0.0, float(self.custom(attempt)))
        delay = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        return delay * (1 - self.jitter * random.random())

    def describe(self) -> dict[str, Any]:
        """As stored in a definition; a custom function is named, and cannot be run from there."""
        if self.custom is not None:
            function = self.custom
            return {"custom": f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"}
        return {"base": self.base, "cap": self.cap, "jitter": self.jitter}

    @classmethod
    def from_description(cls, described: Mapping[str, Any]) -> RetryPolicy:
        """The policy a definition describes; a process without the custom function uses the
        default backoff for it."""
        try:
            return cls(float(described["base"]), float(described["cap"]), float(described["jitter"]))
        except (KeyError, TypeError, ValueError):
            return cls()  # a custom function (only its own process can run it), or a hand-edited row


@dataclass(frozen=True)
class JobType:
    name: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    triggers: tuple[Any, ...] = ()  # `jobsup.Trigger`s every job of this type fires
    params: dict[str, Any] | None = field(default=None, compare=False)  # JSON Schema (`jobsup.params`)
    limits: Any = field(default=None, compare=False)  # `jobsup.policies.Limits`; None: none
    retain: Mapping[str, float | None] | None = field(default=None, compare=False)  # `jobsup.retention`

    @functools.cached_property
    def sensitive(self) -> frozenset[str]:
        """The parameters sealed at rest (`writeOnly` in the schema)."""
        if self.params is None:
            return frozenset()
        return frozenset(name for name, schema in self.params.get("properties", {}).items() if schema.get("writeOnly"))

    def settings(self) -> dict[str, Any]:
        """What a definition stores and compares (the retry policy as its description)."""
        settings = {
            "queue": self.queue,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "timeout": self.timeout,
            "retry": self.retry.describe(),
        }
        if self.triggers:  # absent rather than empty, so older definitions still compare equal
            settings["then"] = [trigger.describe() for trigger in self.triggers]
        if self.params is not None:
            settings["params"] = self.params
        if self.limits:
            settings["limits"] = self.limits.describe()
        if self.retain:
            settings["retain"] = dict(self.retain)
        return settings


# Names defined in this process or published in the database, as far as this process has
# seen: metric labels take only these (any other name would grow the label set forever).
_known_names: set[str] = set()


def is_defined(name: str) -> bool:
    return name in _known_names or _registered(name) is not None


def _registered(name: str) -> JobType | None:
    registered = REGISTERED.get(name)
    return None if registered is None else registered.type


# The job types this process registers, by name: `jobsup.registry`'s `Registered` entries,
# added by `@jobsup.job`. Kept here, where the resolver reads it, so that this module need
# not import the registry (which imports it).
REGISTERED: dict[str, Any] = {}


class Resolver:
    """Looks job types up: this process's registry first, then the published definitions
    (`load` reads them all; cached for `ttl` seconds and reloaded on a miss, at most once a
    second)."""

    def __init__(self, load: Callable[[], dict[str, JobType]] | None, *, ttl: float = 30.0) -> None:
        self.load, self.ttl = load, ttl
        self.lock = threading.Lock()
        self.published: dict[str, JobType] = {}
        self.loaded_at = -float("inf")
        self.generation = 0  # counts refreshes
        self._key_rates: tuple[tuple[int, int] | None, dict[str, Any]] = (None, {})

    def find(self, name: str) -> JobType | None:
        registered = _registered(name)
        if registered is not None:
            return registered
        if self.load is None:
            return None
        now = time.monotonic()
        if now - self.loaded_at >= self.ttl or (name not in self.published and now - self.loaded_at >= 1.0):
            self.refresh(now)
        return self.published.get(name)

    def refresh(self, now: float | None = None) -> None:
        assert self.load is not None
        try:
            published = self.load()
        except DatabaseError as exc:
            # What was read before still serves; the next miss tries again a second later.
            emit("db.error", operation="definitions", error=exc)
            self.loaded_at = time.monotonic() if now is None else now
            return
        with self.lock:
            self.published, self.loaded_at = published, time.monotonic() if now is None else now
            self.generation += 1
        _known_names.update(published)

    def require(self, name: str) -> JobType:
        """The job type of `name`, or `UnknownJob` naming the known ones that are close."""
        found = self.find(name)
        if found is not None:
            return found
        known = sorted(set(self.published) | set(REGISTERED))
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise UnknownJob(
            f"no job type named {name!r} is registered in this process or published in the database{hint}; "
            "publish definitions with `jobsup start --app MODULE` or `jobsup definitions sync --app MODULE`, "
            "or enqueue it anyway with allow_unknown=True (on the command line: --allow-unknown)"
        )

    def settings_of(self, name: str) -> JobType:
        """The job type of `name`, or the defaults for a name nobody defined (a row someone
        enqueued with allow_unknown, or whose code is gone)."""
        return self.find(name) or JobType(name)

    def breaker_of(self, name: str) -> Any:
        """The breaker policy of `name` (`jobsup.policies.Breaker`), or None. From what
        this process registered or has read, never a database read: settles ask it."""
        found = _registered(name) or self.published.get(name)
        return None if found is None or found.limits is None else found.limits.breaker

    def rate_of(self, name: str) -> Any:
        """The rate policy of `name` (`jobsup.policies.Rate`), or None; like `breaker_of`."""
        found = _registered(name) or self.published.get(name)
        return None if found is None or found.limits is None else found.limits.rate

    def key_rate(self, key: str) -> Any:
        """The rate of window `key`: that of the first job type by name whose rate uses it
        (types sharing a key should agree; when published definitions do not, every claim
        of every process that knows them applies the same one)."""
        registry = REGISTERED
        # Asked on every rate-limited claim: worked out again only when the types change (a
        # refresh reads them again; registering adds to the registry).
        stamp = (self.generation, len(registry))
        if self._key_rates[0] != stamp:
            known = {**self.published, **{name: registered.type for name, registered in registry.items()}}
            rates: dict[str, Any] = {}
            for name in sorted(known):
                limits = known[name].limits
                if limits is not None and limits.rate is not None:
                    rates.setdefault(limits.rate.key_for(name), limits.rate)
            self._key_rates = (stamp, rates)
        return self._key_rates[1].get(key)

    def rate_limited(self, queue: str) -> bool:
        """Whether a job type this process knows is rate-limited in `queue` (its jobs are
        enqueued to its own queue only): only those claims run in a transaction of their own
        to check the windows (`jobsup.store.rates`)."""
        known = (registered.type for registered in REGISTERED.values())
        return any(
            t.queue == queue and t.limits is not None and t.limits.rate is not None
            for t in (*known, *self.published.values())
        )

    def retry_in(self, name: str, attempt: int, *, job: int | None = None) -> float:
        """Seconds before job `job` of type `name` runs again after failed attempt `attempt`:
        its type's policy, or the default one when the type's own `retry_in` (user code) raises."""
        try:
            return self.settings_of(name).retry.delay(attempt)
        except Exception as exc:
            emit("job.retry_in_failed", job=job, name=name, error=f"{type(exc).__name__}: {exc}")
            return RetryPolicy().delay(attempt)
