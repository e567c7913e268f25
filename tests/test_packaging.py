"""Publishing: one version source, dev tools outside the published extras, the dist contents check."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import metadata, version
from pathlib import Path

import pytest
from helpers import load_ci_script

import airflow_provider_workflowsvc

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEV_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "respx", "ruff", "mypy", "unstructured-client")


check_dist = load_ci_script("check_dist")


def requirement_name(requirement: str) -> str:
    for separator in ("[", "=", ">", "<", "~", "!", ";", " "):
        requirement = requirement.split(separator)[0]
    return requirement.strip().lower()


def test_the_version_is_written_once_and_read_by_the_metadata() -> None:
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "airflow_provider_workflowsvc/__init__.py"
    assert version("airflow-provider-workflowsvc") == airflow_provider_workflowsvc.__version__


def test_published_extras_hold_no_developer_tool() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "emulator" in extras
    assert not {"test", "dev", "bench"} & set(extras)
    published = {requirement_name(r) for reqs in extras.values() for r in reqs}
    published |= {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert published.isdisjoint({*DEV_TOOLS, "build", "twine"})
    dev_group = {requirement_name(r) for r in PYPROJECT["dependency-groups"]["dev"]}
    assert {*DEV_TOOLS, "build", "twine"} <= dev_group


def test_installed_metadata_has_license_classifiers_and_python_versions() -> None:
    fields = metadata("airflow-provider-workflowsvc")
    assert fields["License-Expression"] == "Apache-2.0"
    classifiers = fields.get_all("Classifier") or []
    assert "Framework :: Apache Airflow :: Provider" in classifiers
    assert "Typing :: Typed" in classifiers
    assert [c for c in classifiers if c.startswith("Programming Language :: Python :: 3.")] == [
        f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)
    ]
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]


# A wheel as `python -m build` writes it, reduced to what the check reads.
DIST_INFO = "airflow_provider_workflowsvc-1.2.3.dist-info"
GOOD_WHEEL = {
    "airflow_provider_workflowsvc/__init__.py": '"""Doc."""\n\n__version__ = "1.2.3"\n',
    "airflow_provider_workflowsvc/py.typed": "",
    "airflow_provider_workflowsvc/connectors.json": "{}",
    "airflow_provider_workflowsvc/operators/jobs.py": "",
    f"{DIST_INFO}/METADATA": "Metadata-Version: 2.4\nName: x\nVersion: 1.2.3\n"
    "License-Expression: Apache-2.0\nLicense-File: LICENSE\n\n",
    f"{DIST_INFO}/entry_points.txt": "[apache_airflow_provider]\n"
    "provider_info = airflow_provider_workflowsvc.get_provider_info:get_provider_info\n\n"
    "[console_scripts]\nworkflowsvc-emulator = airflow_provider_workflowsvc.emulator.__main__:main\n",
    f"{DIST_INFO}/licenses/LICENSE": "Apache License\n",
    f"{DIST_INFO}/RECORD": "",
}


def write_wheel(path: Path, members: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in members.items():
            wheel.writestr(name, text)
    return str(path)


def test_a_complete_wheel_passes(tmp_path: Path) -> None:
    assert check_dist.check_wheel(write_wheel(tmp_path / "good.whl", GOOD_WHEEL)) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"airflow_provider_workflowsvc/py.typed": None}, "missing airflow_provider_workflowsvc/py.typed"),
        (
            {"airflow_provider_workflowsvc/connectors.json": None},
            "missing airflow_provider_workflowsvc/connectors.json",
        ),
        ({f"{DIST_INFO}/licenses/LICENSE": None}, f"missing {DIST_INFO}/licenses/LICENSE"),
        ({"tests/test_hook.py": ""}, "unexpected top-level entries: tests"),
        ({"benchmarks/bench_import.py": ""}, "unexpected top-level entries: benchmarks"),
        ({"airflow_provider_workflowsvc/__pycache__/x.pyc": ""}, "compiled files"),
        (
            {f"{DIST_INFO}/entry_points.txt": "[console_scripts]\n"},
            "the apache_airflow_provider entry point is not provider_info",
        ),
        (
            {"airflow_provider_workflowsvc/__init__.py": '__version__ = "1.2.4"\n'},
            "METADATA Version 1.2.3 is not the package's __version__ 1.2.4",
        ),
        (
            {f"{DIST_INFO}/METADATA": "Metadata-Version: 2.4\nVersion: 1.2.3\nLicense-File: LICENSE\n\n"},
            "METADATA License-Expression is None, not Apache-2.0",
        ),
    ],
    ids=[
        "py.typed",
        "connector table",
        "license",
        "tests",
        "benchmarks",
        "caches",
        "entry point",
        "version",
        "license expression",
    ],
)
def test_each_defect_of_a_wheel_is_named(tmp_path: Path, change: dict[str, str | None], problem: str) -> None:
    members = {**GOOD_WHEEL, **change}
    kept = {name: text for name, text in members.items() if text is not None}
    problems = check_dist.check_wheel(write_wheel(tmp_path / "bad.whl", kept))
    assert [p for p in problems if p.startswith(problem)] != [], problems


def write_sdist(path: Path, names: list[str]) -> str:
    with tarfile.open(path, "w:gz") as sdist:
        for name in names:
            info = tarfile.TarInfo(name)
            sdist.addfile(info, io.BytesIO(b""))
    return str(path)


def test_the_sdist_must_carry_license_changelog_and_package_data(tmp_path: Path) -> None:
    base = "airflow_provider_workflowsvc-1.2.3"
    data = ["airflow_provider_workflowsvc/py.typed", "airflow_provider_workflowsvc/connectors.json"]
    names = ["LICENSE", "CHANGELOG.md", "PKG-INFO", "pyproject.toml", *data]
    complete = [f"{base}/{name}" for name in names]
    assert check_dist.check_sdist(write_sdist(tmp_path / "good.tar.gz", complete)) == []
    missing = check_dist.check_sdist(write_sdist(tmp_path / "bad.tar.gz", complete[1:-1]))
    assert missing == [f"missing {base}/LICENSE", f"missing {base}/{data[1]}"]


def test_main_reports_every_problem_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = write_wheel(tmp_path / "w.whl", {**GOOD_WHEEL, "tests/x.py": ""})
    assert check_dist.main([wheel]) == 1
    assert capsys.readouterr().err == "w.whl: unexpected top-level entries: tests\n"
    assert check_dist.main([write_wheel(tmp_path / "ok.whl", GOOD_WHEEL)]) == 0


# --------------------------------------------------------------------------------------------------
# ci/release.py: the release tag, the SBOM's check (the real SBOM: tests/test_testing_docs.py)


release = load_ci_script("release")


def test_a_release_tag_must_be_v_and_the_packages_version() -> None:
    assert release.tag_problem("v1.2.3", "1.2.3") is None
    for tag in ("1.2.3", "v1.2.4", "v1.2.3rc1", "refs/tags/v1.2.3"):
        assert release.tag_problem(tag, "1.2.3") == (
            f"the tag {tag!r} is not the package's version: tag v1.2.3, or change __version__"
        )
    ok = subprocess.run(
        [
            sys.executable,
            str(ROOT / "ci" / "release.py"),
            "tag",
            f"v{airflow_provider_workflowsvc.__version__}",
        ],
        capture_output=True,
        text=True,
    )
    wrong = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "release.py"), "tag", "v0.0.0"], capture_output=True
    )
    assert (ok.returncode, wrong.returncode) == (0, 1), ok.stderr


METADATA_REQUIRES = """Metadata-Version: 2.4
Name: airflow-provider-workflowsvc
Requires-Dist: apache-airflow>=3.0
Requires-Dist: httpx>=0.27
Requires-Dist: Typing_Extensions>=4; python_version < "3.11"
Requires-Dist: fastapi>=0.110; extra == "emulator"
Requires-Dist: apache-airflow-providers-openlineage>=2.3.0; extra == 'openlineage'
"""


def test_the_runtime_requirements_are_the_requires_dist_outside_every_extra() -> None:
    assert release.runtime_requirements(METADATA_REQUIRES) == ["apache-airflow", "httpx", "typing-extensions"]


def test_the_sbom_check_names_each_dependency_missing_or_of_another_version() -> None:
    sbom = {
        "components": [{"name": "apache_airflow", "version": "3.3.2"}, {"name": "httpx", "version": "0.27"}]
    }
    installed = {"apache-airflow": "3.3.2", "httpx": "0.28.1", "anyio": "4.9.0"}
    assert release.sbom_problems(sbom, ["apache-airflow", "httpx"], installed) == [
        "anyio 4.9.0 is not a component",
        "httpx is listed as 0.27, installed as 0.28.1",
    ]
    assert release.sbom_problems(sbom, ["tenacity"], {"apache-airflow": "3.3.2"}) == [
        "the runtime requirement tenacity was not installed with the wheel"
    ]
    complete = {"components": [{"name": n, "version": v} for n, v in installed.items()]}
    assert release.sbom_problems(complete, ["apache-airflow", "httpx"], installed) == []
