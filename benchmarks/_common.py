"""
What every benchmark shares: result rows and the table, child processes, memory readings, machine info.

Benchmarks that measure a process (import time, RSS, CPU time) run it as a fresh child:
``python -m benchmarks.<module> --child ...``, which prints one ``BENCH-RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_MARKER = "BENCH-RESULT "
CONN_ENV = "AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"
KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# Results


@dataclass
class Row:
    """One figure of the table: the values of several runs, their target and their reference."""

    section: str
    metric: str
    values: list[float]
    unit: str
    target: str = ""
    met: bool | None = None
    reference: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def spread(self) -> str:
        """``min-max`` of the runs (empty for a single run)."""
        if len(self.values) < 2:
            return "1 run"
        return f"{fmt(min(self.values))}-{fmt(max(self.values))} (n={len(self.values)})"

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "—"}[self.met]

    def as_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "metric": self.metric,
            "median": self.median,
            "values": self.values,
            "unit": self.unit,
            "target": self.target,
            "met": self.met,
            "reference": self.reference,
            "note": self.note,
            **({"extra": self.extra} if self.extra else {}),
        }


def fmt(value: float) -> str:
    """Format a number with about three significant digits."""
    if value != value:  # NaN
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def table(rows: Sequence[Row]) -> str:
    """Render the rows as a Markdown table (also readable on a terminal)."""
    header = ["benchmark", "figure", "median", "spread (min-max)", "unit", "target", "verdict", "reference"]
    lines = [header]
    for row in rows:
        lines.append(
            [
                row.section,
                row.metric,
                fmt(row.median),
                row.spread,
                row.unit,
                row.target,
                row.verdict,
                row.reference,
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) + " |")
        if index == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def notes(rows: Sequence[Row]) -> str:
    return "\n".join(f"- {row.section} / {row.metric}: {row.note}" for row in rows if row.note)


def ratio(value: float, reference: float) -> str:
    return "n/a" if not reference else f"{value / reference:.2f}x"


# --------------------------------------------------------------------------------------------------
# Child processes


def emit(result: dict[str, Any]) -> None:
    """Print a child's result for :func:`run_child` (one line, last of its kind wins)."""
    sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a benchmark child: this one (Airflow home included), plus ``extra``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


READY_MARKER = "BENCH-READY"


