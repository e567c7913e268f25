"""No import cycles among the package's modules (read from the source by AST, nothing imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_workflowsvc"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
TYPE_CHECKING_IMPORT = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(node: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield every import statement in ``node`` at any depth; under ``if TYPE_CHECKING:`` only if asked."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and is_type_checking_block(child) and not type_checking:
            for other in child.orelse:
                yield from import_nodes(other, type_checking)
        else:
            yield from import_nodes(child, type_checking)


def imported_modules(name: str, path: Path, modules: dict[str, Path], type_checking: bool) -> set[str]:
    """Return the package's modules that ``name`` imports (a name taken from a package is its submodule)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in import_nodes(ast.parse(path.read_text(), str(path)), type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                base + "." + alias.name if base + "." + alias.name in modules else base
                for alias in node.names
            ]
        found.update(target for target in targets if target in modules and target != name)
    return found


def import_graph(root: Path = ROOT, type_checking: bool = False) -> dict[str, set[str]]:
    """Return each module's imports of other modules of the package at ``root``."""
    modules = package_modules(root)
    return {name: imported_modules(name, path, modules, type_checking) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Return the strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_path(component: frozenset[str], graph: dict[str, set[str]]) -> list[str]:
    """Return one closed import path through ``component``, e.g. ``[a, b, a]`` (breadth-first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(component: frozenset[str], graph: dict[str, set[str]], package: str = PACKAGE) -> str:
    short = [name.removeprefix(package + ".") for name in cycle_path(component, graph)]
    return " -> ".join(short) + f"  (component: {', '.join(sorted(component))})"


def test_package_has_no_import_cycles() -> None:
    graph = import_graph()
    found = [describe(c, graph) for c in cycles(graph)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_emulator_has_no_import_cycles_even_for_type_checkers() -> None:
    """The emulator's state lives in a module that imports neither the app, the routes nor the middleware."""
    graph = import_graph(type_checking=True)
    emulator = {name: deps for name, deps in graph.items() if name.startswith(f"{PACKAGE}.emulator")}
    found = [describe(c, graph) for c in cycles(graph) if set(c) <= set(emulator)]
    assert not found, "import cycles:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"a": "import pkg.b\n", "b": "def f():\n    from pkg import a\n"}, [{"pkg.a", "pkg.b"}]),
        ({"a": "from pkg.b import x\n", "b": TYPE_CHECKING_IMPORT}, []),
        ({"a": "from . import b\n", "b": "from .a import x\n"}, [{"pkg.a", "pkg.b"}]),
        ({"a": "from pkg import b\n", "b": "x = 1\n"}, []),
    ],
    ids=["function-level import counts", "TYPE_CHECKING does not", "relative imports", "no cycle"],
)
def test_cycle_finder_on_small_packages(
    tmp_path: Path, sources: dict[str, str], expected: list[set[str]]
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in sources.items():
        (package / f"{name}.py").write_text(source)
    assert [set(c) for c in cycles(import_graph(package))] == expected


def test_type_checking_imports_count_when_asked(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text(TYPE_CHECKING_IMPORT)
    graph = import_graph(package, type_checking=True)
    [component] = cycles(graph)
    assert describe(component, graph, "pkg") == "a -> b -> a  (component: pkg.a, pkg.b)"


# --------------------------------------------------------------------------------------------------
# Arrows point one way: operators/ -> _tasks/ -> hooks/, wait/ (sensors and triggers beside operators)

SHARED_ROOM = "_tasks"
"""What operators, sensors, triggers, lineage and assets share (argument checks, the exactly-once
submit, inputs and outputs, the launch book): below all of them."""
ABOVE_THE_SHARED_ROOM = ("operators", "sensors", "triggers", "lineage", "assets", "cli", "testing")


def room(name: str, package: str = PACKAGE) -> str:
    """The first part of ``name`` below the package (``operators`` for ``pkg.operators.jobs``)."""
    return name.removeprefix(package + ".").split(".")[0] if name != package else ""


def arrows_into(
    graph: dict[str, set[str]], target: str, allowed: set[str], package: str = PACKAGE
) -> list[str]:
    """Every import of a module of room ``target`` by a module outside it and outside ``allowed`` rooms."""
    return sorted(
        f"{name.removeprefix(package + '.')} imports {dep.removeprefix(package + '.')}"
        for name, deps in graph.items()
        for dep in deps
        if room(dep, package) == target and room(name, package) not in {target, *allowed}
    )


def test_nothing_below_the_operators_imports_them() -> None:
    # Only the package root (its lazy exports of the public names) may import operators/.
    found = arrows_into(import_graph(type_checking=True), "operators", {""})
    assert not found, (
        "imports pointing back up into operators/ (only the package root may import them):\n  "
        + "\n  ".join(found)
        + f"\nWhat to do: move what both sides need into {SHARED_ROOM}/ (the room below operators, "
        f"sensors and triggers) and import it from there."
    )


def test_the_shared_room_imports_nothing_above_it() -> None:
    graph = import_graph(type_checking=True)
    found = sorted(
        f"{name.removeprefix(PACKAGE + '.')} imports {dep.removeprefix(PACKAGE + '.')}"
        for name, deps in graph.items()
        if room(name) == SHARED_ROOM
        for dep in deps
        if room(dep) in ABOVE_THE_SHARED_ROOM
    )
    assert not found, (
        f"{SHARED_ROOM}/ imports rooms above it:\n  "
        + "\n  ".join(found)
        + f"\nWhat to do: {SHARED_ROOM}/ holds only what those rooms share; move the code that needs "
        "them up into the room that uses it, or pass what it needs in as an argument."
    )


def test_an_arrow_back_up_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "operators").mkdir(parents=True)
    (package / "triggers").mkdir()
    for init in (package, package / "operators", package / "triggers"):
        (init / "__init__.py").write_text("")
    (package / "operators" / "jobs.py").write_text("X = 1\n")
    (package / "triggers" / "job.py").write_text("def f():\n    from pkg.operators.jobs import X\n")
    graph = import_graph(package)
    assert arrows_into(graph, "operators", {""}, "pkg") == ["triggers.job imports operators.jobs"]
