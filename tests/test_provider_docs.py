"""The provider docs (docs/provider/) cannot rot: included examples, documented classes and fields."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from airflow.sdk import DAG, BaseOperator, BaseOperatorLink, task
from airflow.triggers.base import BaseTrigger

import airflow_provider_workflowsvc as root
from airflow_provider_workflowsvc._compat import BaseHook
from airflow_provider_workflowsvc.get_provider_info import get_provider_info

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "provider"
EXAMPLE_DAGS = REPO / "example_dags"
OPERATOR_PAGES = sorted((DOCS / "operators").glob("*.rst"))
"""The operators' pages, one per operator or family (operators.rst is their table of contents)."""
CONNECTION_PAGE = DOCS / "connections" / "workflowsvc.rst"
INCLUDE = re.compile(
    r"^\.\. literalinclude:: (?P<path>\S+)\n(?P<options>(?:    :[\w-]+:.*\n)+)", re.MULTILINE
)
MARKER = re.compile(r"# \[(START|END) (\w+)\]")
CODE_BLOCK = re.compile(r"^\.\. code-block:: python\n\n((?:    .*\n|\n)+)", re.MULTILINE)


def includes() -> list[tuple[Path, Path, dict[str, str]]]:
    """Return every ``literalinclude`` of the docs: the page, the file it names and its options."""
    found = []
    for page in sorted(DOCS.rglob("*.rst")):
        for match in INCLUDE.finditer(page.read_text()):
            options = dict(re.findall(r"    :([\w-]+):\s*(.*)", match.group("options")))
            found.append((page, (page.parent / match.group("path")).resolve(), options))
    return found


def test_the_docs_include_example_code() -> None:
    assert len(includes()) >= 9
    assert {path.name for _, path, _ in includes()} == {p.name for p in EXAMPLE_DAGS.glob("example_*.py")}


@pytest.mark.parametrize(
    ("page", "path", "options"), includes(), ids=[o.get("start-after", "?") for _, _, o in includes()]
)
def test_each_included_marker_exists_once_in_its_example(
    page: Path, path: Path, options: dict[str, str]
) -> None:
    assert path.is_file(), f"{page.name} includes {path}, which does not exist"
    start, end = options["start-after"], options["end-before"]
    name = start.removeprefix("[START ").removesuffix("]")
    assert (start, end) == (f"[START {name}]", f"[END {name}]")
    text = path.read_text()
    assert text.count(f"# {start}\n") == 1, f"{path.name}: {start} must occur exactly once"
    assert text.count(f"# {end}\n") == 1, f"{path.name}: {end} must occur exactly once"
    block = text.split(f"# {start}\n")[1].split(f"# {end}\n")[0]
    assert block.strip(), f"{path.name}: {name} includes nothing"
    compile(textwrap.dedent(block).replace("# [", "#["), f"{path.name}:{name}", "exec")


def test_every_marker_of_the_examples_is_included_by_the_docs() -> None:
    included = {(path.name, o["start-after"][len("[START ") : -1]) for _, path, o in includes()}
    in_examples = {
        (path.name, name)
        for path in EXAMPLE_DAGS.glob("example_*.py")
        for kind, name in MARKER.findall(path.read_text())
        if kind == "START"
    }
    assert in_examples == included


def documented_kind(value: object) -> str | None:
    if not isinstance(value, type):
        return None
    if issubclass(value, BaseOperator):
        return "sensor" if "sensors" in value.__module__ else "operator"
    if issubclass(value, BaseOperatorLink):
        return "operator"
    if issubclass(value, BaseTrigger):
        return "trigger"
    if issubclass(value, BaseHook):
        return "hook"
    return None


PUBLIC_CLASSES = sorted(
    (name, kind) for name in root.__all__ if (kind := documented_kind(getattr(root, name))) is not None
)


@pytest.mark.parametrize(("name", "kind"), PUBLIC_CLASSES, ids=[name for name, _ in PUBLIC_CLASSES])
def test_every_operator_sensor_trigger_and_hook_is_on_an_operators_page(name: str, kind: str) -> None:
    module = getattr(root, name).__module__
    pages = [page for page in OPERATOR_PAGES if f":class:`~{module}.{name}`" in page.read_text()]
    assert pages, f"{name}: no :class: reference with its module {module}"
    if kind != "hook":  # its section on a page that names it (the page stands alone)
        assert any(f".. _howto/{kind}:{name}:" in page.read_text() for page in pages), f"{name}: no label"


def test_the_operators_page_lists_every_operator_page_and_the_routes_page_links_them() -> None:
    contents = (DOCS / "operators.rst").read_text()
    assert len(OPERATOR_PAGES) >= 8
    assert [page.stem for page in OPERATOR_PAGES if f"<operators/{page.stem}>" not in contents] == []
    routes = (DOCS / "routes.rst").read_text()
    for route in ("destination connector", "On-demand jobs with outputs", "the service schedules"):
        assert route in routes
    home = (DOCS / "index.rst").read_text()
    assert ":doc:`routes`" in home
    assert ":doc:`operators/on-demand`" in home
    assert ":doc:`operators/object-storage`" in home


