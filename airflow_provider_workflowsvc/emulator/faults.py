"""Fault injection (latency, error statuses, dropped connections, clock moves) and the request log."""

from __future__ import annotations

import fnmatch
import random
import re
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from airflow_provider_workflowsvc.emulator.config import FaultRule, FaultSpec

__all__ = ["FaultDecision", "FaultInjector", "RequestLog"]

MAX_LOGGED_REQUESTS = 100_000


@dataclass(frozen=True)
class FaultDecision:
    """What to do to one request: wait ``latency`` seconds, then answer with ``error`` (if any)."""

    latency: float = 0.0
    error: int | str | None = None
    retry_after: float = 1.0
    after: bool = False
    """Process the request first; the latency and error then replace its answer."""
    advance: float = 0.0
    """Seconds the emulator's clock moves forward before the request is processed."""

    @property
    def label(self) -> str:
        parts = [f"clock +{self.advance:g}s"] if self.advance else []
        if self.latency:
            parts.append(f"latency {self.latency:g}s")
        if self.error is not None:
            parts.append(str(self.error))
        label = ", ".join(parts)
        return f"{label} after processing" if self.after else label


class FaultInjector:
    """Decides, per request, which fault rules apply (thread-safe; counts and randomness are shared)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.generation = 0
        """Incremented whenever the rules change: injected waits end early when it moves."""
        self.set(FaultSpec())

    def set(self, spec: FaultSpec) -> None:
        with self._lock:
            self.generation += 1
            self.spec = spec
            self._rng = random.Random(spec.seed)
            self._remaining: list[int | None] = [rule.count for rule in spec.rules]
            self._regexes = [re.compile(rule.path_regex) if rule.path_regex else None for rule in spec.rules]

    def clear(self) -> None:
        self.set(FaultSpec())

    def add(self, rule: FaultRule) -> None:
        """Append one rule after the others; theirs counts and the random sequence go on."""
        with self._lock:
            self.generation += 1
            self.spec = self.spec.model_copy(update={"rules": [*self.spec.rules, rule]})
            self._remaining.append(rule.count)
            self._regexes.append(re.compile(rule.path_regex) if rule.path_regex else None)

    def describe(self) -> dict[str, Any]:
        """Return the active spec, with the number of requests each rule may still affect."""
        with self._lock:
            data = self.spec.model_dump(mode="json")
            for rule, remaining in zip(data["rules"], self._remaining, strict=True):
                rule["remaining"] = remaining
            return data

    def decide(self, method: str, path: str) -> FaultDecision | None:
        if not self.spec.rules:
            return None
        with self._lock:
            latency, error, retry_after, after, advance = 0.0, None, 1.0, False, 0.0
            for index, rule in enumerate(self.spec.rules):
                if not self._matches(index, rule, method, path) or not self._fires(index, rule):
                    continue
                latency += rule.latency
                advance += rule.advance_clock
                after = after or rule.phase == "after"
                if rule.errors:
                    error, retry_after = self._rng.choice(rule.errors), rule.retry_after
                    break
            if not latency and error is None and not advance:
                return None
            return FaultDecision(latency, error, retry_after, after, advance)

    def _matches(self, index: int, rule: FaultRule, method: str, path: str) -> bool:
        if rule.method not in ("*", method):
            return False
        regex = self._regexes[index]
        return bool(regex.search(path)) if regex is not None else fnmatch.fnmatchcase(path, rule.path)

    def _fires(self, index: int, rule: FaultRule) -> bool:
        remaining = self._remaining[index]
        if remaining is not None and remaining <= 0:
            return False
        if rule.rate < 1.0 and self._rng.random() >= rule.rate:
            return False
        if remaining is not None:
            self._remaining[index] = remaining - 1
        return True


class RequestLog:
    """The most recent API requests: method, path, query, status, fault and timing (no headers or bodies)."""

    def __init__(self, maxlen: int = MAX_LOGGED_REQUESTS) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=maxlen)

    def add(self, entry: dict[str, Any]) -> None:
        self._entries.append(entry)

    def clear(self) -> None:
        self._entries.clear()

    def query(self, method: str | None = None, path_contains: str | None = None) -> list[dict[str, Any]]:
        return [
            dict(e)
            for e in list(self._entries)
            if (method is None or e["method"] == method.upper())
            and (path_contains is None or path_contains in e["path"])
        ]
