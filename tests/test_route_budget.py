"""
The route budget of issue #33: how far data travels through the provider's files, traced as
``python -m benchmarks.trace_moves`` traces it (a *move*: a call or return after which another provider
file runs). It counts calls, not time: the same code gives the same count on a busy machine.

A new capability that makes the route longer must shorten another: this test fails with the hops by
pair of files, so the one who lengthened it sees where the moves went. The tracer runs as a script of the
checkout on the provider Python imports: the built wheel in the matrix legs (``-m benchmarks...`` would
not even be found there: no Python the tests start puts the checkout on its path).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import EMULATOR_DIALECTS

SCENARIOS = ("get_workflow", "deferrable_run", "on_demand_run")
PLATFORM_ONLY = ("on_demand_run",)  # the spec dialect has no templates

TRACER = Path(__file__).resolve().parent.parent / "benchmarks" / "trace_moves.py"


def _traced(dialects: tuple[str, ...]) -> tuple[dict[tuple[str, str], list[tuple[str, int, int]]], str]:
    """
    Run the tracer in a process of its own (it resets its own Airflow DB), once for all ``dialects``:
    by dialect and scenario, each count (moves between files, between rooms) with its target; the table.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.pop("AIRFLOW_HOME", None)
    done = subprocess.run(
        [sys.executable, str(TRACER), "--hops", "--dialect", ",".join(dialects)],
        cwd=TRACER.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures, dialect = {}, ""
    for line in done.stdout.splitlines():
        name, *words = line.split() or [""]
        if name == "dialect":
            dialect = words[0]
        elif name in SCENARIOS:
            figures[(dialect, name)] = [
                ("files", int(words[0]), int(words[1])),
                ("rooms", *map(int, words[5:7])),
            ]
    expected = {(d, s) for d in dialects for s in SCENARIOS if d == "platform" or s not in PLATFORM_ONLY}
    assert set(figures) == expected, done.stdout
    return figures, done.stdout


@pytest.mark.airflow_min(
    "3.3",
    reason="the budget is the newest Airflow's route; before 3.3 the durable store is provider code (a "
    "Variable, #47): the run's route measured 315 moves on 3.2.2, the on-demand run's 424",
)
def test_the_route_stays_within_its_budget() -> None:
    figures, table = _traced(EMULATOR_DIALECTS)
    over = {
        key: f"{moves} moves between {what} > {target}"
        for key, counts in figures.items()
        for what, moves, target in counts
        if moves > target
    }
    assert not over, (
        f"a change made the route longer: shorten another (issue #33): {over}\n"
        f"python -m benchmarks.trace_moves --hops --dialect {','.join(EMULATOR_DIALECTS)}:\n{table}"
    )
