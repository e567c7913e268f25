"""
The test kit's time per test, as a user meets it: a repository of DAGs and tests, run by pytest.

The repository is the "Test your DAGs" page's (docs/provider/testing.rst: its DAGs, its four-test file
and the event-driven DAG's test) plus two tests of the same kind (a job the service fails, three
reports): seven tests, as the user's report of issue #47 had. Each run is a fresh pytest process with
``--durations=0`` in a folder of its own, with Python's bytecode caches written and used (as an
installed package has them: the first run of a new virtualenv writes them, so run twice).

``--baseline DIR`` runs the same repository with the provider of another checkout first on
``sys.path`` (e.g. a git worktree of the commit before a change), alternated with this checkout's run:
the A/B pairs of one machine state.

    python -m benchmarks.bench_test_kit [--python .venv-af3.2/bin/python] [--runs 1] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchmarks._common import REPO_ROOT, machine

PAGE = REPO_ROOT / "docs" / "provider" / "testing.rst"
FILE_BLOCK = re.compile(r"^\.\. code-block:: python\n    :caption: (\S+\.py)\n\n((?:    .*\n|\n)+)", re.M)
MORE_TESTS = """
from pathlib import Path

import pytest

DAG_FILE = Path(__file__).parents[1] / "dags" / "ingest_reports.py"

pytestmark = pytest.mark.usefixtures("workflowsvc_connection")


def reports(folder, *names):
    for name in names:
        (folder / name).write_text(f"Report {name}: revenue grew 4% this quarter.")
    return {"reports": str(folder)}


def test_a_job_the_service_fails_fails_the_run(workflowsvc_emulator, workflowsvc_run_dag, tmp_path):
    workflowsvc_emulator.end_jobs("failed")
    result = workflowsvc_run_dag(DAG_FILE, run_conf=reports(tmp_path, "q1.txt"))
    assert result.task_states["ingest"] == "failed"


def test_three_reports_are_ingested(workflowsvc_emulator, workflowsvc_run_dag, tmp_path):
    result = workflowsvc_run_dag(DAG_FILE, run_conf=reports(tmp_path, "q1.txt", "q2.txt", "q3.txt"))
    assert result.state == "success"
    assert len(workflowsvc_emulator.jobs()[0].files) == 3
"""
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+\S+::(\S+)", re.M)


def user_repository(root: Path) -> Path:
    """Write the page's files and the two more tests into ``root``."""
    files = {path: textwrap.dedent(code) for path, code in FILE_BLOCK.findall(PAGE.read_text())}
    files["tests/test_more_reports.py"] = MORE_TESTS
    for path, code in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code)
    return root


def one_run(python: str, repository: Path, checkout: Path | None) -> dict[str, float]:
    """
    Run the repository's tests once; return the wall time, the session's CPU time (its processes': less
    moved by the machine's load than the wall), the first test's and the others' times.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(checkout), env.get("PYTHONPATH"))))
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--durations=0", "tests"]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repository, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "7 passed" not in done.stdout:
        raise SystemExit(f"the tests did not pass:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
    per_test: dict[str, float] = {}
    for seconds, _phase, name in DURATION.findall(done.stdout):
        per_test[name] = per_test.get(name, 0.0) + float(seconds)
    first = "test_the_reports_are_ingested"  # the session's first test: it pays Airflow's start
    others = [t for name, t in per_test.items() if name != first]
    return {
        "wall": wall,
        "cpu": cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime,
        "tests": sum(per_test.values()),
        "first": per_test[first],
        "others_median": statistics.median(others),
        "others_max": max(others),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the Airflow to test")
    parser.add_argument("--runs", type=int, default=1, help="runs of each side")
    parser.add_argument("--baseline", type=Path, help="a checkout whose provider is run first, alternated")
    args = parser.parse_args()
    args.python = os.path.abspath(args.python)  # the runs start in the repository's folder
    info = machine()
    print(f"machine: {info}")
    version = subprocess.run(
        [args.python, "-c", "import importlib.metadata as m; print(m.version('apache-airflow'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    sides = [("before", args.baseline), ("after", None)] if args.baseline else [("this checkout", None)]
    print(f"Airflow {version}; 7 tests; load average at start {os.getloadavg()[0]:.1f}")
    print("| side | run | wall s | CPU s | tests s | first test s | other tests, median s | max s | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-test-kit-") as folder:
        repository = user_repository(Path(folder))
        for run in range(1, args.runs + 1):
            for side, checkout in sides:
                r = one_run(args.python, repository, checkout)
                cells = [f"{r[k]:.1f}" for k in ("wall", "cpu", "tests", "first")]
                cells += [f"{r['others_median']:.2f}", f"{r['others_max']:.2f}", f"{r['load']:.1f}"]
                print(f"| {side} | {run} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
