"""The worker's pure parts: what a job's outcome is, and what its stored error shows."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Annotated

import pytest

import jobsup
from jobsup import exits
from jobsup.registry import lookup
from jobsup.scrub import Secrets, error_text, secrets_of
from jobsup.store.rows import ClaimedJob
from jobsup.worker.execute import execute
from jobsup.worker.slot import SlotTable


@jobsup.job("units-echo")
def echo(ctx: jobsup.JobContext, payload: object) -> object:
    return payload


def claimed(payload: str, name: str = "units-echo") -> ClaimedJob:
    return ClaimedJob(1, name, "default", payload, 1, 5, None, None, "w")


def test_a_payload_nested_beyond_the_recursion_limit_is_discarded_not_a_crash() -> None:
    outcome = execute(claimed("[" * 100_000 + "]" * 100_000), threading.Event())
    assert outcome.kind == "discarded" and outcome.error is not None and "InvalidPayload" in outcome.error


_TEXTS = ["{}", "null", '"a"', "[1, 2.5, true]", '{"to": "ann", "n": {"deep": [null]}}', " {} ", "\n[1]", "NaN", b"{}"]


@pytest.mark.parametrize("text", _TEXTS)
def test_a_stored_payload_decodes_as_json_loads_decodes_it(text: str | bytes) -> None:
    import json
    import math

    from jobsup.payload import decode_payload

    decoded, expected = decode_payload(text), json.loads(text)
    assert decoded == expected or (math.isnan(decoded) and math.isnan(expected))


@pytest.mark.parametrize("text", ["", " ", "{}x", "{} {}", "[1,", "nul", "{'a': 1}", "\x00"])
def test_a_corrupt_payload_is_invalid_however_it_is_corrupt(text: str) -> None:
    from jobsup.errors import InvalidPayload
    from jobsup.payload import decode_payload

    with pytest.raises(InvalidPayload, match="not valid JSON"):
        decode_payload(text)


def test_no_nesting_depth_escapes_as_an_exception() -> None:
    # Somewhere in this range a payload still decodes but is too deep to walk for secrets.
    kinds = {execute(claimed("[" * depth + "]" * depth), threading.Event()).kind for depth in range(800, 1100)}
    assert kinds == {"succeeded", "discarded"}


def test_an_unknown_name_fails_and_a_known_one_succeeds_with_its_result() -> None:
    assert execute(claimed("1", name="units-nobody"), threading.Event()).kind == "failed"
    outcome = execute(claimed('{"a": [1, 2]}'), threading.Event())
    assert (outcome.kind, outcome.result) == ("succeeded", '{"a":[1,2]}')


@pytest.mark.parametrize("mark", ['"$sealed"', '"\\u0024sealed"', '"\\u0024\\u0073ealed"'])
def test_a_sealed_value_is_found_however_its_row_spells_the_mark(mark: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker looks for sealed values only in a text that could hold one: the mark as
    # written, or any \u escape (a row written by other code than jobsup's may spell it so).
    monkeypatch.delenv("JOBSUP_ENCRYPTION_KEYS", raising=False)
    outcome = execute(claimed('{"card": {' + mark + ': "v2:k1:AAAA"}}'), threading.Event())
    assert outcome.kind == "failed" and "JOBSUP_ENCRYPTION_KEYS is not set" in (outcome.error or "")
    # A dollar sign elsewhere (or "sealed" as a plain word) is not a sealed value.
    assert execute(claimed('{"price": "$5", "note": "sealed"}'), threading.Event()).kind == "succeeded"
    # Bytes (a BLOB another writer stored in SQLite) decode and are walked, as before.
    assert execute(claimed(b'{"a": 1}'), threading.Event()).kind == "succeeded"  # type: ignore[arg-type]


def test_sensitive_values_are_masked_in_stored_errors_short_ones_as_words() -> None:
    payload = {"card": "4111111111111111", "cvv": 123, "pin": "42", "amount": 9.5, "flag": True}
    error = ValueError("declined: cvv=123 pin=42 amount=9.5 card=4111111111111111 in 1942, 1234, True")
    assert error_text(error, secrets_of(payload, {"cvv", "pin"})) == (
        "ValueError: declined: cvv=*** pin=*** amount=9.5 card=*** in 1942, 1234, True"
    )


@jobsup.job("units-forgetful")
def forgetful(ctx: jobsup.JobContext, payload: dict[str, str]) -> None:
    token = payload.pop("token")  # the job changes its payload before it fails
    raise RuntimeError(f"refused {token}")


def test_an_error_is_masked_with_the_stored_payload_even_after_the_job_changed_its_own() -> None:
    # A worker finds a job's secrets only when a text needs them: from the row, not from
    # the payload the job was given and may have changed.
    token = "tok-" + "s3cr3t" * 5
    outcome = execute(claimed(f'{{"token": "{token}"}}', name="units-forgetful"), threading.Event())
    assert outcome.kind == "failed" and outcome.error is not None
    assert token not in outcome.error and "RuntimeError: refused ***" in outcome.error


def test_deferred_secrets_are_found_once_when_first_needed() -> None:
    calls = []

    def find() -> Secrets:
        calls.append(1)
        return secrets_of({"key": "k" * 40})

    secrets = Secrets.deferred(find)
    assert calls == []
    assert "k" * 40 in secrets.exact and secrets and calls == [1]


def test_stored_errors_are_capped() -> None:
    assert len(error_text(RuntimeError("x" * 5000), Secrets())) == 2000


def test_a_worker_killed_by_a_signal_without_a_name_is_described() -> None:
    import signal

    from jobsup.exits import describe

    realtime = signal.SIGRTMIN + 2
    assert describe(realtime) == f"killed by signal {realtime}"  # a wait status for that signal
    assert describe(signal.SIGKILL) == "killed by SIGKILL"


def test_waiting_for_a_commit_adds_one_listener_per_connection() -> None:
    from sqlalchemy import create_engine

    from jobsup.store.database import after_commit

    fired: list[int] = []
    with create_engine("sqlite://").connect() as conn:
        for n in range(100):
            with conn.begin():
                after_commit(conn, lambda n=n: fired.append(n))  # type: ignore[misc]
        transaction = conn.begin()
        after_commit(conn, lambda: fired.append(-1))
        transaction.rollback()
        with conn.begin():
            pass
        assert len(conn.dispatch.commit) == 1
    assert fired == list(range(100))


def test_a_database_error_while_reading_definitions_leaves_the_cached_ones() -> None:
    from jobsup.jobtypes import JobType, Resolver

    calls = {"n": 0}

    def load() -> dict[str, JobType]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise jobsup.DatabaseUnavailable("the database went away")
        return {"published-elsewhere": JobType("published-elsewhere", queue="mail")}

    resolver = Resolver(load, ttl=0.0)
    assert resolver.find("published-elsewhere").queue == "mail"  # type: ignore[union-attr]
    assert resolver.find("published-elsewhere").queue == "mail"  # type: ignore[union-attr]  # reload failed
    assert resolver.find("nobody") is None and calls["n"] >= 2


def test_healthz_does_not_queue_behind_a_database_that_hangs() -> None:
    import time

    from jobsup.supervisor.http import Health

    asking, release = threading.Event(), threading.Event()

    def hanging_ping() -> None:
        asking.set()
        release.wait(10)

    health = Health(hanging_ping)
    health.tick([])
    first = threading.Thread(target=health)
    first.start()
    assert asking.wait(5), "the first probe never asked the database"
    started = time.monotonic()
    answer = health()
    assert time.monotonic() - started < 1.0, "a second probe waited for the first one's database call"
    assert answer[0] is False
    release.set()
    first.join(5)


class Unprintable(Exception):
    def __str__(self) -> str:
        return self.message  # type: ignore[attr-defined, no-any-return]  # never set: __str__ raises


@jobsup.job("units-unprintable")
def unprintable(ctx: jobsup.JobContext, payload: object) -> object:
    raise Unprintable()


def test_a_job_whose_error_cannot_be_read_still_ends_its_attempt() -> None:
    """The pool collects a job only when its call returns: a call that raised while
    explaining the job's error would leave the job running (and renewed) forever."""
    outcome = execute(claimed("1", name="units-unprintable"), threading.Event())
    assert outcome.kind == "failed" and outcome.error is not None and "Unprintable" in outcome.error


