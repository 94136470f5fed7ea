"""The jobs of the FastAPI example: imported by the web app (to enqueue with their settings)
and by the workers (`jobsup start --app jobs`)."""

import time
from typing import Any

import jobsup


@jobsup.job("make-thumbnail", queue="images", max_attempts=3, timeout="60s")
def make_thumbnail(ctx: jobsup.JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    sizes = payload.get("sizes", [64, 128, 256])
    for done, size in enumerate(sizes, start=1):
        ctx.raise_if_cancelled()
        ctx.log.info("resizing %s to %d pixels", payload["image"], size)
        time.sleep(payload.get("seconds_each", 0))  # the real work
        ctx.set_progress(done / len(sizes))
    return {"image": payload["image"], "thumbnails": [f"{payload['image']}@{size}" for size in sizes]}
