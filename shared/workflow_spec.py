"""Jobs that depend on jobs, as the caller describes them: a `Workflow` of steps with
dependencies, a `Trigger` that enqueues a follow-up when a job ends, and a batch's callbacks.

These are plain descriptions, checked when made (a bad policy, an unknown event, a step of
another workflow) and turned into job rows by the client; the store makes them happen
(`jobsup.store.steps`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobsup.checks import check_name
from jobsup.errors import BadInput
from jobsup.payload import encode_payload

# When a trigger fires: the job ended succeeded, ended without succeeding (dead-lettered or
# cancelled), ended dead-lettered, ended cancelled, or ended at all (`jobsup.store.steps`).
TRIGGER_EVENTS = ("succeeded", "failed", "dead_lettered", "cancelled", "any")

# What a workflow step does when one of its dependencies did not succeed.
POLICIES = ("cancel", "run")

MAX_STEPS = 100_000  # steps in one workflow
MAX_BATCH = 1_000_000  # children in one batch
MAX_TRIGGERS = 20  # triggers on one job


@dataclass(frozen=True)
class Trigger:
    """When the job ends as `on` says, enqueue `job` with `payload` (in `queue`, else the job
    type's). Fired in the transaction that ends the job, exactly once."""

    job: str
    on: str = "any"
    payload: Any = None
    queue: str | None = None

    def __post_init__(self) -> None:
        check_name(self.job, "trigger job name")
        if self.on not in TRIGGER_EVENTS:
            raise BadInput(f"trigger on={self.on!r} is not one of {', '.join(TRIGGER_EVENTS)}")
        if self.queue is not None:
            check_name(self.queue, "trigger queue")
        encode_payload(self.payload)  # a payload that cannot be stored is refused now, not at the settle

    def describe(self) -> dict[str, Any]:
        return {"job": self.job, "on": self.on, "payload": self.payload, "queue": self.queue}


def check_triggers(value: object) -> tuple[Trigger, ...]:
    """`then=` as given: a Trigger or a sequence of them."""
    if isinstance(value, Trigger):
        return (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(item, Trigger) for item in value):
        raise BadInput("then= takes a jobsup.Trigger or a list of them")
    if len(value) > MAX_TRIGGERS:
        raise BadInput(f"a job may have at most {MAX_TRIGGERS} triggers, not {len(value)}")
    return tuple(value)


def triggers_text(triggers: Sequence[Trigger]) -> str | None:
    """As stored on the job row (None for none, so a plain job stays plain)."""
    return json.dumps([t.describe() for t in triggers], separators=(",", ":")) if triggers else None


@dataclass(frozen=True, eq=False)
class Step:
    """One job of a workflow; returned by `Workflow.add` to name it as a dependency."""

    workflow: Workflow = field(repr=False)
    name: str  # unique in its workflow
    job: str
    payload: Any
    deps: tuple[Step | str, ...]
    on_failure: str
    options: Mapping[str, Any]


class Workflow:
    """A named set of jobs with dependencies, enqueued atomically by
    `client.workflows.enqueue`.

        wf = jobsup.Workflow("nightly-etl")
        extract = wf.add("extract", {"day": "2026-12-01"})
        clean = wf.add("clean", deps=[extract])
        wf.add("report", deps=[clean], on_failure="run")

    A step runs once all its dependencies have finished. When one did not succeed, the step
    is cancelled (and so are the steps that depend on it) unless its `on_failure` is
    ``"run"``. A step sees its dependencies' results as ``ctx.upstream[step_name]``."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name, "workflow name")
        self.steps: dict[str, Step] = {}

    def add(
        self,
        job: str,
        payload: Any = None,
        *,
        deps: Step | str | Iterable[Step | str] = (),
        on_failure: str = "cancel",
        step: str | None = None,
        **options: Any,
    ) -> Step:
        """Add a step running `job` with `payload`, after `deps` (steps of this workflow, or
        their names). `step` names it (default: the job name); `options` are those of
        `Client.enqueue` (queue, priority, delay, max_attempts, timeout, then, actor)."""
        check_name(job, "job name")
        name = check_name(step or job, "step name")
        if name in self.steps:
            raise BadInput(f"workflow {self.name!r} already has a step named {name!r}; give this one step=")
        if on_failure not in POLICIES:
            raise BadInput(f"on_failure={on_failure!r} is not one of {', '.join(POLICIES)}")
        if "unique_key" in options:
            raise BadInput("a workflow step cannot have a unique_key: give the workflow one (key=)")
        if len(self.steps) >= MAX_STEPS:
            raise BadInput(f"a workflow may have at most {MAX_STEPS} steps")
        listed = (deps,) if isinstance(deps, Step | str) else tuple(deps)
        for dep in listed:
            if isinstance(dep, Step) and dep.workflow is not self:
                raise BadInput(
                    f"step {name!r} depends on step {dep.name!r} of workflow {dep.workflow.name!r}: "
                    "a dependency must be a step of the same workflow"
                )
            if not isinstance(dep, Step | str):
                raise BadInput(f"step {name!r}: a dependency is a Step or a step name, not {type(dep).__name__}")
        added = Step(self, name, job, payload, listed, on_failure, dict(options))
        self.steps[name] = added
        return added

    def ordered(self) -> list[tuple[Step, list[str]]]:
        """The steps with their dependencies' names, each after all it depends on;
        `BadInput` for a dependency on no step of this workflow, or a cycle."""
        deps: dict[str, list[str]] = {}
        for name, step in self.steps.items():
            names = list(dict.fromkeys(dep.name if isinstance(dep, Step) else dep for dep in step.deps))
            for listed in names:
                if listed not in self.steps:
                    raise BadInput(f"step {name!r} depends on {listed!r}, which is no step of workflow {self.name!r}")
                if listed == name:
                    raise BadInput(f"step {name!r} depends on itself")
            deps[name] = names
        order: list[str] = []
        state: dict[str, int] = {}  # 1: being visited, 2: placed
        for start in self.steps:
            if state.get(start) == 2:
                continue
            stack = [(start, iter(deps[start]))]
            state[start] = 1
            while stack:
                name, pending = stack[-1]
                dep = next(pending, None)
                if dep is None:
                    stack.pop()
                    state[name] = 2
                    order.append(name)
                elif state.get(dep) == 1:
                    path = [n for n, _ in stack]
                    cycle = [*path[path.index(dep) :], dep]
                    raise BadInput(f"workflow {self.name!r} has a cycle: {' -> '.join(cycle)}")
                elif state.get(dep) is None:
                    state[dep] = 1
                    stack.append((dep, iter(deps[dep])))
        return [(self.steps[name], deps[name]) for name in order]


@dataclass(frozen=True)
class Callback:
    """A batch callback: `job` enqueued with `payload` plus ``"batch": {"id", "counts"}``."""

    job: str
    payload: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, value: object, what: str) -> Callback | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = (value, None)
        if not isinstance(value, tuple) or len(value) != 2:
            raise BadInput(f"{what} takes a job name or a (job name, payload) pair")
        job, payload = value
        check_name(job, f"{what} job name")
        if payload is not None and not isinstance(payload, Mapping):
            raise BadInput(f"{what}: a callback's payload is a mapping (the batch's counts are added to it)")
        encode_payload(payload)
        return cls(job, None if payload is None else dict(payload))

    def describe(self) -> dict[str, Any]:
        return {"job": self.job, "payload": self.payload}