def test_the_scan_finds_every_kind() -> None:
    assert {kind for _, kind in PUBLIC_CLASSES} == {"operator", "sensor", "trigger", "hook"}
    assert len([k for _, k in PUBLIC_CLASSES if k == "operator"]) >= 15


def python_snippets() -> list[str]:
    pages = [page.read_text() for page in OPERATOR_PAGES]
    return [textwrap.dedent(block) for page in pages for block in CODE_BLOCK.findall(page)]


@pytest.mark.parametrize("snippet", python_snippets(), ids=lambda s: s.split("(")[0].split()[-1])
def test_each_snippet_of_the_operators_pages_builds_its_task(snippet: str) -> None:
    namespace = {name: getattr(root, name) for name in root.__all__} | {"task": task}
    with DAG(dag_id="docs_snippet", schedule=None) as dag:
        exec(compile(snippet, "operators.rst", "exec"), namespace)
    assert len(dag.tasks) == 1, snippet


def test_the_operators_pages_have_snippets() -> None:
    assert len(python_snippets()) >= 5


def field_entries() -> dict[str, str]:
    """Return the text of each ````name```` entry of the connection page's extra fields."""
    text = CONNECTION_PAGE.read_text()
    entries = re.findall(r"^    ``(\w+)``\n((?:        .*\n)+)", text, re.MULTILINE)
    return {name: " ".join(body.split()) for name, body in entries}


def test_the_connection_page_documents_every_field_with_its_default() -> None:
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    entries = field_entries()
    assert set(fields) <= set(entries)
    for name, field in fields.items():
        default = field["schema"].get("default")
        if default is not None:
            assert f"Default ``{json.dumps(default)}``" in entries[name], name


def test_the_configuration_page_documents_every_setting_with_its_default() -> None:
    text = (DOCS / "configuration.rst").read_text()
    entries = {
        name: " ".join(body.split()) for name, body in re.findall(r"^``(\w+)``\n((?:    .*\n)+)", text, re.M)
    }
    options = get_provider_info()["config"]["workflowsvc"]["options"]
    assert set(entries) == set(options)
    for name, option in options.items():
        assert f"Default ``{option['default']}``." in entries[name], name


def test_the_connection_page_names_the_hidden_and_relabelled_fields() -> None:
    text = CONNECTION_PAGE.read_text()
    behaviour = get_provider_info()["connection-types"][0]["ui-field-behaviour"]
    for field, label in behaviour["relabeling"].items():
        assert f"{label} (``{field}``)" in text
    for hidden in behaviour["hidden-fields"]:
        assert hidden in text
    assert ".. _howto/connection:workflowsvc:" in text


def test_the_changelog_page_includes_the_changelog() -> None:
    text = (DOCS / "changelog.rst").read_text()
    [target] = re.findall(r"^\.\. include:: (\S+)", text, re.MULTILINE)
    assert (DOCS / target).resolve() == REPO / "CHANGELOG.md"


def test_the_installation_page_documents_every_published_extra() -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10: pytest brings tomli there
        import tomli as tomllib  # type: ignore[no-redef]

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = (DOCS / "installation.rst").read_text()
    for extra, requirements in extras.items():
        assert f"``{extra}``" in text, f"installation.rst: no row for the extra {extra}"
        for requirement in requirements:
            name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
            assert f"``{name}``" in text, f"installation.rst: the extra {extra} does not name {name}"


def test_the_index_links_every_page() -> None:
    text = (DOCS / "index.rst").read_text()
    guides = ("installation", "connections/workflowsvc", "configuration", "operators", "failures")
    guides += ("job_events", "try-your-own-dag", "testing")
    for page in (*guides, "api", "service-api", "changelog"):
        assert f"<{page}>" in text, page


def test_the_docs_build_without_warnings(tmp_path: Path) -> None:
    """Sphinx reads every page (includes, labels, references) and treats any warning as an error."""
    command = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-q",
        "-b",
        "html",
        str(DOCS),
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------------------------------
# The API reference (autodoc) and the links to it

API_PAGE = DOCS / "api.rst"
REFERENCE = re.compile(r":(?:class|func|exc|meth):`~?([\w.]+)`")


def documented_names() -> set[str]:
    """Every full name the API page documents (``currentmodule`` + ``autoclass``/``autofunction``)."""
    names, module = set(), ""
    for line in API_PAGE.read_text().splitlines():
        if line.startswith(".. currentmodule:: "):
            module = line.split(":: ")[1].strip()
        elif line.startswith((".. autoclass:: ", ".. autofunction:: ")):
            names.add(f"{module}.{line.split(':: ')[1].strip()}")
    return names


def test_the_api_page_documents_every_public_name() -> None:
    public = {f"{getattr(root, n).__module__}.{n}" for n in root.__all__ if n != "__version__"}
    assert documented_names() == public


