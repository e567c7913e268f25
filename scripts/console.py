"""What the command-line scripts (``./dev demo``, ``./dev airflow``) print, and their Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from types import FrameType


def say(message: str) -> None:
    print(f"\033[1m==>\033[0m {message}", flush=True)


def detail(message: str) -> None:
    print(f"    {message}", flush=True)


def relative(path: Path | str) -> str:
    """Return ``path`` relative to the working directory when it is inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    """Stop on SIGTERM as on Ctrl-C (a signal handler): everything started is stopped on the way out."""
    raise KeyboardInterrupt
