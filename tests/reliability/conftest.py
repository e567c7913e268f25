"""Shared by the reliability tests: the figures each test records.

Every test that takes the ``figures`` fixture fills a dict (cycles, faults injected, duplicates, cases,
...); its run time is added. At the end of the session the figures are printed in a "reliability
figures" section and written as JSON to ``$WORKFLOWSVC_RELIABILITY_FIGURES`` (default: the temp
directory), which is where the numbers in ``docs/reliability.md`` come from.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

FIGURES: dict[str, dict[str, Any]] = {}


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A dict of figures for this test (shown at the end of the run); ``seconds`` is added."""
    entry: dict[str, Any] = {}
    started = time.monotonic()
    yield entry
    entry["seconds"] = round(time.monotonic() - started, 1)
    FIGURES[request.node.nodeid.rsplit("/", 1)[-1]] = entry


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("reliability figures")
    for name, values in sorted(FIGURES.items()):
        terminalreporter.write_line(f"{name}: {json.dumps(values, sort_keys=True)}")
    target = os.environ.get("WORKFLOWSVC_RELIABILITY_FIGURES")
    if not target:  # a test run leaves nothing behind in the temp directory unless asked to
        terminalreporter.write_line("(set $WORKFLOWSVC_RELIABILITY_FIGURES to a file to keep them as JSON)")
        return
    record = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "figures": FIGURES}
    Path(target).write_text(json.dumps(record, indent=2, sort_keys=True))
    terminalreporter.write_line(f"(written to {target})")
