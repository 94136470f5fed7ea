"""A workflow's graph on its page (issue 30, item 4): layered left to right by what each step
waits for, each step coloured by status and linking to its job, the edges out of a failed
step drawn as failed. The browser's view of it is in tests/test_web_browser.py."""

from __future__ import annotations

import re

from jobsup.store.rows import StepInfo
from jobsup.web.graph import layers_of, workflow_graph


def step(name: str, *after: str, status: str = "succeeded", job_id: int = 1) -> StepInfo:
    return StepInfo(name, job_id, "work", status, tuple(after), "cancel", 1, None, None)


def test_steps_are_layered_by_what_they_wait_for() -> None:
    steps = [step("report", "clean", "fetch-b"), step("fetch-a"), step("clean", "fetch-a"), step("fetch-b")]
    assert [[s.name for s in layer] for layer in layers_of(steps)] == [["fetch-a", "fetch-b"], ["clean"], ["report"]]


def test_a_failed_step_its_path_and_its_links_are_drawn() -> None:
    steps = [
        step("extract", status="succeeded", job_id=7),
        step("transform", "extract", status="dead_lettered", job_id=8),
        step("load", "transform", status="cancelled", job_id=9),
    ]
    drawn = str(workflow_graph(steps, root="/ops"))
    assert re.findall(r'href="([^"]+)"', drawn) == ["/ops/jobs/7", "/ops/jobs/8", "/ops/jobs/9"]
    assert re.findall(r'<rect class="node (s-\w+)"', drawn) == ["s-succeeded", "s-dead_lettered", "s-cancelled"]
    assert drawn.count('class="edge failed"') == 1 and drawn.count('class="edge"') == 1  # out of the failed step
    assert "3 steps in 3 layers, 2 failed or cancelled" in drawn
    x = [float(v) for v in re.findall(r'<rect class="node [^"]+" x="([\d.]+)"', drawn)]
    assert x == sorted(x) and len(set(x)) == 3  # left to right


def test_names_are_escaped() -> None:
    drawn = str(workflow_graph([step("<script>")]))
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