def test_an_async_job_behind_a_plain_wrapper_is_awaited_and_an_async_object_runs_on_the_loop() -> None:
    async def fetch(ctx: jobsup.JobContext, payload: object) -> object:
        return payload

    @functools.wraps(fetch)
    def wrapped(ctx: jobsup.JobContext, payload: object) -> object:
        return fetch(ctx, payload)

    class Handler:
        async def __call__(self, ctx: jobsup.JobContext, payload: object) -> object:
            return payload

    jobsup.job("units-wrapped-async")(wrapped)
    jobsup.job("units-async-object")(Handler())
    assert lookup("units-async-object").is_async  # type: ignore[union-attr]
    assert not lookup("units-wrapped-async").is_async  # type: ignore[union-attr]  # it may run the coroutine itself
    outcome = execute(claimed('{"x": 1}', name="units-wrapped-async"), threading.Event())
    assert (outcome.kind, outcome.result) == ("succeeded", '{"x":1}'), "its coroutine was not awaited"


@jobsup.job("units-returns-coroutine")
def returns_coroutine(ctx: jobsup.JobContext, payload: object) -> object:
    return asyncio.sleep(0, result=5)  # an awaitable from a plain function


@jobsup.job("units-returns-failing-coroutine")
def returns_failing_coroutine(ctx: jobsup.JobContext, payload: object) -> object:
    async def fail() -> None:
        raise RuntimeError("failed inside the coroutine")

    return fail()


