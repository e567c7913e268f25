"""
The "Test your DAGs" page (docs/provider/testing.rst) runs as written: its DAG and test files, copied into
a folder outside the repository as a user's repository holds them, pass under pytest, with the installed
provider and with the provider's built wheel in a virtualenv of its own. And the plugin leaves a pytest
session that does not use it alone: no fixture of its own set up, neither Airflow nor the emulator imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import load_ci_script, run_pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "provider" / "testing.rst"
FILE_BLOCK = re.compile(r"^\.\. code-block:: python\n    :caption: (\S+\.py)\n\n((?:    .*\n|\n)+)", re.M)
PACKAGE = "airflow-provider-workflowsvc"


def page_files() -> dict[str, str]:
    """Return each file the page shows (its caption is its path in the user's repository): its code."""
    return {path: textwrap.dedent(code) for path, code in FILE_BLOCK.findall(PAGE.read_text())}


def user_repository(root: Path) -> Path:
    """Write the page's files into ``root``, as a repository of DAGs and their tests."""
    for path, code in page_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code)
    return root


def test_the_page_shows_a_dag_its_four_tests_and_an_event_driven_dag_with_its_test() -> None:
    files = page_files()
    assert set(files) == {
        "dags/ingest_reports.py",
        "tests/test_ingest_reports.py",
        "dags/report_nightly_jobs.py",
        "tests/test_report_nightly_jobs.py",
    }
    assert len(re.findall(r"^def test_", files["tests/test_ingest_reports.py"], re.M)) == 4
    for path, code in files.items():
        compile(code, path, "exec")


@pytest.mark.compat  # the page's tests pass on every Airflow of the matrix
@pytest.mark.timeout(600)
def test_the_pages_test_files_pass_as_written(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if any(item.name == WITH_THE_BUILT_WHEEL for item in request.session.items):  # CI: the newest leg
        pytest.skip(f"the same files run in this session with the built wheel, in {WITH_THE_BUILT_WHEEL}")
    repository = user_repository(tmp_path)
    result = run_pytest(sys.executable, repository, "tests")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "5 passed" in result.stdout, result.stdout[-3000:]


def uv(*args: str) -> list[str]:
    return [sys.executable, "-m", "uv", *args]


release = load_ci_script("release")


@pytest.fixture(scope="module")
def release_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's sdist, wheel and SBOM: those ``./dev`` built and checked once (``WORKFLOWSVC_DIST``),
    else built and checked here as ``./dev package`` does."""
    if os.environ.get("WORKFLOWSVC_DIST"):
        return Path(os.environ["WORKFLOWSVC_DIST"])
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(uv("build", "--out-dir", str(dist), str(REPO)), check=True, capture_output=True)
    subprocess.run([sys.executable, str(REPO / "ci" / "release.py"), "sbom", str(dist)], check=True)
    return dist


def installed_by_name_venv(dist: Path, root: Path) -> Path:
    """
    Publish the release's sdist and wheel on a package index on loopback, then install the provider BY
    NAME from it, with its ``emulator`` extra and pytest, into a new virtualenv, as the README tells
    users: everything else from the package index as usual, pinned to this virtualenv's versions (uv
    resolves from its cache). The index's log proves the wheel came from it.
    """
    wheel = release.wheel_of(dist)
    frozen = subprocess.run(
        uv("pip", "freeze", "--python", sys.executable, "--exclude-editable"),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    pins = [line for line in frozen.splitlines() if not line.lower().startswith(PACKAGE)]
    (root / "constraints.txt").parent.mkdir(parents=True, exist_ok=True)
    (root / "constraints.txt").write_text("\n".join(pins) + "\n")
    venv = root / "venv"
    with release.loopback_index([wheel, *dist.glob("*.tar.gz")], root / "index") as (index, log):
        subprocess.run(uv("venv", "--python", sys.executable, str(venv)), check=True, capture_output=True)
        install = uv(
            "pip", "install", "--python", str(venv / "bin" / "python"), f"{PACKAGE}[emulator]", "pytest",
            "--extra-index-url", index, "--constraint", str(root / "constraints.txt"),
        )  # fmt: skip
        subprocess.run(install, check=True, capture_output=True)
        served = log.read_text()
    assert f'"GET /packages/{wheel.name} HTTP/1.1" 200' in served, served[-3000:]
    return venv


EXAMPLE_DAG_TEST = """
from pathlib import Path


def test_the_example_dag_runs_against_the_emulator(workflowsvc_connection, workflowsvc_run_dag, tmp_path):
    result = workflowsvc_run_dag(Path({dag!r}), run_conf={{"output_dir": str(tmp_path)}})
    assert result.succeeded, result.errors
    summary = result.xcom("summarize")
    assert summary["status"] == "completed", summary
    assert len(summary["output_paths"]) == 4, summary  # five samples, one empty on purpose
