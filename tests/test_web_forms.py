"""The dashboard's forms (issue 30 item 5): a job type's page with its typed enqueue form,
built from the JSON Schema the workers published, against a real database through the
dashboard's app; a refused answer shows the form again with the error and what was typed
(never a sensitive value)."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from typing import Annotated, Any, Literal

import pytest

import jobsup
from jobsup.errors import BadInput
from jobsup.jobtypes import JobType
from jobsup.params import params_of
from jobsup.secrets import ENV
from jobsup.templates import template
from jobsup.web.forms import CHECKBOX, CHOICE, INTEGER, JSON, NUMBER, TEXT, fields_of, payload_of

from webhelpers import csrf_of, log_in, web

KEY = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
TOKEN = "tok-Form-never-shown"


@dataclasses.dataclass
class Invoice:
    to: str
    amount: float
    copies: int = 1
    urgent: bool = False
    currency: Literal["EUR", "USD"] = "EUR"
    lines: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None
    token: Annotated[str | None, jobsup.Sensitive] = None
    subject: str = template("Invoice {now:%Y-%m-%d}")
    paid: bool | None = None
    send: bool = True


INVOICE = params_of(Invoice, job="invoice")


def test_each_parameter_gets_the_input_of_its_type() -> None:
    fields = {f.name: f for f in fields_of(INVOICE.schema)}
    kinds = {name: f.kind for name, f in fields.items()}
    assert kinds == {
        "to": TEXT,
        "amount": NUMBER,
        "copies": INTEGER,
        "urgent": CHECKBOX,
        "currency": CHOICE,
        "lines": JSON,
        "note": TEXT,  # Optional[str]: a text box left empty leaves it out
        "token": TEXT,
        "subject": TEXT,
        "paid": CHOICE,  # an optional boolean: a checkbox cannot leave it out
        "send": CHECKBOX,
    }
    assert [name for name, f in fields.items() if f.required] == ["to", "amount"]
    assert [name for name, f in fields.items() if f.sensitive] == ["token"]
    assert fields["copies"].value == "1" and fields["currency"].value == '"EUR"' and fields["lines"].value == "[]"
    assert fields["currency"].choices == (('"EUR"', "EUR"), ('"USD"', "USD"))
    assert fields["subject"].value == "" and fields["subject"].placeholder == "template: Invoice {now:%Y-%m-%d}"
    assert fields["paid"].choices == (("true", "true"), ("false", "false")) and fields["send"].value == "true"


def test_the_answers_make_the_payload_and_a_wrong_kind_is_named() -> None:
    fields = fields_of(INVOICE.schema)
    form = {
        "p.to": ["a@example.com"],
        "p.amount": ["12.50"],
        "p.copies": ["3"],
        "p.urgent": ["true"],
        "p.currency": ['"USD"'],
        "p.lines": ['["x", "y"]'],
        "p.note": [""],
        "p.subject": [""],
    }
    assert payload_of(fields, form) == {
        "to": "a@example.com",
        "amount": 12.5,
        "copies": 3,
        "urgent": True,
        "currency": "USD",
        "lines": ["x", "y"],
        "send": False,  # a checkbox left unticked
    }
    assert payload_of(fields, {"p.to": ["b"], "p.amount": ["7"]}) == {
        "to": "b",
        "amount": 7,
        "urgent": False,
        "send": False,
    }
    assert payload_of(fields, {"p.amount": [" 1e3 "], "p.copies": ["4.0"], "p.paid": ["false"]}) == {
        "amount": 1000,
        "copies": 4,
        "paid": False,
        "urgent": False,
        "send": False,
    }
    for odd in ("1_000", "\uff11", "--5", "nan", "inf", "0x10"):  # Python's int() or float() take some of these
        with pytest.raises(BadInput, match="is not a number"):
            payload_of(fields, {**form, "p.copies": [odd]})
    with pytest.raises(BadInput, match="is not JSON"):
        payload_of(fields, {**form, "p.lines": ["[" * 5000]})
    with pytest.raises(BadInput, match=r"field 'copies': '2\.5' is not a whole number"):
        payload_of(fields, {**form, "p.copies": ["2.5"]})
    with pytest.raises(BadInput, match=r"field 'lines': '\[x' is not JSON"):
        payload_of(fields, {**form, "p.lines": ["[x"]})
    with pytest.raises(BadInput, match="field 'amount'"):
        payload_of(fields, {**form, "p.amount": ["twelve"]})


def _publish(url: str) -> None:
    jobsup.Client(url).store.definitions.publish(
        [JobType("invoice", queue="billing", params=INVOICE.schema), JobType("untyped")], instance="workers"
    )


def _enqueue(http: Any, name: str, form: dict[str, str]) -> Any:
    token = csrf_of(http, f"/definitions/{name}")
    return http.post(f"/actions/definitions/{name}/enqueue", data={"csrf": token, **form}, follow_redirects=False)


def test_a_job_type_page_enqueues_from_its_typed_form_sealed_and_audited(
    url: str, client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    _publish(url)
    with web(url) as http:
        assert log_in(http).status_code == 303
        listed = http.get("/definitions").text
        assert 'href="/definitions/invoice"' in listed and "typed" in listed
        form = http.get("/definitions/invoice").text
        assert re.search(r'<input type="password" name="p\.token"', form)
        assert 'name="p.copies" value="1"' in form and 'placeholder="template: Invoice {now:%Y-%m-%d}"' in form

        done = _enqueue(
            http, "invoice", {"p.to": "a@example.com", "p.amount": "9.5", "p.token": TOKEN, "priority": "5"}
        )
        assert done.status_code == 303
        job_id = int(re.search(r"/jobs/(\d+)\?", done.headers["location"]).group(1))  # type: ignore[union-attr]
        assert "enqueued" in http.get(done.headers["location"]).text
    job = client.get(job_id)
    assert job is not None and job.queue == "billing" and job.priority == 5
    assert job.payload["to"] == "a@example.com" and job.payload["amount"] == 9.5 and job.payload["copies"] == 1
    assert job.payload["token"] == "***" and job.payload["subject"].startswith("Invoice ")  # sealed; the template ran
    [entry] = client.audit.list(action="job.enqueue")
    assert (entry.actor, entry.target, entry.job_ids) == ("web:alice", "invoice", (job_id,))


def test_a_refused_form_comes_back_with_the_error_and_what_was_typed_but_secrets(
    url: str, client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    _publish(url)
    with web(url) as http:
        log_in(http)
        wrong = _enqueue(http, "invoice", {"p.to": "kept@example.com", "p.amount": "lots", "p.token": TOKEN})
        assert wrong.status_code == 400
        assert "field &#39;amount&#39;: &#39;lots&#39; is not a number" in wrong.text
        assert 'value="kept@example.com"' in wrong.text and TOKEN not in wrong.text
        missing = _enqueue(http, "invoice", {"p.amount": "3"})
        assert missing.status_code == 400 and "field &#39;to&#39; is required" in missing.text
        bad_delay = _enqueue(http, "invoice", {"p.to": "x", "p.amount": "3", "delay": "soonish"})
        assert bad_delay.status_code == 400 and "soonish" in bad_delay.text
        untyped = _enqueue(http, "untyped", {"payload": '{"n": 1}'})
        assert untyped.status_code == 303
        not_json = _enqueue(http, "untyped", {"payload": "{n: 1}"})
        assert not_json.status_code == 400 and "not JSON" in not_json.text and "{n: 1}" in not_json.text
    assert [j.name for j in client.jobs_page()[0]] == ["untyped"]  # nothing refused was written


def test_enqueuing_needs_the_operator_role_and_a_published_type(url: str) -> None:
    _publish(url)
    with web(url) as http:
        log_in(http, "bob")  # a reader
        page = http.get("/definitions/invoice").text
        assert "needs the operator role" in page and "/enqueue" not in page
        token = csrf_of(http, "/definitions/invoice")
        refused = http.post("/actions/definitions/invoice/enqueue", data={"csrf": token}, follow_redirects=False)
        assert refused.status_code == 403
        unknown = http.get("/definitions/nothing-here")
        assert unknown.status_code == 404 and "no job type &#39;nothing-here&#39;" in unknown.text


def _schedule(http: Any, form: dict[str, str], page: str = "/recurring/new") -> Any:
    token = csrf_of(http, page)
    return http.post("/actions/recurring/save", data={"csrf": token, **form}, follow_redirects=False)


def _slots(html: str) -> list[str]:
    listed = re.search(r'<ol class="slots">(.*?)</ol>', html, re.S)
    return [] if listed is None else re.findall(r"<li>(.*?)</li>", listed.group(1))


def test_a_schedule_is_previewed_and_added_from_its_form(url: str, client: jobsup.Client) -> None:
    _publish(url)
    nightly = {"name": "nightly", "job": "untyped", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}
    with web(url) as http:
        log_in(http)
        assert 'href="/recurring/new"' in http.get("/recurring").text
        preview = _schedule(http, {**nightly, "preview": "1"})
        slots = _slots(preview.text)
        assert preview.status_code == 200 and len(slots) == 5
        assert all(" 03:00 CE" in slot for slot in slots), slots  # local times of its zone
        assert client.schedules.list() == []  # a preview saves nothing
        odd = _schedule(http, {**nightly, "cron": "0 3 * *", "preview": "1"})
        assert odd.status_code == 200 and "is not a valid cron expression" in odd.text and _slots(odd.text) == []
        misspelt = _schedule(http, {**nightly, "timezone": "Europe/Berln", "payload": '{"n": 1}'})
        assert misspelt.status_code == 400 and "did you mean &#39;Europe/Berlin&#39;" in misspelt.text
        assert "{&#34;n&#34;: 1}" in misspelt.text and 'value="0 3 * * *"' in misspelt.text  # nothing typed lost
        saved = _schedule(http, {**nightly, "payload": '{"n": 1}'})
        assert saved.status_code == 303 and "schedule%20nightly%20saved" in saved.headers["location"]
    [schedule] = client.schedules.list()
    assert (schedule.job, schedule.cron, schedule.timezone, schedule.payload) == (
        "untyped",
        "0 3 * * *",
        "Europe/Berlin",
        {"n": 1},
    )
    [entry] = client.audit.list(action="recurring.add")
    assert (entry.actor, entry.target) == ("web:alice", "nightly")


def test_editing_a_schedule_never_shows_nor_drops_its_sensitive_values(
    url: str, client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    _publish(url)
    client.add_recurring("billing", job="invoice", cron="0 3 * * *", payload={"to": "a", "amount": 1, "token": TOKEN})
    edited = {"job": "invoice", "cron": "0 4 * * *", "timezone": "UTC", "editing": "billing"}
    with web(url) as http:
        log_in(http)
        form = http.get("/recurring/billing/edit")
        assert form.status_code == 200 and TOKEN not in form.text and "***" not in form.text
        assert "Sensitive, so not shown: token" in form.text and _slots(form.text)
        page = "/recurring/billing/edit"
        dropped = _schedule(http, {**edited, "payload": '{"to": "a", "amount": 1}'}, page)
        assert dropped.status_code == 400 and "token: sensitive" in dropped.text
        masked = _schedule(http, {**edited, "payload": '{"to": "a", "amount": 1, "token": "***"}'}, page)
        assert masked.status_code == 400 and "token: sensitive" in masked.text
        assert [s.cron for s in client.schedules.list()] == ["0 3 * * *"]  # refused: unchanged
        payload = '{"to": "b", "amount": 2, "token": "tok-new"}'
        assert _schedule(http, {**edited, "payload": payload}, page).status_code == 303
    [schedule] = client.schedules.list()
    assert schedule.cron == "0 4 * * *" and schedule.payload["token"] == "***"  # sealed again, masked on read
    assert (schedule.payload["to"], schedule.payload["amount"]) == ("b", 2)


def test_changing_schedules_needs_the_operator_role(url: str, client: jobsup.Client) -> None:
    _publish(url)
    with web(url) as http:
        log_in(http, "bob")
        assert "needs the operator role" in http.get("/recurring/new").text
        token = csrf_of(http, "/recurring")
        form = {"csrf": token, "name": "x", "job": "untyped", "cron": "* * * * *"}
        assert http.post("/actions/recurring/save", data=form, follow_redirects=False).status_code == 403
        assert http.get("/recurring/missing/edit").status_code == 404
    assert client.schedules.list() == []


def test_a_previewed_or_refused_schedule_never_shows_a_typed_secret(
    url: str, client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    _publish(url)
    typed = {"name": "billing", "job": "invoice", "cron": "0 3 * * *", "queue": "special"}
    payload = json.dumps({"to": "kept@example.com", "amount": 1, "token": TOKEN})
    with web(url) as http:
        log_in(http)
        for answer in ({**typed, "payload": payload, "preview": "1"}, {**typed, "payload": payload, "cron": "0 3"}):
            shown = _schedule(http, answer)
            assert TOKEN not in shown.text and "kept@example.com" in shown.text
            assert "Sensitive, so not shown: token" in shown.text
        unreadable = _schedule(http, {**typed, "payload": json.dumps({"token": TOKEN})[:-1]})
        assert unreadable.status_code == 400 and "not JSON" in unreadable.text and TOKEN not in unreadable.text
        cleared = _schedule(http, {**typed, "queue": "", "payload": "", "preview": "1"})
        assert 'name="queue" value=""' in cleared.text  # an emptied box stays empty
    assert client.schedules.list() == []


def test_a_new_schedule_cannot_replace_one_and_an_edit_keeps_its_calendar(url: str, client: jobsup.Client) -> None:
    _publish(url)
    client.calendars.add("weekend", [{"weekdays": ["sat", "sun"]}], timezone="UTC")
    client.add_recurring("nightly", job="untyped", cron="0 3 * * *", payload={"n": 1}, calendar="weekend")
    with web(url) as http:
        log_in(http)
        same_name = _schedule(http, {"name": "nightly", "job": "untyped", "cron": "0 4 * * *"})
        assert same_name.status_code == 400 and "schedule &#39;nightly&#39; exists" in same_name.text
        gone = _schedule(http, {"editing": "ghost", "job": "untyped", "cron": "0 4 * * *"})
        assert gone.status_code == 404 and client.schedules.get("ghost") is None
        for priority in ("--5", "\u00b2"):
            odd = _schedule(http, {"name": "other", "job": "untyped", "cron": "0 4 * * *", "priority": priority})
            assert odd.status_code == 400 and "is not a whole number" in odd.text
        for zone_name in ("Europe", "x" * 300):
            answer = {"name": "other", "job": "untyped", "cron": "0 4 * * *", "timezone": zone_name}
            assert "is not known" in _schedule(http, {**answer, "preview": "1"}).text
            assert _schedule(http, answer).status_code == 400
            assert (
                "is not known" in http.get("/recurring/new", params={"cron": "0 4 * * *", "timezone": zone_name}).text
            )
        edited = _schedule(http, {"editing": "nightly", "job": "untyped", "cron": "0 4 * * *", "payload": '{"n": 2}'})
        assert edited.status_code == 303
    schedule = client.schedules.get("nightly")
    assert schedule is not None and (schedule.cron, schedule.payload, schedule.calendar) == (
        "0 4 * * *",
        {"n": 2},
        "weekend",
    )


def test_the_forms_refuse_a_post_without_the_csrf_token(url: str, client: jobsup.Client) -> None:
    _publish(url)
    with web(url) as http:
        log_in(http)
        form = {"name": "x", "job": "untyped", "cron": "* * * * *"}
        assert http.post("/actions/recurring/save", data=form, follow_redirects=False).status_code == 403
        assert http.post("/actions/definitions/untyped/enqueue", data={}, follow_redirects=False).status_code == 403
    assert client.schedules.list() == [] and client.jobs_page()[0] == []


def test_a_refused_enqueue_shows_each_checkbox_as_it_was_left(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    _publish(url)
    with web(url) as http:
        log_in(http)
        assert re.search(r'name="p\.send" value="true" checked', http.get("/definitions/invoice").text)  # its default
        refused = _enqueue(http, "invoice", {"p.to": "a", "p.amount": "x"})  # send unticked
        assert refused.status_code == 400 and not re.search(r'name="p\.send" value="true" checked', refused.text)