def test_a_plain_job_that_returns_an_awaitable_has_it_awaited_not_stored_unrun() -> None:
    outcome = execute(claimed("1", name="units-returns-coroutine"), threading.Event())
    assert (outcome.kind, outcome.result) == ("succeeded", "5")
    outcome = execute(claimed("1", name="units-returns-failing-coroutine"), threading.Event())
    assert outcome.kind == "failed" and outcome.error is not None and "failed inside the coroutine" in outcome.error


def test_a_slot_entry_says_how_its_attempt_ends_and_a_reused_entry_forgets_it() -> None:
    slot = SlotTable(1, 2).slot(0)
    slot.reset()
    slot.start(7, 1, None, 10.0)
    slot.start(8, 3, 5.0, 12.0)
    slot.ending(8, exits.TIMED_OUT)
    assert slot.entries() == [(7, 1, None, 0), (8, 3, 5.0, exits.TIMED_OUT)]
    slot.finish(8)
    slot.start(9, 1, None, 14.0)  # the freed entry, reused
    assert slot.entries() == [(7, 1, None, 0), (9, 1, None, 0)]


def test_a_slot_judges_each_running_lease_by_the_later_of_its_claim_and_the_last_renewal() -> None:
    slot = SlotTable(1, 3).slot(0)
    slot.reset()
    assert slot.leases() == []
    slot.renewed(11.0)
    slot.start(7, 1, None, 10.0)  # claimed before the last renewal: good as of the renewal
    slot.start(8, 1, None, 12.0)  # claimed after it: good as of its claim
    assert slot.leases() == [11.0, 12.0]
    slot.finish(7)
    slot.start(9, 1, None, 14.0)  # the freed entry, reused: its own claim, not the last one's
    assert slot.leases() == [14.0, 12.0]
    slot.renewed(13.0)
    assert slot.leases() == [14.0, 13.0]


def test_the_supervisor_judges_a_worker_by_the_oldest_lease_it_runs_and_buries_it_by_the_newest() -> None:
    from jobsup.settings import QueueConfig, Settings
    from jobsup.supervisor.burial import burial_of
    from jobsup.supervisor.children import Child, Children, Death

    settings = Settings(
        database_url="sqlite:///unused.db", lease=60.0, heartbeat=10.0, queues={"q": QueueConfig(concurrency=2)}
    )
    children = Children(settings, fork_child=lambda spec, memory: 0)  # never forks here
    [slot] = children.slots
    slot.memory.reset()
    no_such_pid = 2**31 - 1  # nothing here signals it, and nothing could be hit if it did
    child = children.alive[no_such_pid] = Child(no_such_pid, slot, "owner")
    slot.memory.renewed(100.0)  # the last renewal, held back by an older lease
    slot.memory.start(7, 1, None, 150.0)  # claimed after the outage
    assert children.overdue(160.0 + 0.1, lease=60.0, heartbeat=10.0) == []  # the renewal alone says overdue
    assert children.overdue(150.0 + 55.1, lease=60.0, heartbeat=10.0) == [child]
    slot.memory.start(8, 1, None, 90.0)  # claimed before the renewal: good as of it, the oldest
    assert children.overdue(100.0 + 55.1, lease=60.0, heartbeat=10.0) == [child]
    death = Death.of(child, 0)
    slot.memory.reset()  # a replacement's: the burial goes by what the slot said at the death
    assert burial_of(death, lease=60.0).lapses_at == 150.0 + 60.0  # the freshest: tried until it lapses