"""


WITH_THE_BUILT_WHEEL = "test_the_release_installs_by_name_and_runs_the_example_dag_and_the_pages_tests"


@pytest.mark.e2e  # a package index on loopback and a virtualenv (uv, from its cache): the newest leg runs it
@pytest.mark.timeout(600)
def test_the_release_installs_by_name_and_runs_the_example_dag_and_the_pages_tests(
    tmp_path: Path, release_dist: Path
) -> None:
    """The release dry run (``./dev release --dry-run``): the provider installed by name from a package
    index runs the example DAG and the test page's files, from a folder outside the repository."""
    venv = installed_by_name_venv(release_dist, tmp_path / "build")
    python = venv / "bin" / "python"
    version, source, plugin = subprocess.run(
        [str(python), "-c", INSTALLED_FROM], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert version == release.wheel_of(release_dist).name.split("-")[1]
    assert source == "index"  # not a file or URL install (those write direct_url.json)
    assert Path(plugin).is_relative_to(venv), plugin  # the installed plugin, not this checkout's
    repository = user_repository(tmp_path / "my-dags")
    example = REPO / "example_dags" / "example_local_files.py"
    (repository / "tests" / "test_example_dag.py").write_text(EXAMPLE_DAG_TEST.format(dag=str(example)))
    result = run_pytest(python, repository, "tests", "--durations=0")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "6 passed" in result.stdout, result.stdout[-3000:]


INSTALLED_FROM = """
import importlib.metadata
import airflow_provider_workflowsvc.testing.plugin as plugin
dist = importlib.metadata.distribution("airflow-provider-workflowsvc")
print(dist.version, "file" if dist.read_text("direct_url.json") else "index", plugin.__file__)
"""


@pytest.mark.e2e  # beside the dry run: the newest leg, whose virtualenv has ./dev's uv
def test_the_sbom_lists_each_runtime_requirement_of_the_wheel_with_a_version(release_dist: Path) -> None:
    wheel = release.wheel_of(release_dist)
    (sbom,) = release_dist.glob(f"*{release.SBOM_SUFFIX}")
    components = {
        release.canonical(c["name"]): c.get("version") for c in json.loads(sbom.read_text())["components"]
    }
    required = release.runtime_requirements(release.wheel_metadata(wheel))
    assert set(required) == {"apache-airflow", "httpx", "httpcore", "pydantic"}
    assert all(components.get(name) for name in required), {n: components.get(n) for n in required}
    assert len(components) > 100  # and what they require: Airflow alone brings a hundred


UNRELATED_TEST = """
import sys

def test_unrelated(request):
    heavy = sorted(
        m for m in sys.modules
        if m.split(".")[0] in ("airflow", "fastapi", "uvicorn", "sqlalchemy", "pydantic")
        or m.startswith(("airflow_provider_workflowsvc.emulator", "airflow_provider_workflowsvc.hooks"))
    )
    print("PLUGIN", request.config.pluginmanager.hasplugin("workflowsvc"), "HEAVY", heavy)
"""


@pytest.mark.compat  # the plugin loads in every session of every Airflow the provider installs with
def test_a_session_that_does_not_use_the_plugin_pays_nothing_for_it(tmp_path: Path) -> None:
    (tmp_path / "test_unrelated.py").write_text(UNRELATED_TEST)
    with_plugin = run_pytest(sys.executable, tmp_path, "-s", "--setup-show")
    without = run_pytest(sys.executable, tmp_path, "-s", "-p", "no:workflowsvc")
    assert with_plugin.returncode == without.returncode == 0, with_plugin.stdout + without.stdout
    assert "PLUGIN True HEAVY []" in with_plugin.stdout, with_plugin.stdout
    assert "PLUGIN False HEAVY []" in without.stdout, without.stdout
    assert "workflowsvc" not in with_plugin.stdout.split("PLUGIN")[0]  # no fixture of the kit set up


BROKEN_AIRFLOW_TESTS = """
def test_unrelated():
    pass


def test_a_dag_run(workflowsvc_run_dag):
    pass
"""


@pytest.mark.compat
def test_an_airflow_that_cannot_start_fails_only_the_tests_that_use_the_kit(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    home.mkdir()
    secret = "postgresql://airflow:pw-kit-5d1e@db/airflow"  # a line the parser may quote
    (home / "airflow.cfg").write_text(f"sql_alchemy_conn = {secret}\n")  # no [section]: broken
    (tmp_path / "test_broken.py").write_text(BROKEN_AIRFLOW_TESTS)
    unrelated = run_pytest(sys.executable, tmp_path, "-k", "unrelated", env_extra={"AIRFLOW_HOME": str(home)})
    both = run_pytest(sys.executable, tmp_path, "-rE", env_extra={"AIRFLOW_HOME": str(home)})
    assert unrelated.returncode == 0, (
        f"the plugin broke a session that uses none of its fixtures: {unrelated.stdout}"
    )
    assert re.search(r"\b1 passed\b.*\b1 error\b", both.stdout), both.stdout[-4000:]
    assert "workflowsvc_run_dag (the Workflow Service test kit) needs Airflow 3" in both.stdout, both.stdout
    assert "-p no:workflowsvc" in both.stdout, "the error says how to turn the kit off"
    assert "pw-kit-5d1e" not in both.stdout, "the error quotes no line of the configuration"
