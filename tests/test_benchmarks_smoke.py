"""
Every benchmark of ``benchmarks/run_all.py`` still runs (issue #46): ``./dev bench --quick`` end to end,
each benchmark once at tiny sizes, against the emulator. It checks what the benchmarks count, never how
fast anything was: a benchmark's time is evidence for ``docs/benchmarks.md``, not a test verdict.

Only the newest Airflow's leg runs it (``NEWEST_ONLY`` in ``./dev``): the benchmarks measure the provider,
not its compatibility. The checkout's ``benchmarks`` package runs on the Python of the tests, as
``./dev bench`` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
SECTIONS = {
    "1 DAG-parse": "import",
    "2 triggerer fan-in": "fanin",
    "3 hook overhead": "hook",
    "4 streaming": "streaming",
    "5 poll economy": "polls",
}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """Run ``python -m benchmarks.run_all --quick`` once: what it printed, and the results it wrote."""
    results = tmp_path_factory.mktemp("bench") / "results.json"
    # its own Airflow home and connection, as ./dev bench has: nothing of the test session's
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.pop("AIRFLOW_HOME", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run_all", "--quick", "--json", str(results)],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(results.read_text())


def test_every_benchmark_runs_and_prints_its_rows(smoke: tuple[str, dict[str, Any]]) -> None:
    printed, results = smoke
    from benchmarks.run_all import SECTIONS as RUN_ALL_SECTIONS

    assert set(SECTIONS.values()) == set(RUN_ALL_SECTIONS)  # a new benchmark is added here too
    assert set(results["seconds_per_section"]) == set(RUN_ALL_SECTIONS)
    rows = results["rows"]
    assert {row["section"] for row in rows} == set(SECTIONS)
    table = [line for line in printed.splitlines() if line.startswith("| ")]
    for row in rows:  # each row in the printed table, with a value for each of its runs
        assert any(row["section"] in line and row["metric"] in line for line in table), row["metric"]
        assert row["values"], row["metric"]


def test_the_fan_in_waits_all_end_in_success_in_every_variant(smoke: tuple[str, dict[str, Any]]) -> None:
    from benchmarks.bench_triggerer import DEFAULT_VARIANTS, VARIANTS

    _, results = smoke
    cpu_rows = {row["metric"]: row["note"] for row in results["rows"] if row["metric"].startswith("CPU per")}
    for name in DEFAULT_VARIANTS:  # the reference (a fresh client per request) among them
        note = cpu_rows[f"CPU per poll request - {VARIANTS[name].label}"]
        assert "outcomes {'success': 2}" in note, note
        assert "non-2xx answers 0" in note, note


def test_the_poll_economy_counts_stay_within_their_bounds(smoke: tuple[str, dict[str, Any]]) -> None:
    _, results = smoke
    polls = [row for row in results["rows"] if row["section"] == "5 poll economy"]
    assert polls
    assert all(row["met"] is True for row in polls), [(r["metric"], r["values"], r["target"]) for r in polls]
