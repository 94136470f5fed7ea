"""A user's code type-checks against jobsup as the README installs it (editable, from the
checkout): mypy must find the package and read its types, which setuptools' default
editable mode hides behind an import hook (the package-dir mapping of shared/ to jobsup)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

USER_APP = """\
from __future__ import annotations

import jobsup


@jobsup.job("typed-check", max_attempts=3)
def work(ctx: jobsup.JobContext, payload: dict[str, int]) -> dict[str, int]:
    return {"attempt": ctx.attempt}


def enqueue(client: jobsup.Client) -> int:
    return client.enqueue("typed-check", {"n": 1}, delay="10s")
"""

# The same call, typed wrongly: flagged only if mypy reads jobsup's own annotations.
MISTAKE = """\
import jobsup


def enqueue(client: jobsup.Client) -> str:
    return client.enqueue("typed-check")
"""


def test_a_users_code_type_checks_against_the_installed_jobsup(tmp_path: Path) -> None:
    (tmp_path / "userapp.py").write_text(USER_APP)
    (tmp_path / "mistake.py").write_text(MISTAKE)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "MYPYPATH")}
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "userapp.py", "mistake.py"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert not any("Cannot find implementation or library stub" in line for line in errors), (
        "mypy cannot see the installed jobsup; install it as the README says "
        f"(pip install -e . --config-settings editable_mode=strict):\n{result.stdout}"
    )
    assert len(errors) == 1, result.stdout
    assert errors[0].startswith('mistake.py:5: error: Incompatible return value type (got "int", expected "str")')


def test_the_readme_and_ci_install_in_strict_editable_mode() -> None:
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    installs = re.findall(r"pip install -q -e \S+[^&\n]*", readme)
    assert len(installs) == 2 and all("--config-settings editable_mode=strict" in i for i in installs), installs
    test_command = re.search(r"^python3 -m venv \.venv && .*pytest -n 4$", readme, re.M)
    assert test_command is not None and test_command.group(0) in (root / ".ci" / "run").read_text()
