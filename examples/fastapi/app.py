"""A FastAPI app that hands slow work to jobsup: POST /thumbnails enqueues, GET
/thumbnails/{id} reports the job's status, progress and result.

    jobsup db upgrade                                # once: the tables, in ./jobsup.db
    uvicorn app:app                                  # the web app (pip install fastapi uvicorn)
    jobsup start --app jobs --queue images=2         # the workers, in another terminal
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jobs  # noqa: F401 - the job types, so that enqueue knows their queue and settings
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import jobsup


class ThumbnailRequest(BaseModel):
    image: str
    sizes: list[int] = [64, 128, 256]


def create_app(database_url: str | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.jobs = jobsup.AsyncClient(database_url or os.environ.get("JOBSUP_DATABASE_URL"))
        yield
        await app.state.jobs.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/thumbnails", status_code=202)
    async def request_thumbnails(request: ThumbnailRequest) -> dict[str, Any]:
        job_id = await app.state.jobs.enqueue("make-thumbnail", request.model_dump())
        return {"job_id": job_id}

    @app.get("/thumbnails/{job_id}")
    async def thumbnail_status(job_id: int) -> dict[str, Any]:
        job = await app.state.jobs.get(job_id)
        if job is None or job.name != "make-thumbnail":
            raise HTTPException(404, "no such thumbnail job")
        return {"status": job.status, "progress": job.progress, "result": job.result, "error": job.last_error}

    return app


app = create_app()
