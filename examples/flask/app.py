"""A Flask app that enqueues in the same transaction as its own writes: POST /reports
records the request in the app's table and enqueues the job on the same connection, so both
commit or neither does; GET /reports/<id> reports the job.

    jobsup db upgrade                                # once: the tables, in ./jobsup.db
    flask --app app run                              # the web app (pip install flask)
    jobsup start --app jobs --queue reports=1        # the workers, in another terminal
"""

import os
from typing import Any

import jobs  # noqa: F401 - the job types, so that enqueue knows their queue and settings
from flask import Flask, abort, request
from sqlalchemy import Column, Integer, MetaData, String, Table, insert
from sqlalchemy.exc import IntegrityError

import jobsup

metadata = MetaData()
requests_table = Table(  # one open request per address
    "report_request", metadata, Column("id", Integer, primary_key=True), Column("email", String(200), unique=True)
)


def create_app(database_url: str | None = None) -> Flask:
    app = Flask(__name__)
    client = jobsup.Client(database_url or os.environ.get("JOBSUP_DATABASE_URL"))
    engine = client.database.engine  # the app's own tables live in the same database here
    metadata.create_all(engine)

    @app.post("/reports")
    def request_report() -> tuple[dict[str, Any], int]:
        body = request.get_json(silent=True) or {}
        if not isinstance(body.get("email"), str) or body.get("period") not in ("weekly", "monthly"):
            abort(400, "give an email and a period (weekly or monthly)")
        try:
            with engine.begin() as conn:  # one transaction: the request row and its job
                job_id = client.enqueue(
                    "send-report", {"email": body["email"], "period": body["period"]}, connection=conn
                )
                conn.execute(insert(requests_table).values(email=body["email"]))
        except IntegrityError:  # already requested: the job enqueued above rolled back with it
            abort(409, "a report for this address is already on its way")
        return {"job_id": job_id}, 202

    @app.get("/reports/<int:job_id>")
    def report_status(job_id: int) -> dict[str, Any]:
        job = client.get(job_id)
        if job is None or job.name != "send-report":
            abort(404)
        return {"status": job.status, "result": job.result}

    return app
