"""Sphinx configuration of the provider docs: ``python -m sphinx -W docs/provider <output dir>``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from airflow_provider_workflowsvc import __version__

project = "airflow-provider-workflowsvc"
release = version = __version__
extensions = [
    "myst_parser",  # the changelog page includes CHANGELOG.md
    "sphinx.ext.autodoc",  # the API reference (api.rst) from the docstrings
]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False  # Airflow's BaseOperator documents its own arguments, not ours
exclude_patterns: list[str] = []
html_theme = "alabaster"
suppress_warnings = ["myst.header"]  # CHANGELOG.md's headings start below the including page's title
