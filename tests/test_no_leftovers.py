"""A test run leaves nothing in the temp directory: Airflow's home, tmp_path folders, figures files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A pytest session of its own (~25 s): run once, on the newest Airflow, with the end-to-end tests.
pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
# One of each kind of test that writes to the temp directory: Airflow's home and its database
# (dag.test), the emulator on loopback, tmp_path, the reliability figures.
SAMPLE = [
    "tests/test_run_operator_dag.py::test_a_failed_job_fails_the_task",
    "tests/test_run_operator.py::test_files_for_a_workflow_with_a_source_fail_before_anything_is_uploaded",
    "tests/reliability/test_bad_inputs.py::test_bad_input",
]
ONE_EACH = "failed_job or source_fail or 404-unknown-workflow"


def test_a_test_run_leaves_nothing_in_the_temp_directory(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "WORKFLOWSVC_"))}
    env |= {"TMPDIR": str(temp), "WORKFLOWSVC_TEST_DIALECTS": "spec"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", ONE_EACH, *SAMPLE]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "3 passed" in result.stdout, result.stdout[-2000:]
    left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
    # pytest's own root (pytest-of-<user>) stays, empty: the next run's base temp goes there
    assert [p for p in left if not p.startswith("pytest-of-")] == [], left
    assert [p for p in left if p.count("/") > 0] == [], left
