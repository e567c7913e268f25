"""The emulator describes the service on its own: no emulator module imports the provider.

A provider model bug must not be able to hide behind an emulator that parses and answers with the same
models. Checked statically (every import statement of every emulator module) and at run time (what
importing the emulator's app, CLI and test helpers loads).

The other way too: no provider module imports the emulator or a library of its extra (FastAPI, uvicorn,
croniter, pypdf, ...), which a plain install of the provider does not have, nor the test kit
(``testing/``), a tool for tests that uses the emulator.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_workflowsvc.emulator as emulator_package
from airflow_provider_workflowsvc.emulator.__main__ import EXTRA_MODULES

PACKAGE = "airflow_provider_workflowsvc"
EMULATOR = f"{PACKAGE}.emulator"
EMULATOR_DIR = Path(emulator_package.__file__).parent
TESTING = f"{PACKAGE}.testing"
TESTING_DIR = EMULATOR_DIR.parent / "testing"


def _is_emulator_or_root(module: str) -> bool:
    return module in (PACKAGE, EMULATOR) or module.startswith(EMULATOR + ".")


def provider_imports(source: str, module: str) -> list[str]:
    """The provider modules (outside the emulator) that ``source``, the text of ``module``, imports."""
    return [
        n
        for n in imported_names(source, module)
        if n.split(".")[0] == PACKAGE and not _is_emulator_or_root(n)
    ]


def imported_names(source: str, module: str) -> list[str]:
    """The absolute names of the modules that ``source``, the text of ``module``, imports."""
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
        found += names
    return found


def _provider_modules() -> list[tuple[str, Path]]:
    root = EMULATOR_DIR.parent
    modules = []
    for path in sorted(root.rglob("*.py")):
        if EMULATOR_DIR not in path.parents and TESTING_DIR not in path.parents:
            parts = path.relative_to(root).with_suffix("").parts
            modules.append((".".join((PACKAGE, *parts)).removesuffix(".__init__"), path))
    return modules


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


@pytest.mark.parametrize(("module", "path"), _provider_modules(), ids=lambda v: getattr(v, "name", v))
def test_no_provider_module_imports_the_emulator_or_its_extra(module: str, path: Path) -> None:
    imported = imported_names(path.read_text(encoding="utf-8"), module)
    tools = (EMULATOR, TESTING)
    assert [n for n in imported if n.split(".")[0] in EXTRA_MODULES or n.startswith(tools)] == []


def test_the_provider_modules_are_all_seen_and_the_extra_names_pypdf() -> None:
    names = {name for name, _ in _provider_modules()}
    assert {f"{PACKAGE}.hooks.workflowsvc", f"{PACKAGE}.operators.workflows", PACKAGE} <= names
    assert not [n for n in names if n.startswith((EMULATOR, TESTING))]
    assert "pypdf" in EXTRA_MODULES


_PROVIDER_LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("pypdf", "airflow_provider_workflowsvc")))))
"""


def test_importing_every_provider_module_loads_no_pypdf_nor_the_emulator() -> None:
    names = [name for name, _ in _provider_modules()]
    result = subprocess.run(
        [sys.executable, "-c", _PROVIDER_LOADED, *names],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert f"{PACKAGE}.hooks.workflowsvc" in loaded
    assert [m for m in loaded if m.startswith(("pypdf", EMULATOR))] == []
