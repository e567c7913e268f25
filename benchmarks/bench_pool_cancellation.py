"""
Cancellation storm: requests cancelled inside httpcore's close of their response, then healthy ones.

A cancellation (a wait's deadline, the shared listing's time limit, a trigger Airflow cancels) can land
inside httpcore's own clean-up of a response; its shield does not hold against ``Task.cancel``, so the
connection stays counted as busy (issue #27). Here ``--cut`` requests on one shared client are each
cancelled there (httpcore's ``_response_closed`` slowed by 0.2 s, the cancellation landing in it),
then ``--after`` requests are sent, 20 at a time, each within ``--timeout`` seconds. Measured for the
provider's lanes (``hooks/_pool.py``) and for httpx's own pool of the same size, with and without the
body read shielded (``asyncio.shield``: httpx closes a response inside the read of its last chunk, so
shielding the close alone does nothing), against the emulator in its own process.

    python -m benchmarks.bench_pool_cancellation [--cut 40] [--after 200] [--size 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpcore
import httpx

from benchmarks._common import machine
from benchmarks._service import emulator

Http11 = httpcore._async.http11.AsyncHTTP11Connection
_CLOSE = Http11._response_closed


async def _cut_in_close(client: httpx.AsyncClient, shield: bool) -> bool:
    """One request whose response close is cancelled inside httpcore; False if it got no connection."""
    closing = asyncio.Event()

    async def slow(self: Any) -> None:  # a close that takes a moment; the cancellation lands in it
        closing.set()
        await asyncio.sleep(0.2)
        await _CLOSE(self)

    Http11._response_closed = slow  # type: ignore[method-assign]
    try:

        async def request() -> None:
            async with client.stream("GET", "jobs/") as response:
                # httpx closes a response as its body ends: the close is inside the read
                await (asyncio.shield(response.aread()) if shield else response.aread())

        task = asyncio.ensure_future(request())
        waiting = asyncio.ensure_future(closing.wait())
        await asyncio.wait([task, waiting], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        task.cancel()
        await asyncio.gather(task, waiting, return_exceptions=True)
        return closing.is_set()
    finally:
        Http11._response_closed = _CLOSE  # type: ignore[method-assign]


async def _trial(emu: Any, pool: str, cut: int, after: int, size: int, timeout: float) -> dict[str, Any]:
    from airflow_provider_workflowsvc.hooks import _pool

    if pool == "lanes":
        transport: httpx.AsyncBaseTransport = _pool._Lanes(size)
    else:
        transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=size))
    with emu.api_client() as api:
        headers = dict(api.headers)
    client = httpx.AsyncClient(
        transport=transport, base_url=emu.base_url + "/", headers=headers, timeout=timeout
    )
    cut_done = [await _cut_in_close(client, shield=pool.endswith("shielded")) for _ in range(cut)]
    gate = asyncio.Semaphore(20)
    started = time.monotonic()

    async def healthy() -> float | None:
        async with gate:
            begun = time.monotonic()
            try:
                (await client.get("jobs/")).raise_for_status()
            except httpx.HTTPError:
                return None
            return time.monotonic() - begun

    results = await asyncio.gather(*(healthy() for _ in range(after)))
    served = sorted(r for r in results if r is not None)
    await asyncio.wait_for(client.aclose(), 10)
    return {
        "pool": pool,
        "cut_in_close": sum(cut_done),
        "cut_not_sent": cut - sum(cut_done),
        "served": len(served),
        "sent": after,
        "median_s": served[len(served) // 2] if served else None,
        "max_s": served[-1] if served else None,
        "wall_s": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cut", type=int, default=40)
    parser.add_argument("--after", type=int, default=200)
    parser.add_argument("--size", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    rows = []
    with emulator() as emu:
        for pool in ("lanes", "httpx pool", "httpx pool, body read shielded"):
            rows.append(asyncio.run(_trial(emu, pool, args.cut, args.after, args.size, args.timeout)))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nmachine: {json.dumps(machine())}")
    print(f"{args.cut} requests cut inside httpcore's close, then {args.after} healthy ones (20 at a time, ")
    print(f"each within {args.timeout:g} s), one client of {args.size} connections\n")
    print("| pool | cut requests sent | healthy requests served | median (s) | max (s) | wall (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        median = "-" if r["median_s"] is None else f"{r['median_s']:.3f}"
        most = "-" if r["max_s"] is None else f"{r['max_s']:.3f}"
        cut = f"{r['cut_in_close']}/{r['cut_in_close'] + r['cut_not_sent']}"
        print(f"| {r['pool']} | {cut} | {r['served']}/{r['sent']} | {median} | {most} | {r['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
