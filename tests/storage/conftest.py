"""Fixtures of the object storage tests: moto's S3 server (one per session, on loopback) and a bucket."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ._helpers import Bucket, S3Server, running_s3_server

CONN_ID = "s3_test"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server, started by the session on a free loopback port and stopped by its PID."""
    with running_s3_server() as server:
        yield server


@pytest.fixture
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A new bucket, and the ``aws`` connection ``s3_test`` to its server (endpoint_url in the extra)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(s3_server.connection()))
    return Bucket.new(s3_server, CONN_ID)
