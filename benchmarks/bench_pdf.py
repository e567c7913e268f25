"""
PDF partitioning in the emulator (issue #38): time per page, pages and characters found, per input PDF.

Inputs: a generated PDF (``samples.simple_pdf``: Helvetica text, Flate-compressed, ``--pages`` pages of
``--lines`` lines), which every version of the emulator reads, and any PDF files named on the command
line (e.g. the public SDK's ``_sample_docs/*.pdf``). Each input is partitioned ``--runs`` times
(``emulator.partition.partition``, what a run does with an uploaded file). The table gives the time per
page (fastest run and median; pages as the PDF's page tree counts them), the pages the elements name
(the highest ``page_number``), the elements and the characters of their text, or the reason it failed.

``--against DIR`` compares with another checkout (e.g. ``git worktree add /tmp/before main``): each
round runs both versions in fresh processes, this one then DIR's, and the ratio (this / DIR) is taken
round by round, so both are measured on the same machine state. Only ``partition`` and
``samples.simple_pdf`` are imported from the checkout, which every version has.

    python -m benchmarks.bench_pdf [--pages 50] [--lines 40] [--runs 5] [FILE.pdf ...]
    python -m benchmarks.bench_pdf --against /tmp/before [--rounds 3] [FILE.pdf ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LINE = "Line {line} of page {page}: the emulator reads this sentence and keeps every word of it."


def generated(pages: int, lines: int) -> bytes:
    from airflow_provider_workflowsvc.emulator.samples import simple_pdf

    text = [[LINE.format(line=n, page=p) for n in range(1, lines + 1)] for p in range(1, pages + 1)]
    return simple_pdf(text, compress=True)


def page_count(data: bytes) -> int:
    """Return the PDF's page count as its page tree says (pypdf), for the time per page."""
    import pypdf

    return len(pypdf.PdfReader(io.BytesIO(data)).pages)


def measure(name: str, data: bytes, runs: int) -> dict[str, Any]:
    from airflow_provider_workflowsvc.emulator.partition import PartitionError, partition

    pages, times, elements, reason = page_count(data), [], [], None
    for _ in range(runs):
        started = time.perf_counter()
        try:
            elements = partition(name, "application/pdf", data)
        except PartitionError as exc:
            reason = str(exc)
        times.append(1000 * (time.perf_counter() - started) / pages)
    return {
        "input": name,
        "pages": pages,
        "ms_per_page": times,
        "pages_found": max((e["metadata"].get("page_number") or 0 for e in elements), default=0),
        "elements": len(elements),
        "characters": sum(len(e["text"]) for e in elements),
        "failed": reason,
    }


def measure_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    inputs = [(f"generated-{args.pages}x{args.lines}.pdf", generated(args.pages, args.lines))]
    inputs += [(path.name, path.read_bytes()) for path in args.files]
    return [measure(name, data, args.runs) for name, data in inputs]


def in_child(checkout: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure ``checkout``'s emulator in a fresh process (its package first on the path)."""
    command = [sys.executable, __file__, "--child", "--runs", str(args.runs)]
    command += ["--pages", str(args.pages), "--lines", str(args.lines), *map(str, args.files)]
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    rows: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return rows


def describe(row: dict[str, Any]) -> str:
    times = row["ms_per_page"]
    found = f"{row['pages_found']} | {row['elements']} | {row['characters']}"
    failed = f" | failed: {row['failed']}" if row["failed"] else ""
    return f"{min(times):.2f} | {statistics.median(times):.2f} | {found}{failed}"


def compare(args: argparse.Namespace) -> None:
    mine: dict[str, dict[str, Any]] = {}
    theirs: dict[str, dict[str, Any]] = {}
    ratios: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for now, before in zip(in_child(REPO_ROOT, args), in_child(args.against, args), strict=True):
            name = now["input"]
            ratios.setdefault(name, []).append(
                statistics.median(now["ms_per_page"]) / statistics.median(before["ms_per_page"])
            )
            for store, row in ((mine, now), (theirs, before)):
                store.setdefault(name, {**row, "ms_per_page": []})["ms_per_page"] += row["ms_per_page"]
    print(f"{args.rounds} rounds of {args.runs} runs; this checkout: {REPO_ROOT}; against: {args.against}")
    print("input | pages | version | ms/page min | median | pages found | elements | characters")
    for name, row in mine.items():
        print(f"{name} | {row['pages']} | this | {describe(row)}")
        print(f"{name} | {row['pages']} | against | {describe(theirs[name])}")
        each = ", ".join(f"{r:.2f}" for r in ratios[name])
        print(f"{name} | | ratio this/against, per round | {statistics.median(ratios[name]):.2f} ({each})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path, help="more PDFs to partition")
    parser.add_argument("--pages", type=int, default=50, help="pages of the generated PDF (default 50)")
    parser.add_argument("--lines", type=int, default=40, help="lines per generated page (default 40)")
    parser.add_argument("--runs", type=int, default=5, help="partitions of each input (default 5)")
    parser.add_argument("--against", type=Path, help="a checkout of another version to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the comparison (default 3)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_all(args)))
    elif args.against:
        compare(args)
    else:
        print("input | pages | ms/page min | median | pages found | elements | characters")
        for row in measure_all(args):
            print(f"{row['input']} | {row['pages']} | {describe(row)}")


if __name__ == "__main__":
    main()
