"""The README's first Python example ("Using it from Python") runs as printed: its file, then
its shell commands one by one, in a new folder on SQLite, with a real `jobsup start`, so the
README cannot drift from what works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import jobsup

from helpers import wait_until

README = Path(__file__).parent.parent / "README.md"


def first_example() -> tuple[str, str, list[str]]:
    """The example's file name (its first line says it), its code, and its shell commands."""
    text = README.read_text()
    section = text[text.index("## Using it from Python") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    assert code is not None and shell is not None, "the section lost its example"
    name = re.fullmatch(r"# (\w+\.py)", code.group(1).splitlines()[0])
    assert name is not None, "the example's first line names its file, e.g. # myapp.py"
    return name.group(1), code.group(1), [line for line in shell.group(1).splitlines() if line.strip()]


def environment() -> dict[str, str]:
    """The shell of someone with jobsup's virtualenv active, and no jobsup settings of ours."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_") and key != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # The one setting given: another jobsup on this machine may hold the default metrics port.
    env["JOBSUP_METRICS_PORT"] = "0"
    return env


def test_the_first_python_example_runs_as_printed(tmp_path: Path) -> None:
    name, code, commands = first_example()
    (tmp_path / name).write_text(code)
    assert [command.split()[:2] for command in commands] == [
        ["jobsup", "db"],
        ["python", name],
        ["jobsup", "start"],
        ["jobsup", "jobs"],
    ], "the example's commands changed: make this test follow them"
    upgrade, enqueue, start, look = commands
    env = environment()

    def run(command: str) -> str:
        result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        return result.stdout

    assert "jobsup schema is at revision" in run(upgrade)
    printed = run(enqueue)
    assert "1 send-email pending\n4 pending\n" in printed, printed
    client = jobsup.Client(f"sqlite:///{tmp_path / 'jobsup.db'}")
    log = tmp_path / "start.log"
    with open(log, "wb") as out:
        supervisor = subprocess.Popen(["bash", "-c", f"exec {start}"], cwd=tmp_path, env=env, stdout=out, stderr=out)
        try:
            wait_until(
                lambda: (
                    sorted(job.status for job in client.list_jobs(queue="mail"))
                    == ["cancelled", "succeeded", "succeeded", "succeeded"]
                ),
                timeout=180,  # a deadline: the suite runs the fault campaign's supervisors beside it
                what=lambda: f"three jobs to succeed: {log.read_text(errors='replace')}",
            )
            listed = run(look)
        finally:
            supervisor.send_signal(signal.SIGINT)
            code_at_exit = supervisor.wait(60)
    client.close()
    assert listed.count("succeeded") == 3 and listed.count("cancelled") == 1, listed
    output = log.read_text(errors="replace")
    assert code_at_exit == 0, output
    assert "sending to a@example.com (job 1, attempt 1)" in output
