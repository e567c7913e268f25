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

TRACER = Path(__file__).resolve().parent.parent / "benchmarks" / "trace_moves.py"


def _traced(dialect: str) -> tuple[dict[str, tuple[int, int]], str]:
    """Run the tracer in a process of its own (it resets its own Airflow DB): moves and target by scenario."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.pop("AIRFLOW_HOME", None)
    done = subprocess.run(
        [sys.executable, str(TRACER), "--hops", "--dialect", dialect],
        cwd=TRACER.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {}
    for line in done.stdout.splitlines():
        name, *numbers = line.split() or [""]
        if name in ("get_workflow", "deferrable_run"):
            figures[name] = (int(numbers[0]), int(numbers[1]))
    assert set(figures) == {"get_workflow", "deferrable_run"}, done.stdout
    return figures, done.stdout


@pytest.mark.parametrize("dialect", EMULATOR_DIALECTS)
def test_the_route_stays_within_its_budget(dialect: str) -> None:
    figures, table = _traced(dialect)
    over = {name: f"{moves} moves > {target}" for name, (moves, target) in figures.items() if moves > target}
    assert not over, (
        f"a change made the route longer: shorten another (issue #33): {over}\n"
        f"python -m benchmarks.trace_moves --hops --dialect {dialect}:\n{table}"
    )
