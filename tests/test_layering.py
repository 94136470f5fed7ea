"""The layers hold: only the dialect modules know which database they talk to, only the
store's statements write job rows, and no module grows past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = [ROOT / "shared", ROOT / "worker", ROOT / "supervisor"]
DIALECTS = ROOT / "shared" / "store" / "dialects"
NAMES = {"sqlite", "postgresql", "postgres", "mssql", "mysql", "mariadb"}


def sources() -> list[Path]:
    return sorted(path for folder in PACKAGE for path in folder.rglob("*.py"))


def _is_dialect_name(node: ast.AST) -> bool:
    """A database's name, or something that reads one (`x.dialect.name`, `get_backend_name()`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in NAMES
    if isinstance(node, ast.Attribute) and node.attr == "name":
        return "dialect" in ast.unparse(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("get_backend_name", "get_dialect")
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_dialect_name(item) for item in node.elts)
    return False


def branches_on_dialect(tree: ast.AST) -> list[int]:
    """Lines that compare against a database's name (==, !=, in, match)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_is_dialect_name(part) for part in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.match_case) and _is_dialect_name(getattr(node.pattern, "value", ast.Pass())):
            lines.append(node.pattern.lineno)
    return lines


def test_only_the_dialect_modules_branch_on_the_database() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sources()
        if DIALECTS not in path.parents and (lines := branches_on_dialect(ast.parse(path.read_text())))
    }
    assert found == {}, "move these differences into shared/store/dialects/"


def test_the_branch_finder_finds_branches() -> None:
    """The check above would be worthless if it could not see one."""
    samples = [
        "if db.dialect.name == 'sqlite': pass",
        "x = url.get_backend_name() in ('postgresql', 'mssql')",
        "match kind:\n    case 'mssql': pass",
    ]
    assert [bool(branches_on_dialect(ast.parse(sample))) for sample in samples] == [True, True, True]
    assert branches_on_dialect(ast.parse("names = ('sqlite', 'postgresql')")) == []


WRITES = {"update", "insert", "delete"}
# Who may build a write of jobsup_job: the transitions' statements, each dialect's claim, and
# retention's deletes.
JOB_WRITERS = {
    "shared/store/statements.py",
    "shared/store/step_statements.py",
    "shared/store/insert.py",
    "shared/store/retention.py",
}


def writes_job_table(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in WRITES and node.args and _is_job(node.args[0]):
            lines.append(node.lineno)  # update(job), insert(job), delete(job)
        elif isinstance(func, ast.Attribute) and func.attr in WRITES and _is_job(func.value):
            lines.append(node.lineno)  # job.insert(), job.update()
    return lines


def _is_job(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "job"


def test_only_the_store_statements_write_job_rows() -> None:
    found = {
        name: lines
        for path in sources()
        if (name := str(path.relative_to(ROOT))) not in JOB_WRITERS
        and DIALECTS not in path.parents
        and (lines := writes_job_table(ast.parse(path.read_text())))
    }
    assert found == {}, "job rows change only through jobsup.store.transitions"
    samples = ["update(job).values(status='x')", "job.insert()", "delete(job).where(x)"]
    assert all(writes_job_table(ast.parse(sample)) for sample in samples)


@pytest.mark.parametrize("path", sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_grows_past_400_lines(path: Path) -> None:
    # One concept per module: a class cut in two (or into mixins) to fit is not a split.
    assert len(path.read_text().splitlines()) <= 400, "split it by concept before adding more"


# The store and the events import each other (a change publishes its event; publishing writes
# the store's outbox): each must import first, before the package's own __init__ has loaded
# the rest, or a reordered import elsewhere breaks `import jobsup`.
FIRST = [
    "jobsup.events.publishing",
    "jobsup.events.hooks",
    "jobsup.store",
    "jobsup.store.chain",
    "jobsup.store.statements",
    "jobsup.store.step_statements",
    "jobsup.store.breakers",
    "jobsup.store.pauses",
    "jobsup.store.sla",
    "jobsup.store.workflows",
    "jobsup.store.batches",
    "jobsup.store.triggers",
    "jobsup.store.steps",
    "jobsup.store.transitions",
    "jobsup.store.store",
]
_IMPORT_FIRST = """
import importlib, importlib.util, sys, types
locations = list(importlib.util.find_spec("jobsup").submodule_search_locations)
failed = []
for name in sys.argv[1:]:
    for key in [k for k in sys.modules if k == "jobsup" or k.startswith("jobsup.")]:
        del sys.modules[key]
    bare = types.ModuleType("jobsup")  # the package without its __init__, which imports much
    bare.__path__ = locations
    sys.modules["jobsup"] = bare
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_the_store_and_the_events_each_import_first() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _IMPORT_FIRST, *FIRST], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_store_package_imports_none_of_its_modules() -> None:
    """Importing one store module (here the rows' dataclasses, under the bare package as
    above) must not load every table and the transitions, as a package __init__ that built
    `Store` did: that is what closed the store's import cycles."""
    import subprocess
    import sys

    code = _IMPORT_FIRST.replace('print("\\n".join(failed))', "print(sorted(sys.modules))")
    done = subprocess.run(
        [sys.executable, "-c", code, "jobsup.store.rows"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "jobsup.store.rows" in done.stdout and "jobsup.store.transitions" not in done.stdout
