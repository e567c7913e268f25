"""How the provider is installed: the code under test is the installed one; the docs show the CI pins."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from helpers import load_ci_script

import airflow_provider_workflowsvc

pytestmark = pytest.mark.compat  # every leg of the matrix proves it tests the wheel it installed

REPO = Path(__file__).resolve().parents[1]
INSTALL = os.environ.get("WORKFLOWSVC_PROVIDER_INSTALL")
"""How ``./dev`` installed the provider for this session: ``wheel`` (the matrix legs) or ``editable``."""


airflow_pins = load_ci_script("airflow_pins")


def installed_as() -> tuple[str, Path]:
    """How the distribution is installed (``wheel`` or ``editable``) and where its package should be."""
    dist = distribution("airflow-provider-workflowsvc")
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct_url.get("dir_info", {}).get("editable"):
        return "editable", REPO / "airflow_provider_workflowsvc" / "__init__.py"
    return "wheel", Path(str(dist.locate_file("airflow_provider_workflowsvc/__init__.py")))


def test_the_code_under_test_is_the_installed_provider() -> None:
    """In the matrix legs (``WORKFLOWSVC_PROVIDER_INSTALL=wheel``) the tests run the built wheel from
    site-packages: neither this process nor a Python it starts in the checkout takes the source."""
    how, expected = installed_as()
    if INSTALL is not None:
        assert how == INSTALL, f"./dev installed the provider as {INSTALL}, the metadata says {how}"
    here = Path(airflow_provider_workflowsvc.__file__).resolve()
    assert here == expected.resolve()
    if how == "wheel":
        assert "site-packages" in here.parts
        assert not here.is_relative_to(REPO / "airflow_provider_workflowsvc")
    child = subprocess.run(
        [sys.executable, "-c", "import airflow_provider_workflowsvc as p; print(p.__file__)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).resolve() == here, "a Python started in the checkout imports its source"


# --------------------------------------------------------------------------------------------------
# ci/airflow-pins.txt: the one list of pins, rendered into the install docs


def test_the_install_docs_show_the_pins_file_as_it_is() -> None:
    """README.md and docs/provider/installation.rst hold the blocks ``ci/airflow_pins.py docs`` writes."""
    for page, text in airflow_pins.rendered(airflow_pins.read()).items():
        assert page.read_text() == text, f"{page.name} is out of date: run python ci/airflow_pins.py docs"


def test_the_install_page_shows_exactly_each_minors_user_pins() -> None:
    """Read back from the page, not from the renderer: each minor's commands name its release and
    exactly its ``users`` pins; a ``tests`` pin is never shown."""
    pins = airflow_pins.read()
    page = airflow_pins.INSTALL_PAGE.read_text()
    for minor in airflow_pins.minors(pins):
        section = page.split(f"Airflow {minor} (tested: ", 1)[1].split("\nAirflow ", 1)[0]
        release = airflow_pins.release(pins, minor)
        assert f"constraints-{release}/constraints-" in section
        shown = re.findall(r'"([^"]+)"', "".join(re.findall(r"\$ pip install (.*)", section)))
        expected = {
            f"apache-airflow=={release}",
            *(p.requirement for p in airflow_pins.user_pins(pins, minor)),
        }
        assert set(shown) - {s for s in shown if s.startswith("https://")} == expected, minor
    assert "wtforms" not in page.lower().split("what is checked")[0]


def test_the_readme_names_every_pin_a_user_needs() -> None:
    pins = airflow_pins.read()
    readme = airflow_pins.README.read_text()
    newest = airflow_pins.minors(pins)[0]
    assert f"constraints-{airflow_pins.release(pins, newest)}/" in readme
    for minor in airflow_pins.minors(pins):
        for pin in airflow_pins.user_pins(pins, minor):
            assert f"`{pin.requirement}`" in readme


def test_each_minor_lists_its_airflow_release_first_and_the_newest_first() -> None:
    pins = airflow_pins.read()
    minors = airflow_pins.minors(pins)
    assert minors == sorted(minors, key=lambda m: tuple(map(int, m.split("."))), reverse=True)
    for minor in minors:
        assert airflow_pins.requirements(pins, minor)[0].startswith(f"apache-airflow=={minor}.")


def test_a_malformed_pins_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pins.txt"
    path.write_text("# comment\n3.3  users  apache-airflow==3.3.2\n3.2 everyone fastapi<1  # why\n")
    with pytest.raises(ValueError, match=r"pins.txt:3: expected '<minor> users\|tests <requirement>  # why'"):
        airflow_pins.read(path)


def test_dev_installs_what_the_pins_file_lists() -> None:
    """``./dev`` asks the reader for the matrix and each minor's requirements (no list of its own)."""
    listed = subprocess.run(
        [sys.executable, str(REPO / "ci" / "airflow_pins.py"), "requirements", "3.2"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.splitlines() == airflow_pins.requirements(airflow_pins.read(), "3.2")
    dev = (REPO / "dev").read_text()
    assert '"$BOOT_PYTHON" "$PINS_READER" minors' in dev
    assert '"$BOOT_PYTHON" "$PINS_READER" requirements "$minor"' in dev
    assert "MATRIX=(" not in dev
