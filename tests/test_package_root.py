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
    assert modules_loaded_by(f"import {PACKAGE}", (f"{PACKAGE}.", *HEAVY)) == []


def test_a_name_from_the_root_imports_only_its_own_module() -> None:
    loaded = modules_loaded_by(f"from {PACKAGE} import WorkflowServiceError", (f"{PACKAGE}.",))
    assert f"{PACKAGE}.exceptions" in loaded
    assert [m for m in loaded if m.startswith((f"{PACKAGE}.hooks", f"{PACKAGE}.operators"))] == []


@pytest.mark.parametrize("name", sorted(set(root.__all__) - {"__version__"}))
def test_every_exported_name_is_the_object_of_its_module(name: str) -> None:
    module = importlib.import_module(f"{PACKAGE}.{root._exports()[name]}")
    assert getattr(root, name) is getattr(module, name)


def test_star_import_gives_every_exported_name() -> None:
    namespace: dict[str, object] = {}
    exec(f"from {PACKAGE} import *", namespace)
    assert set(root.__all__) <= set(namespace)


def test_every_public_operator_sensor_trigger_hook_and_exception_is_exported() -> None:
    expected = {name: module.removeprefix(f"{PACKAGE}.") for name, module in public_api_classes().items()}
    assert {name: root._exports().get(name) for name in expected} == expected
    assert "RunWorkflowOperator" in expected  # the scan itself finds the classes
    assert "WorkflowServiceHook" in expected


def test_the_names_are_listed_once_in_the_imports_type_checkers_read() -> None:
    """``__all__`` and the lazy table come from the TYPE_CHECKING imports (``Name as Name``: re-exported
    for type checkers), the one list."""
    tree = ast.parse(Path(root.__file__).read_text())
    [block] = [node for node in tree.body if isinstance(node, ast.If)]
    imported = [alias for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names]
    assert all(alias.asname == alias.name for alias in imported)
    assert sorted(root.__all__) == sorted([*root._exports(), "__version__"]) == root.__all__
    assert len(imported) == len(root._exports())


def test_dir_lists_the_lazy_names_and_unknown_names_fail_clearly() -> None:
    assert set(root.__all__) <= set(dir(root))
    with pytest.raises(AttributeError, match="has no attribute 'RunWorkflowOperatr'"):
        _ = root.RunWorkflowOperatr  # type: ignore[attr-defined]


def test_the_names_resolve_under_a_loader_that_cannot_give_the_source() -> None:
    # pytest loads this distribution's modules through its assertion rewriter (the test kit's plugin is
    # a pytest11 entry point of the provider), a loader without ``get_source``: a user's test that imports
    # a name from the root must still get it.
    namespace = {"__name__": root.__name__, "__file__": root.__file__, "__loader__": object()}
    exec(compile(Path(root.__file__).read_text(encoding="utf-8"), root.__file__, "exec"), namespace)
    assert namespace["__getattr__"]("WorkflowServiceHook") is root.WorkflowServiceHook
    assert "RunWorkflowOperator" in namespace["__getattr__"]("__all__")