def test_a_cancel_event_behaves_as_a_threading_event_across_threads() -> None:
    from jobsup.worker.cancel import CancelEvent

    event = CancelEvent()
    assert isinstance(event, threading.Event) and not event.is_set()
    assert event.wait(0.01) is False  # times out unset
    woke: list[bool] = []
    waiters = [threading.Thread(target=lambda: woke.append(event.wait(60))) for _ in range(4)]
    for waiter in waiters:
        waiter.start()
    event.set()
    for waiter in waiters:
        waiter.join(60)
    assert woke == [True] * 4 and event.is_set() and event.wait() is True
    event.clear()
    assert not event.is_set() and CancelEvent().wait(0) is False


@jobsup.job("units-refuses", params={"card": Annotated[str, jobsup.Sensitive]})
def refuses(ctx: jobsup.JobContext, params: dict[str, str]) -> None:
    raise RuntimeError(f"declined {params['card']}")


def test_a_raised_exception_is_handed_on_only_for_a_job_without_sensitive_parameters() -> None:
    # What a dead letter's log record carries for error trackers: never from a job whose
    # frames hold opened sensitive values.
    plain = execute(claimed('{"token": "tok-0123456789abcdef"}', name="units-forgetful"), threading.Event())
    assert isinstance(plain.exc, RuntimeError)
    sensitive = execute(claimed('{"card": "4111111111111111"}', name="units-refuses"), threading.Event())
    assert sensitive.kind == "failed" and sensitive.exc is None and sensitive.error == "RuntimeError: declined ***"


def test_the_supervisor_s_stop_now_is_immediate_whatever_order_pending_handlers_run_in() -> None:
    """A busy worker can have the supervisor's SIGTERM (stop, with the grace) and its
    stop-now both pending; Python runs pending handlers in signal-number order."""
    import signal

    from jobsup.worker.stop import STOP_NOW, StopRequest

    def after(*signums: int) -> StopRequest:
        stop = StopRequest()
        for signum in signums:
            stop._handle(signum, None)
        return stop

    assert after(*sorted([signal.SIGTERM, STOP_NOW])).immediate
    # What the supervisor sent before: SIGINT, whose handler ran first and read as a first stop.
    assert not after(*sorted([signal.SIGTERM, signal.SIGINT])).immediate
    # At a terminal, Ctrl-C reaches the workers too: the first is graceful, the second is now.
    assert not after(signal.SIGINT, signal.SIGTERM).immediate
    assert after(signal.SIGINT, signal.SIGTERM, signal.SIGINT).immediate


def test_a_context_filled_for_a_worker_equals_one_built_by_its_own_init() -> None:
    from dataclasses import fields

    from jobsup.context import JobContext, job_context

    cancelled = threading.Event()
    given = (7, "send", "mail", 2, 5, {"to": "ann"}, "ann", cancelled)
    extras = {"log": object(), "client_loader": lambda: None, "progress_writer": print}
    for made, built in [
        (job_context(*given, **extras), JobContext(*given, **extras)),  # type: ignore[arg-type]
        (job_context(*given), JobContext(*given)),  # no log given: the job's own logger
    ]:
        assert made.__dict__ == built.__dict__ and set(made.__dict__) == {f.name for f in fields(JobContext)}
    assert made.log.name == "jobsup.job.send"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="keyword argument 'logger'"):  # as the init refuses it
        job_context(*given, logger=object())


def test_a_job_s_timeout_is_its_own_else_its_type_s_read_once_a_claim_else_its_queue_s() -> None:
    from jobsup.jobtypes import JobType, Resolver
    from jobsup.worker.timeouts import Timeouts

    published = {"units-slow": JobType("units-slow", timeout=9.0)}
    timeouts = Timeouts(Resolver(lambda: dict(published), ttl=0.0), queue_timeout=60.0)  # ttl 0: read at each look
    own = ClaimedJob(1, "units-slow", "default", "{}", 1, 5, 3.0, None, "w")
    typed = ClaimedJob(2, "units-slow", "default", "{}", 1, 5, None, None, "w")
    plain = ClaimedJob(3, "units-plain", "default", "{}", 1, 5, None, None, "w")
    assert [timeouts.of(job) for job in (own, typed, plain)] == [3.0, 9.0, 60.0]
    published["units-slow"] = JobType("units-slow", timeout=4.0)  # published anew
    assert timeouts.of(typed) == 9.0  # within one claim, a type's settings are read once
    timeouts.claimed()
    assert timeouts.of(typed) == 4.0 and timeouts.of(own) == 3.0