def run_child(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
    python: str | None = None,
    sample_every: float | None = None,
    on_ready: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """
    Run ``python args...`` to the end; its ``BENCH-RESULT`` JSON (an error names its stderr tail).

    With ``sample_every``, the child's RSS and open sockets are also read from ``/proc`` that often
    (by this process, so the child's CPU time is not disturbed): ``result["sampled"]`` has the maxima.
    With ``on_ready``, a child that prints ``BENCH-READY`` (see :func:`wait_for_go`) is sent the line
    ``on_ready()`` returns: the parent prepares the work only once the child has started up.
    """
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [python or sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env or child_env(),
            cwd=REPO_ROOT,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        sampler = ProcSampler(proc.pid, sample_every) if sample_every else None
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.strip() == READY_MARKER and on_ready is not None:
                    proc.stdin.write(on_ready() + "\n")
                    proc.stdin.flush()
            proc.wait()
        finally:
            killer.cancel()
            if sampler is not None:
                sampler.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()
            proc.stdout.close()
        err.seek(0)
        stderr = err.read()
    found = [line for line in lines if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not found:
        raise RuntimeError(
            f"benchmark child {' '.join(args)[:200]} failed (exit {proc.returncode}):\n{stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(found[-1][len(RESULT_MARKER) :])
    if sampler is not None:
        result["sampled"] = sampler.maxima()
    return result


def wait_for_go() -> str:
    """In a child: tell the parent it has started up, and read the line it sends back."""
    sys.stdout.write(READY_MARKER + "\n")
    sys.stdout.flush()
    return sys.stdin.readline().strip()


class ProcSampler:
    """Reads another process's RSS and open sockets from ``/proc`` in a background thread."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every = pid, every
        self.max_rss_kib = 0
        self.max_sockets = 0
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{pid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.every):
            self.max_rss_kib = max(self.max_rss_kib, proc_status_kib("VmRSS", self.pid))
            self.max_sockets = max(self.max_sockets, open_sockets(self.pid))
            self.samples += 1

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def maxima(self) -> dict[str, int]:
        return {"rss_kib": self.max_rss_kib, "sockets": self.max_sockets, "samples": self.samples}


@contextlib.contextmanager
def airflow_home() -> Iterator[str]:
    """Set a throwaway ``AIRFLOW_HOME`` (set in this process, so children inherit it) for the block."""
    previous = {k: os.environ.get(k) for k in ("AIRFLOW_HOME", "AIRFLOW__CORE__LOAD_EXAMPLES")}
    with tempfile.TemporaryDirectory(prefix="wfsvc-bench-airflow-") as home:
        os.environ["AIRFLOW_HOME"] = home
        os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        try:
            yield home
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def conn_json(base_url: str, token: str, api_key: str | None = None, **extra: Any) -> str:
    """``AIRFLOW_CONN_WORKFLOWSVC_DEFAULT`` for a service at ``base_url``."""
    extras = {**({"api_key": api_key} if api_key else {}), **extra}
    return json.dumps({"conn_type": "workflowsvc", "host": base_url, "password": token, "extra": extras})


# --------------------------------------------------------------------------------------------------
# Process readings (Linux /proc; no psutil)


def proc_status_kib(key: str, pid: int | str = "self") -> int:
    """Return a ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``), 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def max_rss_kib() -> int:
    """Peak RSS of this process since it started (``ru_maxrss``, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def open_sockets(pid: int | str = "self") -> int:
    """Sockets the process holds open right now (its ``/proc/<pid>/fd`` entries that are sockets)."""
    count = 0
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                count += 1
    return count


def raise_open_files_limit(wanted: int = 65536) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` towards the hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class CpuTimer:
    """Process CPU time (user + system) and wall time of a block."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.system = 0.0
        """The system (kernel) part of ``cpu``."""
        self.wall = 0.0

    def __enter__(self) -> CpuTimer:
        self._cpu0, self._wall0, self._system0 = time.process_time(), time.perf_counter(), os.times().system
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self._cpu0
        self.system = os.times().system - self._system0
        self.wall = time.perf_counter() - self._wall0


class GcTimer:
    """CPU time spent in the cyclic garbage collector during a block, and the collections by generation."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.cpu += time.process_time() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


# --------------------------------------------------------------------------------------------------
# The machine


def machine() -> dict[str, Any]:
    """Describe the machine the figures were measured on."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = proc_meminfo_kib("MemTotal")
    versions: dict[str, str] = {}
    for dist in ("apache-airflow", "httpx", "httpcore", "uvicorn", "fastapi", "pydantic"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[dist] = version(dist)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / MIB, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "load_average_at_start": [round(x, 2) for x in load],
    }


def proc_meminfo_kib(key: str) -> int:
    with contextlib.suppress(OSError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def transfer_arguments(
    argv: Sequence[str] | None, description: str | None, kinds: Sequence[str], parts: str
) -> argparse.Namespace:
    """
    Read the arguments of a 1 GiB transfer benchmark (size, ``parts`` it is split into, runs, work
    dir), and of one of its children (``--child`` one of ``kinds``, ``--spec``).
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="bytes uploaded, and downloaded, per run")
    parser.add_argument("--files", type=int, default=8, help=f"the upload is split into this many {parts}")
    parser.add_argument("--runs", type=int, default=4, help="an even number balances the ABBA order")
    parser.add_argument("--work-dir", help="where to write the temporary files (default: the temp dir)")
    parser.add_argument("--child", choices=kinds, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    return parser.parse_args(argv)