def test_every_class_reference_of_the_docs_points_at_a_documented_name() -> None:
    documented = documented_names()
    for page in sorted(DOCS.rglob("*.rst")):
        for target in REFERENCE.findall(page.read_text()):
            assert target in documented, f"{page.name}: :class:`{target}` resolves to nothing"


@pytest.mark.parametrize(("name", "kind"), PUBLIC_CLASSES, ids=[name for name, _ in PUBLIC_CLASSES])
def test_every_parameter_of_a_public_class_is_documented(name: str, kind: str) -> None:
    import inspect

    cls = getattr(root, name)
    if cls.__init__ is object.__init__:
        return
    parameters = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    doc = inspect.getdoc(cls) or ""
    missing = [p for p in parameters if f":param {p}:" not in doc]
    assert not missing, f"{name}: parameters without a :param: line: {missing}"


# --------------------------------------------------------------------------------------------------
# The "try your own DAG" recipe, run as written

RECIPE_PAGE = DOCS / "try-your-own-dag.rst"


def recipe() -> tuple[str, str, list[str]]:
    """The page's DAG file (its path and code) and its shell commands, as a user copies them."""
    text = RECIPE_PAGE.read_text()
    dag_block = re.search(r"^\.\. code-block:: python\n    :caption: (\S+)\n\n((?:    .*\n|\n)+)", text, re.M)
    shell = re.search(
        r"^\.\. code-block:: console\n    :caption: the recipe\n\n((?:    .*\n|\n)+)", text, re.M
    )
    assert dag_block is not None
    assert shell is not None
    commands = [line.strip()[2:] for line in shell.group(1).splitlines() if line.strip().startswith("$ ")]
    return dag_block.group(1), textwrap.dedent(dag_block.group(2)), commands


@pytest.mark.e2e
@pytest.mark.timeout(300, method="signal")
def test_the_try_your_own_dag_recipe_runs_as_written(tmp_path: Path) -> None:
    import os
    import socket

    path, code, commands = recipe()
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(code)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    script = "\n".join(
        ["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
        + [command.replace("8765", port) for command in commands]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "Submitted job" in output, output[-6000:]
    assert "Workflow 'my-first-workflow' is" in output, output[-6000:]


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param(
            r"/work/|\.\./shared|AIRFLOW-NOTES", id="a path of one machine or outside the repository"
        ),
        pytest.param(r"(?m)^(<<<<<<<|>>>>>>>) ", id="a merge's conflict marker"),
    ],
)
def test_the_repository_points_inside_itself_only(pattern: str) -> None:
    """No file names a path of one machine or a document outside the repository, nor keeps a merge's
    conflict markers (one was found in a released changelog section)."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    found = re.compile(pattern)
    offenders = []
    for name in listed.stdout.splitlines():
        path = REPO / name
        if name == "tests/test_provider_docs.py" or path.suffix not in (".py", ".md", ".rst", ".toml", ""):
            continue
        if path.is_file() and found.search(path.read_text(errors="replace")):
            offenders.append(name)
    assert not offenders


def test_the_version_is_the_newest_release_or_a_development_version_after_it() -> None:
    """A release's commit carries the changelog's newest section's version, with nothing unreleased; a
    build between releases the next one's ``.devN``."""
    from packaging.version import Version

    text = (REPO / "CHANGELOG.md").read_text()
    unreleased = text.split("\n## Unreleased\n", 1)[1].split("\n## ", 1)[0]
    released = re.findall(r"^## (\d+\.\d+\.\d+) - ", text, re.MULTILINE)
    version = Version(root.__version__)
    if version.is_devrelease:
        assert version > Version(released[0])
    else:
        assert version == Version(released[0]), f"{version}: the changelog's newest release is {released[0]}"
        assert "\n- " not in unreleased, f"{version} is released: changes go in its section (or X.Y.Z.devN)"


def test_each_release_has_the_sections_of_the_apache_providers_changelogs() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    for section in re.split(r"^## (?=\d)", text, flags=re.MULTILINE)[1:]:
        headings = re.findall(r"^### (.+)$", section, re.MULTILINE)
        assert headings, section[:40]
        order = ["Breaking changes", "Features", "Bug fixes", "Misc"]
        assert headings == [h for h in order if h in headings], (section[:40], headings)


# --------------------------------------------------------------------------------------------------
# The README: a landing page for users, its links inside the repository, CI's command its own

README = REPO / "README.md"


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 150


def test_every_link_of_the_readme_points_at_a_file_of_the_repository() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10
    assert [link for link in local if not (REPO / link).exists()] == []


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    """``.ci/run`` execs the one ``./dev test`` the README names as what CI runs."""
    readme_commands = [
        line.split("#", 1)[0].strip() for line in README.read_text().splitlines() if "# what CI runs" in line
    ]
    ci = [
        line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("exec ")
    ]
    assert readme_commands == ["./dev test"]
    assert ci == [f"exec {readme_commands[0]}"]
