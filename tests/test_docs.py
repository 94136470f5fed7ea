"""The documentation site (mkdocs.yml, docs/) builds with --strict, its reference pages cover
what the code defines, and its code blocks do what they claim.

The rule for code blocks (docs/contributing.md says it for writers):

1. Every ```python block compiles (top-level ``await`` allowed, so fragments of async code
   are fine), every ```toml block parses as TOML and every ```json block as a sequence of
   JSON values.
2. A ```python block whose first line is ``# examples/.../NAME.py`` is that file of the
   repository, verbatim after that line (so a page cannot drift from an example that
   tests/test_examples.py runs); it is also written into the page's folder as ``NAME.py``.
3. A ```python block whose first line is ``# NAME.py`` is a file of the page's example,
   written into a fresh temporary folder of the page.
4. A block on the line after ``<!-- docs: run -->`` runs, in that folder, after every file
   of the page is written, in page order: a ```sh block line by line under ``bash -e``, a
   ```python block as a script. They run with the virtualenv's ``bin`` first on PATH (as
   with it activated), no ``JOBSUP_*`` variable but ``JOBSUP_METRICS_PORT=0``, so each
   ``jobsup`` command works on ``./jobsup.db`` in the folder; each must exit 0.

Any other block (```sh, ```console, a bare ```) is for reading only.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
RUN_MARK = "<!-- docs: run -->"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
RUN_TIMEOUT = 120


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str
    run: bool

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The path its first line names (`# myapp.py`, `# examples/fastapi/app.py`), if any."""
        first = self.text.split("\n", 1)[0]
        found = re.fullmatch(r"# ([\w./-]+\.py)", first) if self.lang == "python" else None
        return found.group(1) if found else None


def blocks(text: str, page: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        indent = match.group("indent")
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line for line in match.group("body").splitlines(True)
        )
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, match.group("lang"), body, before == RUN_MARK))
    return found


def check_syntax(block: Block) -> None:
    if block.lang == "python":
        try:
            compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError as exc:
            raise AssertionError(f"{block.where}: the python block does not compile: {exc}") from None
    elif block.lang == "toml":
        try:
            tomllib.loads(block.text)
        except tomllib.TOMLDecodeError as exc:
            raise AssertionError(f"{block.where}: the toml block does not parse: {exc}") from None
    elif block.lang == "json":
        decoder, text, at = json.JSONDecoder(), block.text, 0
        while (at := len(text) - len(text[at:].lstrip())) < len(text):
            try:
                _, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError as exc:
                raise AssertionError(f"{block.where}: the json block does not parse: {exc}") from None


def environment() -> dict[str, str]:
    """A shell with the virtualenv active and no jobsup settings of ours."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBSUP_") and key != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["JOBSUP_METRICS_PORT"] = "0"  # another jobsup on this machine may hold the default port
    return env


def check_page(text: str, page: str, folder: Path) -> int:
    """Rules 1-4 on one page's text; returns how many blocks ran."""
    found = blocks(text, page)
    for block in found:
        check_syntax(block)
        name = block.file_name
        if name is None:
            continue
        body = block.text.split("\n", 1)[1]
        if "/" in name:
            source = ROOT / name
            assert name.startswith("examples/") and source.is_file(), f"{block.where}: no file {name} in the repository"
            assert body == source.read_text(), f"{block.where}: the block is not {name} as it is now: copy it again"
        (folder / Path(name).name).write_text(body)
    ran = 0
    for number, block in enumerate(b for b in found if b.run):
        if block.lang == "sh":
            command = ["bash", "-e", "-c", block.text]
        elif block.lang == "python":
            script = folder / f"_docs_block_{number}.py"
            script.write_text(block.text)
            command = [sys.executable, script.name]
        else:
            raise AssertionError(f"{block.where}: only sh and python blocks can be marked to run, not {block.lang!r}")
        done = subprocess.run(
            command, cwd=folder, env=environment(), capture_output=True, text=True, timeout=RUN_TIMEOUT
        )
        assert done.returncode == 0, f"{block.where}: exited {done.returncode}\n{done.stdout}{done.stderr}"
        ran += 1
    return ran


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_the_code_blocks_of_each_page_compile_and_the_marked_ones_run(page: Path, tmp_path: Path) -> None:
    check_page(page.read_text(), str(page.relative_to(ROOT)), tmp_path)


