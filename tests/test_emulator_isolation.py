"""The emulator describes the service on its own: no emulator module imports the provider.

A provider model bug must not be able to hide behind an emulator that parses and answers with the same
models. Checked statically (every import statement of every emulator module) and at run time (what
importing the emulator's app, CLI and test helpers loads).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_workflowsvc.emulator as emulator_package

PACKAGE = "airflow_provider_workflowsvc"
EMULATOR = f"{PACKAGE}.emulator"
EMULATOR_DIR = Path(emulator_package.__file__).parent


def _is_emulator_or_root(module: str) -> bool:
    return module in (PACKAGE, EMULATOR) or module.startswith(EMULATOR + ".")


def provider_imports(source: str, module: str) -> list[str]:
    """The provider modules (outside the emulator) that ``source``, the text of ``module``, imports."""
    package_parts = module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package_parts[: len(package_parts) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from pkg import name`` may import the submodule ``pkg.name``
            names = [base] if base != PACKAGE else [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n.split(".")[0] == PACKAGE and not _is_emulator_or_root(n)]
    return found


def _emulator_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted(EMULATOR_DIR.rglob("*.py")):
        parts = path.relative_to(EMULATOR_DIR).with_suffix("").parts
        modules.append((".".join((EMULATOR, *parts)), path))
    return modules


def test_the_emulator_has_modules_to_check() -> None:
    names = {name for name, _ in _emulator_modules()}
    assert {f"{EMULATOR}.service", f"{EMULATOR}.schema", f"{EMULATOR}.app", f"{EMULATOR}.__main__"} <= names


@pytest.mark.parametrize(("module", "path"), _emulator_modules(), ids=lambda v: getattr(v, "name", v))
def test_no_emulator_module_imports_the_provider(module: str, path: Path) -> None:
    assert provider_imports(path.read_text(encoding="utf-8"), module) == []


@pytest.mark.parametrize(
    "statement",
    [
        "from airflow_provider_workflowsvc.models import Job",
        "import airflow_provider_workflowsvc.hooks.workflowsvc",
        "from airflow_provider_workflowsvc import models",
        "from ... import models",
        "from ...hooks import workflowsvc",
        "def f():\n    from airflow_provider_workflowsvc.models import JobStatus",
    ],
)
def test_the_static_check_sees_every_spelling_of_a_provider_import(statement: str) -> None:
    assert provider_imports(statement, f"{EMULATOR}.sub.module") != []


@pytest.mark.parametrize(
    "statement",
    [
        "from airflow_provider_workflowsvc.emulator.schema import Job",
        "from . import schema",
        "from .. import emulator",
        "from airflow_provider_workflowsvc import emulator",
        "import pydantic",
    ],
)
def test_the_static_check_allows_the_emulator_itself(statement: str) -> None:
    assert provider_imports(statement, f"{EMULATOR}.module") == []


_LOADED = """
import json, sys
import airflow_provider_workflowsvc.emulator.__main__
import airflow_provider_workflowsvc.emulator.testing
from airflow_provider_workflowsvc.emulator import create_app
create_app()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "airflow_provider_workflowsvc")))
"""


def test_importing_and_creating_the_emulator_loads_no_provider_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert f"{EMULATOR}.service" in loaded
    assert f"{EMULATOR}.schema" in loaded
    assert [m for m in loaded if not _is_emulator_or_root(m)] == []
