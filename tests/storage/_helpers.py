"""Helpers of the object storage tests: a bucket of the moto server with its Airflow connection."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from scripts.s3_server import S3Server, running_s3_server

__all__ = ["Bucket", "S3Server", "running_s3_server"]


@dataclass
class Bucket:
    """A fresh bucket of the test session's S3 server, reached through the Airflow connection ``conn_id``."""

    server: S3Server
    name: str
    conn_id: str

    @classmethod
    def new(cls, server: S3Server, conn_id: str) -> Bucket:
        bucket = cls(server, f"wfsvc-{secrets.token_hex(4)}", conn_id)
        server.client().create_bucket(Bucket=bucket.name)
        return bucket

    def uri(self, key: str = "", *, with_conn: bool = False) -> str:
        """``s3://bucket/key`` (``s3://conn_id@bucket/key`` with ``with_conn``: Airflow's form)."""
        user = f"{self.conn_id}@" if with_conn else ""
        return f"s3://{user}{self.name}/{key}"

    def path(self, key: str = "") -> Any:
        """The key as Airflow's ObjectStoragePath, with the bucket's connection."""
        from airflow.sdk import ObjectStoragePath

        return ObjectStoragePath(f"s3://{self.name}/{key}", conn_id=self.conn_id)

    def put(self, objects: dict[str, bytes | str]) -> None:
        self.server.put_tree(
            self.name, {k: v.encode() if isinstance(v, str) else v for k, v in objects.items()}
        )

    def listing(self, prefix: str = "") -> dict[str, int]:
        return self.server.keys(self.name, prefix)

    def read(self, key: str) -> bytes:
        return bytes(self.server.client().get_object(Bucket=self.name, Key=key)["Body"].read())

    def delete(self, key: str) -> None:
        self.server.client().delete_object(Bucket=self.name, Key=key)
