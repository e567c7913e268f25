"""Emulator time: real time plus an offset that tests move forward."""

from __future__ import annotations

import time
from datetime import datetime, timezone

__all__ = ["Clock", "to_datetime"]


def to_datetime(timestamp: float) -> datetime:
    """Return a UTC datetime from epoch seconds."""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


class Clock:
    """
    Emulator time in epoch seconds: ``time.time() + offset``, to the microsecond.

    Microseconds are what ISO-8601 timestamps carry, so a time read back from a response compares
    equal to the stored one.
    """

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def time(self) -> float:
        return round(time.time() + self.offset, 6)

    def now(self) -> datetime:
        return to_datetime(self.time())

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the emulator clock only moves forward")
        self.offset += seconds
