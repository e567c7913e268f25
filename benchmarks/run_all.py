"""
Run every benchmark and print one table: ``./dev bench`` (or ``python -m benchmarks.run_all``).

Sections: 1 DAG-parse cost (import time), 2 triggerer fan-in, 3 hook overhead, 4 streaming memory, 5 poll
economy; 6 failover (a distributed Airflow, two triggerers, one dies) only when named: ``--only
failover``. Every figure is measured beside its reference in the same run; the table shows the median
of the runs and their spread (min-max). The defaults take about six minutes on two cores; flags make any
part bigger (or smaller). The table, the machine and every raw value are also written as JSON to
``benchmarks/results/`` (git-ignored). Results go into docs/benchmarks.md by hand.

    ./dev bench                                    # everything, default sizes
    ./dev bench --only import,polls                # some sections
    ./dev bench --runs 11 --fanin-runs 3           # more samples
    ./dev bench --triggers 2000 --stream-mib 4096  # bigger sizes
    ./dev bench --only failover --waits 60         # failover: N waits, two triggerers (flags: --help)
    ./dev bench --quick                            # the smoke run: every benchmark once, tiny sizes

``--quick`` runs every part of every benchmark once at sizes that take seconds (CI runs it:
tests/test_benchmarks_smoke.py): its table shows the benchmarks run and what they count, not how fast.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    MIB,
    REPO_ROOT,
    Row,
    airflow_home,
    machine,
    notes,
    raise_open_files_limit,
    table,
)

SECTIONS = ("import", "hook", "polls", "streaming", "fanin")
OPT_IN = ("failover",)
"""Sections run only when named (``--only failover``): a distributed Airflow, minutes per scenario."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="./dev bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS + OPT_IN)}"
    )
    parser.add_argument("--quick", action="store_true", help="every benchmark once, tiny sizes (CI smoke)")
    parser.add_argument("--runs", type=int, help="samples of the import and hook benchmarks (default 7)")
    parser.add_argument("--databricks-python", help="an interpreter with the Databricks provider")
    parser.add_argument("--hook-seconds", type=float, help="length of one hook trial (default 1.5)")
    parser.add_argument("--triggers", type=int, help="triggers waiting at once (default 1000)")
    parser.add_argument("--job-seconds", type=float, help="length of each fan-in job (default 30)")
    parser.add_argument("--interval", type=float, help="fan-in poll interval in seconds (default 4)")
    parser.add_argument("--fanin-runs", type=int, help="runs of each fan-in variant (default 1)")
    parser.add_argument(
        "--fanin-variants",
        help="provider, fresh-client, raw-httpx, raw-jittered, idle (default: the first three)",
    )
    parser.add_argument(
        "--fanin-together",
        action="store_true",
        help="run the fan-in variants of a round at the same time (the ratio then shares one moment)",
    )
    parser.add_argument("--stream-mib", type=int, help="MiB uploaded and downloaded per run (default 1024)")
    parser.add_argument("--stream-files", type=int, help="files the upload is split into (default 8)")
    parser.add_argument("--stream-runs", type=int, help="runs of each transfer (default 4)")
    parser.add_argument("--work-dir", help="directory for the streaming benchmark's big temporary files")
    parser.add_argument("--poll-runs", type=int, help="runs of each poll-economy wait (default 3)")
    from benchmarks.bench_failover import add_arguments

    add_arguments(parser)
    parser.add_argument("--json", help="where to write the results (default benchmarks/results/<time>.json)")
    return parser


def _pick(value: Any, default: Any, quick: Any, is_quick: bool) -> Any:
    if value is not None:
        return value
    return quick if is_quick else default


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS + OPT_IN]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS + OPT_IN)}", file=sys.stderr)
        return 2
    q = args.quick
    started = time.perf_counter()
    info = machine()
    airflow = info["versions"].get("apache-airflow", "?")
    print(
        f"Machine: {info['cpus']} x {info['cpu_model']}, {info['memory_gib']} GiB, Python {info['python']}, "
        f"Airflow {airflow}, load average {info['load_average_at_start']}",
        flush=True,
    )
    rows: list[Row] = []
    timings: dict[str, float] = {}
    raise_open_files_limit()  # before the emulator starts: it inherits the limit (one socket per trigger)
    with airflow_home(), contextlib.ExitStack() as stack:
        emu = None
        if set(only) - {"import", *OPT_IN}:  # the failover benchmark starts its own
            from benchmarks._service import emulator

            emu = stack.enter_context(emulator())
        for section in only:
            print(f"== {section}", flush=True)
            t0 = time.perf_counter()
            rows += _run_section(section, args, q, emu)
            timings[section] = time.perf_counter() - t0
            print(f"   ({timings[section]:.0f} s)", flush=True)
    elapsed = time.perf_counter() - started
    print()
    print(table(rows))
    print()
    print("Notes:")
    print(notes(rows))
    missed = [r for r in rows if r.met is False]
    print()
    print(
        f"{sum(r.met is True for r in rows)} targets met, {len(missed)} missed; total {elapsed / 60:.1f} min "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in timings.items())})"
    )
    _save(args.json, info, rows, timings, argv)
    return 0


def _run_section(section: str, args: argparse.Namespace, q: bool, emu: Any) -> list[Row]:
    if section == "import":
        from benchmarks import bench_import

        return bench_import.run(_pick(args.runs, 7, 1, q), args.databricks_python, warm_up=not q)
    if section == "hook":
        from benchmarks import bench_hook

        return bench_hook.run(_pick(args.runs, 7, 3, q), _pick(args.hook_seconds, 1.5, 0.1, q), emu=emu)
    if section == "polls":
        from benchmarks import bench_polls

        return bench_polls.run(_pick(args.poll_runs, 3, 1, q), emu=emu)
    if section == "streaming":
        from benchmarks import bench_streaming

        size = _pick(args.stream_mib, 1024, 2, q) * MIB
        files = _pick(args.stream_files, 8, 2, q)
        runs = _pick(args.stream_runs, 4, 1, q)
        return bench_streaming.run(size, files, runs, emu=emu, work_dir=args.work_dir)
    if section == "failover":
        from benchmarks import bench_failover

        sizes = bench_failover.sizes_from(args)
        scenarios = (args.scenarios or ",".join(bench_failover.SCENARIOS)).split(",")
        return bench_failover.run(sizes, scenarios)
    from benchmarks import bench_triggerer

    setup = bench_triggerer.Setup(
        _pick(args.triggers, 1000, 2, q),
        _pick(args.job_seconds, 30.0, 1.0, q),
        _pick(args.interval, 4.0, 0.5, q),
    )
    variants = (args.fanin_variants or ",".join(bench_triggerer.DEFAULT_VARIANTS)).split(",")
    runs = _pick(args.fanin_runs, 1, 1, q)
    together = args.fanin_together or q  # the smoke run's children start up side by side
    return bench_triggerer.run(setup, runs, variants, emu=emu, together=together)


def _save(
    target: str | None, info: dict[str, Any], rows: list[Row], timings: dict[str, float], argv: Any
) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    path = Path(target) if target else REPO_ROOT / "benchmarks" / "results" / f"{now:%Y%m%dT%H%M%SZ}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "date": now.isoformat(timespec="seconds"),
        "argv": list(argv) if argv is not None else sys.argv[1:],
        "machine": info,
        "seconds_per_section": timings,
        "rows": [r.as_dict() for r in rows],
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"Results written to {path}")


if __name__ == "__main__":
    sys.exit(main())
