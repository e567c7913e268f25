"""
An S3-compatible server on loopback for the tests, the distributed demo and the benchmarks: moto's
server mode (``python -m moto.server``) in a process group of its own on a free port, stopped by its
PID (SIGTERM, then SIGKILL) when the ``with`` block ends, also on an error.

Airflow reaches it as a deployment reaches S3: an ``aws`` connection whose extra holds the
``endpoint_url`` (:meth:`S3Server.connection`), through ``ObjectStoragePath`` and the Amazon
provider's s3 filesystem (s3fs). ``guarded=N`` turns IAM checks on after the first ``N`` requests (moto's
``INITIAL_NO_AUTH_ACTION_COUNT``): set up users and policies with those, then every request is
checked against the policies of the keys that sign it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

REGION = "us-east-1"
READ_TIMEOUT = 600
"""Seconds botocore waits for an answer of this server (its default is 60)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Server:
    """A running moto server: its endpoint, and keys any request may sign with (unless guarded)."""

    endpoint: str
    process: subprocess.Popen[bytes]
    access_key: str = field(default_factory=lambda: "AKIA" + secrets.token_hex(8).upper())
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def pid(self) -> int:
        return self.process.pid

    def connection(self, access_key: str | None = None, secret_key: str | None = None) -> dict[str, Any]:
        """Return an Airflow ``aws`` connection (JSON form) for this server."""
        return {
            "conn_type": "aws",
            "login": access_key or self.access_key,
            "password": secret_key or self.secret_key,
            "extra": {
                "endpoint_url": self.endpoint,
                "region_name": REGION,
                # moto completes a multipart upload of 1 GiB in more than botocore's 60 s on a busy
                # machine; botocore then sends the completion again, which moto answers with a 500
                "config_kwargs": {"read_timeout": READ_TIMEOUT},
            },
        }

    def connection_env(self, conn_id: str, **keys: Any) -> dict[str, str]:
        """Return the environment variable that defines ``conn_id`` as this server's connection."""
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(self.connection(**keys))}

    def client(
        self, service: str = "s3", access_key: str | None = None, secret_key: str | None = None
    ) -> Any:
        """Return a boto3 client of ``service`` on this server."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
        )

    def put_tree(self, bucket: str, objects: dict[str, bytes]) -> None:
        """Create ``bucket`` (if missing) and put each ``key: bytes`` of ``objects`` into it."""
        s3 = self.client()
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
            s3.create_bucket(Bucket=bucket)
        for key, body in objects.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Return every key under ``prefix`` with its size (the store's own listing)."""
        found: dict[str, int] = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.update({item["Key"]: int(item["Size"]) for item in page.get("Contents", [])})
        return found


@contextlib.contextmanager
def running_s3_server(guarded: int | None = None, startup_timeout: float = 60.0) -> Iterator[S3Server]:
    """Start moto's server on a free loopback port; stop it (by PID) when the block ends."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if guarded is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(guarded)
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = S3Server(endpoint=f"http://127.0.0.1:{port}", process=process)
    try:
        _wait_ready(server, startup_timeout)
        yield server
    finally:
        _stop(process)


def _wait_ready(server: S3Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"moto's server exited with code {server.process.returncode} while starting")
        try:
            # moto's own API (not S3): answers once the server serves, and counts no S3 action
            if httpx.get(f"{server.endpoint}/moto-api/", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"moto's server did not answer within {timeout:.0f} s")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
