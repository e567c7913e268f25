"""The package root: every public name importable from it, lazily (DAG parsing pays nothing for it)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_workflowsvc as root
from airflow_provider_workflowsvc._compat import BaseHook

PACKAGE = "airflow_provider_workflowsvc"
# What importing the package root must not import: the HTTP and model stack, and every provider module.
HEAVY = ("httpx", "pydantic", "tenacity")


def public_modules() -> list[str]:
    """
    Return the provider's public modules (no ``_private`` part; the emulator and the test kit are tools
    of their own, for tests: their names are not the provider's).
    """
    names = []
    for info in pkgutil.walk_packages(root.__path__, f"{PACKAGE}."):
        parts = info.name.split(".")[1:]
        if parts[0] not in ("emulator", "testing") and not any(part.startswith("_") for part in parts):
            names.append(info.name)
    return names


def public_api_classes() -> dict[str, str]:
    """Return every public operator, link, sensor, trigger, hook and exception class: name -> module."""
    from airflow.sdk import BaseOperator, BaseOperatorLink
    from airflow.triggers.base import BaseTrigger

    bases = (BaseOperator, BaseOperatorLink, BaseTrigger, BaseHook, BaseException)
    found = {}
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            public = inspect.isclass(value) and value.__module__ == module_name and not name.startswith("_")
            if public and issubclass(value, bases):
                found[name] = module_name
    return found


def modules_loaded_by(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """Return the modules starting with one of ``prefixes`` that ``statement`` loads in a new interpreter."""
    code = (
        f"import json, sys; {statement}; "
        f"print('MODULES', json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    [line] = [line for line in out.splitlines() if line.startswith("MODULES ")]
    return list(json.loads(line.removeprefix("MODULES ")))


def test_importing_the_root_imports_no_provider_module_nor_http_or_models() -> None:
    loaded = modules_loaded_by(f"import {PACKAGE}", (f"{PACKAGE}.", *HEAVY))
    assert loaded == [], f"in {PACKAGE}/__init__.py import these under TYPE_CHECKING or lazily: {loaded}"


def test_a_name_from_the_root_imports_only_its_own_module() -> None:
    loaded = modules_loaded_by(f"from {PACKAGE} import WorkflowServiceError", (f"{PACKAGE}.",))
    assert f"{PACKAGE}.exceptions" in loaded
    assert [m for m in loaded if m.startswith((f"{PACKAGE}.hooks", f"{PACKAGE}.operators"))] == []


@pytest.mark.parametrize("name", sorted(set(root.__all__) - {"__version__"}))
def test_every_exported_name_is_the_object_of_its_module(name: str) -> None:
    module = importlib.import_module(f"{PACKAGE}.{root._EXPORTS[name]}")
    assert getattr(root, name) is getattr(module, name)


def test_star_import_gives_every_exported_name() -> None:
    namespace: dict[str, object] = {}
    exec(f"from {PACKAGE} import *", namespace)
    assert set(root.__all__) <= set(namespace)


def test_every_public_operator_sensor_trigger_hook_and_exception_is_exported() -> None:
    expected = {name: module.removeprefix(f"{PACKAGE}.") for name, module in public_api_classes().items()}
    unexported = {name: module for name, module in expected.items() if root._EXPORTS.get(name) != module}
    assert not unexported, (
        f"export each from the package root ({PACKAGE}/__init__.py): an import under TYPE_CHECKING "
        f"(`Name as Name`) and an entry of _EXPORTS (name: module): {unexported}"
    )
    assert "RunWorkflowOperator" in expected  # the scan itself finds the classes
    assert "WorkflowServiceHook" in expected


def type_checking_imports() -> dict[str, str]:
    """Return the names the package root imports under ``TYPE_CHECKING`` (what type checkers read): module."""
    tree = ast.parse(Path(root.__file__).read_text(encoding="utf-8"))
    [block] = [node for node in tree.body if isinstance(node, ast.If)]
    imports = [node for node in block.body if isinstance(node, ast.ImportFrom) and node.module]
    unexported = [alias.name for node in imports for alias in node.names if alias.asname != alias.name]
    assert not unexported, f"import each as `Name as Name` (re-exported for type checkers): {unexported}"
    return {alias.name: node.module.removeprefix(f"{PACKAGE}.") for node in imports for alias in node.names}


def test_the_lazy_table_names_what_type_checkers_read() -> None:
    imported, exported = type_checking_imports(), root._EXPORTS
    where = f"{PACKAGE}/__init__.py"
    missing = {name: module for name, module in imported.items() if exported.get(name) != module}
    extra = sorted(set(exported) - set(imported))
    assert not missing, f"add to _EXPORTS in {where} (name: module under the package): {missing}"
    assert not extra, f"import these under TYPE_CHECKING in {where} (`Name as Name`), or drop them: {extra}"
    assert root.__all__ == sorted([*exported, "__version__"])


def test_dir_lists_the_lazy_names_and_unknown_names_fail_clearly() -> None:
    assert set(root.__all__) <= set(dir(root))
    with pytest.raises(AttributeError, match="has no attribute 'RunWorkflowOperatr'"):
        _ = root.RunWorkflowOperatr  # type: ignore[attr-defined]