def test_the_rule_catches_what_it_promises_to(tmp_path: Path) -> None:
    """Each rule can fail: a broken block, a drifted example, a run that exits non-zero."""
    broken = {
        "```python\ndef f(:\n```\n": "does not compile",
        "```toml\na = \n```\n": "does not parse",
        '```json\n{"a": 1} {"b":\n```\n': "does not parse",
        "```python\n# examples/fastapi/jobs.py\nimport jobsup\n```\n": "is not examples/fastapi/jobs.py",
        f"{RUN_MARK}\n```sh\ntrue\nfalse\ntrue\n```\n": "exited 1",
        f"```python\n# mod.py\nVALUE = 1\n```\n\n{RUN_MARK}\n```python\nimport mod\nassert mod.VALUE == 2\n```\n": (
            "exited 1"
        ),
    }
    for number, (text, message) in enumerate(broken.items()):
        folder = tmp_path / str(number)
        folder.mkdir()
        with pytest.raises(AssertionError, match=message):
            check_page(text, "broken.md", folder)
    folder = tmp_path / "fine"
    folder.mkdir()
    fine = f"```python\n# mod.py\nVALUE = 2\n```\n\n  {RUN_MARK}\n  ```python\n  import mod\n"
    fine += "  assert mod.VALUE == 2\n  ```\n"
    assert check_page(fine, "fine.md", folder) == 1


def test_the_site_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (site / "reference" / "python-api.html").read_text()
    for name in ("jobsup.client.Client.enqueue", "jobsup.asyncclient.AsyncClient", "jobsup.context.JobContext"):
        assert f'id="{name}"' in api, f"the Python API page lost {name}"
    assert 'id="jobsup-dead-retry"' in (site / "reference" / "cli.html").read_text(), (
        "the CLI page lost the lazy commands"
    )
    assert json.loads((site / "reference" / "openapi.json").read_text())["openapi"].startswith("3.1")


def test_every_page_is_in_the_navigation() -> None:
    """A page outside the nav is built but never found; the Django tutorial and how-to are
    merged with their nav entries (docs/tutorial/django*, docs/how-to/django*)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [str(p.relative_to(DOCS)) for p in PAGES if str(p.relative_to(DOCS)) not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


# -- the reference pages cover what the code defines -------------------------------------


def page_text(name: str) -> str:
    return (DOCS / name).read_text()


def test_the_settings_reference_names_every_setting_and_its_variable() -> None:
    from jobsup.settings import Settings

    text = page_text("reference/settings.md")
    missing = [f.name for f in fields(Settings) if f"`{f.name}`" not in text or f"JOBSUP_{f.name.upper()}" not in text]
    assert not missing, f"docs/reference/settings.md lacks these settings (or their JOBSUP_ variable): {missing}"


def test_the_metrics_reference_names_every_metric() -> None:
    from jobsup.observe.metrics import _metrics

    text = page_text("reference/metrics.md")
    listed = set(re.findall(r"^\| `(jobsup_\w+)` \|", text, re.M))
    defined = set()
    for metric in _metrics().values():
        suffix = "_total" if metric._type == "counter" else ""
        defined.add(metric._name + suffix)
    assert defined - listed == set(), f"metrics missing from docs/reference/metrics.md: {sorted(defined - listed)}"
    assert listed - defined == set(), (
        f"docs/reference/metrics.md lists metrics the code lacks: {sorted(listed - defined)}"
    )


def test_the_events_reference_is_the_public_catalogue() -> None:
    from jobsup.events.catalogue import KINDS

    public = {name for name, kind in KINDS.items() if kind.meaning is not None}
    section = page_text("reference/events.md").split("## Catalogue", 1)[1]
    listed = set(re.findall(r"^\| `([\w.]+)` \|", section, re.M))
    assert listed == public, f"not listed: {sorted(public - listed)}; not public events: {sorted(listed - public)}"


def test_the_http_reference_lists_every_route() -> None:
    from jobsup.web.app import OPERATIONS
    from jobsup.web.openapi import PREFIX

    listed = set(re.findall(r"^\| `([A-Z]+)` \| `(/api/v1/[^`]*)` \|", page_text("reference/http-api.md"), re.M))
    declared = {(op.method, PREFIX + op.path) for op in OPERATIONS}
    assert listed == declared, f"not listed: {sorted(declared - listed)}; not declared: {sorted(listed - declared)}"


# -- the README and the docs agree ---------------------------------------------------------


def test_the_readme_is_short_and_its_first_example_is_the_tutorials() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 250, "the README is the pitch: at most 250 lines, the rest goes into docs/"
    section = readme[readme.index("## Using it from Python") :]
    tutorial = page_text("tutorial/first-job.md")
    for lang in ("python", "sh"):
        example = re.search(rf"```{lang}\n.*?```\n", section, re.S)
        assert example is not None and example.group(0) in tutorial, (
            f"the README's {lang} example differs from the tutorial's"
        )


def test_links_from_the_readme_into_docs_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into docs/"
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_nothing_offers_an_install_from_pypi_as_if_published() -> None:
    """jobsup is not on PyPI yet: `pip install 'jobsup[...]'` appears only beside "once it
    is published"."""
    for path in [ROOT / "README.md", *PAGES]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install (-U )?'?jobsup\b", line):
                assert "once it is published" in line, f"{path.relative_to(ROOT)}:{number}: {line}"
