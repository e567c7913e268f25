"""
A benchmark-only server of one route: ``GET /api/v1/jobs/{job_id}/download`` streaming a big JSON output.

The emulator keeps each output as one JSON text in SQLite and answers it in one piece, and would have to
partition a 1 GiB document to make one that large, so the download benchmark uses this instead: a plain
ASGI app on uvicorn that streams a JSON array of document elements (the shape the emulator returns) of
exactly ``--size`` bytes, built from one pre-rendered 1 MiB chunk. It ignores credentials and query
parameters. It prints ``listening on http://127.0.0.1:PORT/api/v1`` once it accepts connections.

    python -m benchmarks._download_server --size 1073741824
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

CHUNK = 1024 * 1024
ROUTE_PREFIX = "/api/v1/jobs/"
ROUTE_SUFFIX = "/download"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _element(index: int) -> bytes:
    element = {
        "type": "NarrativeText",
        "element_id": f"{index:032x}",
        "text": "The quick brown fox jumps over the lazy dog. " * 8,
        "metadata": {"filename": "big.txt", "filetype": "text/plain", "page_number": 1 + index // 50},
    }
    return json.dumps(element, separators=(",", ":")).encode()


def body_chunks(size: int) -> Iterator[bytes]:
    """``[element,element,...]`` of exactly ``size`` bytes (the last element's text is padded)."""
    unit = _element(0) + b","
    block = unit * max(1, CHUNK // len(unit))
    remaining = size - 2  # the brackets
    yield b"["
    while remaining > len(block) + len(unit) * 2:
        yield block
        remaining -= len(block)
    last = json.loads(_element(1))
    last["text"] = ""
    tail = json.dumps(last, separators=(",", ":")).encode()
    filler = remaining - len(tail)
    if filler < 0:
        raise ValueError(f"size {size} is too small for one element")
    units, pad = divmod(filler, len(unit))
    last["text"] = "x" * pad
    yield unit * units + json.dumps(last, separators=(",", ":")).encode()
    yield b"]"


def make_app(size: int) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path.startswith(ROUTE_PREFIX) and path.endswith(ROUTE_SUFFIX)):
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in body_chunks(size):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main(argv: Sequence[str] | None = None) -> None:
    from airflow_provider_workflowsvc.emulator.server import (
        EmulatorServer,
        bind_socket,
        root_url,
        uvicorn_config,
    )

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--size", type=int, required=True, help="bytes of every download")
    args = parser.parse_args(argv)
    sock = bind_socket("127.0.0.1", 0)
    url = root_url(sock) + "/api/v1"

    def started() -> None:
        sys.stdout.write(f"listening on {url}\n")
        sys.stdout.flush()

    server = EmulatorServer(uvicorn_config(make_app(args.size)), on_started=started)
    try:
        server.run(sockets=[sock])  # stops cleanly on SIGTERM
    finally:
        sock.close()


if __name__ == "__main__":
    main()
