"""What can be checked of deploy/ here: the alert rules (promtool), the metrics format of a
real scrape (promtool), a real Prometheus server scraping a running `jobsup start`, the
systemd unit (systemd-analyze), and the settings the manifests must keep. No container
engine runs here, so the image and the compose file are not built or started."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import jobsup

from harness import Supervisor, scrape
from helpers import wait_until

DEPLOY = Path(__file__).parent.parent / "deploy"
SHUTDOWN_GRACE = 20


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it (Debian's prometheus and systemd)", pytrace=False)
        pytest.skip(f"{name} is not installed (apt-get install prometheus systemd)")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[jobsup.Client, int]]:
    """A supervisor on SQLite that has run successes and a dead letter, serving /metrics."""
    from jobsup.store import migrate
    from jobsup.store.database import Database

    folder = tmp_path_factory.mktemp("deploy")
    (folder / "record").mkdir()
    url = f"sqlite:///{folder / 'jobsup.db'}"
    migrate.upgrade(Database(url))
    client = jobsup.Client(url)
    port = free_port()
    supervisor = Supervisor(url, folder / "record", folder / "supervisor.log", metrics_port=str(port))
    ids = client.enqueue_many(
        [{"name": "work"} for _ in range(4)] + [{"name": "work", "payload": {"fail": True}, "max_attempts": 1}]
    )
    wait_until(lambda: all(client.get(i).status != "pending" for i in ids), timeout=30, what="jobs to finish")  # type: ignore[union-attr]
    yield client, port
    supervisor.stop()


def scrape_metrics(port: int) -> str:
    status, text = scrape(port)
    assert status == 200, text
    return text


def test_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    promtool = tool("promtool")
    check = subprocess.run(
        [promtool, "check", "rules", "alerts.yml"], cwd=DEPLOY / "prometheus", capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 11 rules found" in check.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yml"], cwd=DEPLOY / "prometheus", capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.slow  # a real `jobsup start` (the module's fixture)
def test_a_real_scrape_passes_promtool_check_metrics(running: tuple[jobsup.Client, int]) -> None:
    promtool = tool("promtool")
    text = scrape_metrics(running[1])
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # a real `jobsup start` (the module's fixture)
def test_every_metric_the_alerts_and_dashboard_use_is_declared(running: tuple[jobsup.Client, int]) -> None:
    from jobsup.observe.metrics import declared_names

    declared = declared_names()
    # The queue gauges are set by a maintenance pass, the first a tick after the start; one whose
    # step met a busy database sets them at the next pass (maintenance_interval, 15 s).
    wait_until(
        lambda: "\njobsup_queue_jobs{" in scrape_metrics(running[1]), timeout=60, what="the queue gauges' first pass"
    )
    lines = scrape_metrics(running[1]).splitlines()
    exported = {line.split("{")[0].split(" ")[0] for line in lines if line.startswith("jobsup_")}
    assert exported <= declared
    assert {"jobsup_worker_restarts_total", "jobsup_maintenance_errors_total", "jobsup_queue_jobs"} <= exported
    used = set()
    for path in (DEPLOY / "prometheus" / "alerts.yml", DEPLOY / "grafana" / "jobsup-dashboard.json"):
        used |= set(re.findall(r"\bjobsup_[a-z_]+", path.read_text()))
    assert used - declared == set()


def test_the_grafana_dashboard_is_valid_and_charts_what_operators_look_for() -> None:
    """Its panels parse, do not overlap, name only declared metrics, and cover the metrics
    added for limits, events and hooks (a panel naming a metric jobsup does not export fails)."""
    from jobsup.observe.metrics import declared_names

    board = json.loads((DEPLOY / "grafana" / "jobsup-dashboard.json").read_text())
    panels = board["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells = [
        (x, y)
        for panel in panels
        for x in range(panel["gridPos"]["x"], panel["gridPos"]["x"] + panel["gridPos"]["w"])
        for y in range(panel["gridPos"]["y"], panel["gridPos"]["y"] + panel["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells)), "two panels overlap"
    exprs = " ".join(target["expr"] for panel in panels for target in panel["targets"])
    used = set(re.findall(r"\bjobsup_[a-z_]+", exprs))
    assert used - declared_names() == set()
    for needed in (
        *("jobsup_outbox_events", "jobsup_outbox_parked_events", "jobsup_breaker_state"),
        *("jobsup_sla_breaches_total", "jobsup_queue_paused", "jobsup_recurring_skipped_total"),
        *("jobsup_hook_failures_total", "jobsup_events_publish_failures_total"),
    ):
        assert needed in used, needed
    assert 'status=~"retrying|scheduled|waiting"' in exprs


@pytest.mark.slow  # a real `jobsup start` (the module's fixture)
def test_a_real_prometheus_scrapes_jobsup_and_answers_promql(
    running: tuple[jobsup.Client, int], tmp_path: Path
) -> None:
    prometheus = tool("prometheus")
    client, port = running
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                # The shipped config's scrape settings (honor_labels), aimed at this instance.
                "scrape_configs": [{**shipped_scrape(), "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
            }
        )
    )
    web = free_port()
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The alerts group by the job type's `job` label: it must survive the scrape.
        query = urllib.parse.quote('sum by (job, outcome) (jobsup_jobs_completed_total{job!="jobsup"})')

        def answer() -> dict[str, float]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?query={query}", timeout=5) as r:
                    result = json.load(r)["data"]["result"]
            except OSError:
                return {}
            found: dict[str, float] = {}
            for item in result:
                assert "exported_job" not in item["metric"], item
                found[item["metric"]["outcome"]] = found.get(item["metric"]["outcome"], 0) + float(item["value"][1])
            return found

        found = wait_until(answer, timeout=60, what="Prometheus to answer the query")
        succeeded = sum(1 for job in client.list_jobs(status="succeeded"))
        assert found == {"succeeded": float(succeeded), "failed": 1.0}
    finally:
        server.terminate()
        server.wait(30)


def shipped_scrape() -> dict[str, Any]:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    [scrape] = config["scrape_configs"]
    assert scrape["honor_labels"] is True
    return {key: value for key, value in scrape.items() if key != "static_configs"}


def test_systemd_unit_verifies_and_outlasts_the_shutdown_grace(tmp_path: Path) -> None:
    unit = (DEPLOY / "systemd" / "jobsup.service").read_text()
    stop = int(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1))  # type: ignore[union-attr]
    assert stop > SHUTDOWN_GRACE + 5
    assert re.search(r"^KillSignal=SIGTERM", unit, re.M) and re.search(r"^Restart=on-failure", unit, re.M)
    analyze = tool("systemd-analyze")
    # verify needs the ExecStart binary to exist: point it at this environment's jobsup.
    copy = tmp_path / "jobsup.service"
    copy.write_text(unit.replace("/opt/jobsup/.venv/bin/jobsup", shutil.which("jobsup") or "/bin/true"))
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True)
    problems = [line for line in result.stderr.splitlines() if "jobsup.service" in line and "User=" not in line]
    assert problems == [], result.stderr


def test_kubernetes_manifests_outlast_the_grace_and_probe_healthz() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "jobsup.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["spec"]["terminationGracePeriodSeconds"] > SHUTDOWN_GRACE + 5
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9465"
    config = next(d for d in documents if d["kind"] == "ConfigMap")["data"]["jobsup.toml"]
    from jobsup.settings import load

    (Path(os.environ.get("TMPDIR", "/tmp")) / "jobsup-k8s-check").mkdir(exist_ok=True)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "jobsup-k8s-check"
    (folder / "jobsup.toml").write_text(config)
    settings = load(directory=folder)
    assert settings.metrics_port == 9465 and settings.shutdown_grace == SHUTDOWN_GRACE


def test_compose_file_has_postgres_jobsup_and_prometheus() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert {"postgres", "jobsup-1", "jobsup-2", "prometheus"} <= set(compose["services"])
    assert int(compose["services"]["jobsup-1"]["stop_grace_period"].rstrip("s")) > SHUTDOWN_GRACE + 5
    scrape_config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = scrape_config["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["jobsup-1:9465", "jobsup-2:9465"]


def test_the_image_installs_the_web_extra_so_it_can_serve_the_dashboard() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if line.startswith("RUN ") and "pip install" in line)
    targets = [word for word in shlex.split(install) if word.startswith(".")]
    assert len(targets) == 1, install
    extras = re.fullmatch(r"\.\[([\w,]+)\]", targets[0])
    assert extras is not None, f"the image installs {targets[0]!r}, without the web extra that `jobsup dashboard` needs"
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]
    known = project["optional-dependencies"]
    installed = set(extras.group(1).split(","))
    assert {"web", "postgresql", "calendars"} <= installed <= set(known)  # the dashboard, its database, holidays
    assert {"starlette", "uvicorn", "jinja2"} <= {re.split(r"[<>=\[ ]", r)[0] for r in known["web"]}
