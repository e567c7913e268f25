"""Test setup: an isolated Airflow home (set before anything imports airflow) and the emulator fixtures."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="wfsvc-airflow-home-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).parent / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ.pop("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", None)
