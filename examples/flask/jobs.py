"""The jobs of the Flask example: imported by the web app and by the workers
(`jobsup start --app jobs`)."""

from typing import Any

import jobsup


@jobsup.job("send-report", queue="reports", max_attempts=5)
def send_report(ctx: jobsup.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    ctx.log.info("building the %s report for %s", payload["period"], payload["email"])
    return {"sent_to": payload["email"], "period": payload["period"]}
