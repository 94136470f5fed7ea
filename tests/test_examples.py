"""The examples' own test suites pass as their users run them: `pytest` in each folder, in a
fresh interpreter, where installing jobsup gives the jobsup_client fixture (pytest11)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.mark.parametrize(("folder", "tests"), [("testing", 5), ("fastapi", 2), ("flask", 3), ("django", 2)])
def test_an_examples_suite_passes_as_a_user_runs_it(folder: str, tests: int) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "JOBSUP_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLES / folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and re.search(rf"\b{tests} passed\b", done.stdout), done.stdout + done.stderr
