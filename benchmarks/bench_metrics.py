"""
CPU of one provider metric sent, with Airflow's metrics off (its no-op logger) and on (StatsD over UDP to
a loopback socket nobody reads): the cost a poll request adds (it sends one metric), issue #37.

Each setting runs in a child of its own (Airflow sets its metrics up once per process), best of 5 rounds
of ``--calls`` calls of ``metrics.answered``, the metric every request sends.

    python -m benchmarks.bench_metrics [--calls 100000]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

ROUNDS = 5


def child(calls: int) -> float:
    """Return the best CPU seconds per call of ``metrics.answered`` in this process's metrics setting."""
    from airflow_provider_workflowsvc import metrics
    from benchmarks.bench_triggerer import _airflow_metrics

    _airflow_metrics()
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(calls):
            metrics.answered("get_job_details", "workflowsvc_default", 200)
        best = min(best, (time.process_time() - started) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(repr(child(args.calls)))
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        statsd = {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(sink.getsockname()[1]),
        }
        for name, extra in (("off", {}), ("on (StatsD)", statsd), ("off", {}), ("on (StatsD)", statsd)):
            env = {**os.environ, "AIRFLOW__METRICS__STATSD_ON": "False", **extra}
            command = [
                sys.executable,
                "-m",
                "benchmarks.bench_metrics",
                "--child",
                "--calls",
                str(args.calls),
            ]
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            seconds = float(out.strip().splitlines()[-1])
            print(
                f"metrics {name:12} {seconds * 1e6:6.2f} µs CPU per metric sent "
                f"(best of {ROUNDS} x {args.calls})"
            )


if __name__ == "__main__":
    main()
