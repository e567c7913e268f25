"""A job listing read as it arrives: item by item, from a point in time, stopping early when newest first."""

from __future__ import annotations

import codecs
import json
import logging
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from airflow_provider_workflowsvc.exceptions import format_validation_errors
from airflow_provider_workflowsvc.models import Job, listed_created_utc

log = logging.getLogger("airflow_provider_workflowsvc.hooks.workflowsvc")

T = TypeVar("T")


@cache
def parser(tp: Any) -> Callable[[Any], Any]:
    """Return the parser of an answer of type ``tp`` (one per type)."""
    return TypeAdapter(tp).validate_python


class Listing(list[T]):
    """The items of a listing that could be read; ``skipped``: the raw items that could not (each warned)."""

    skipped: list[Any]

    def __init__(self, items: Iterable[T] = (), skipped: Iterable[Any] = ()) -> None:
        super().__init__(items)
        self.skipped = list(skipped)


def parse_listed(tp: Any, index: int, raw: Any, listing: Listing[Any]) -> None:
    """Add item ``index`` of a listing to ``listing``: read as ``tp``, or skipped with a warning naming it."""
    try:
        listing.append(parser(tp)(raw))
    except ValidationError as exc:
        listing.skipped.append(raw)
        reason = format_validation_errors(exc.errors(include_input=False, include_url=False))
        what = getattr(tp, "__name__", str(tp))
        log.warning("Skipped item %d of a %s listing (%s): %s", index, what, _item_label(raw), reason)


def _item_label(item: Any) -> str:
    if isinstance(item, Mapping):
        named = {k: item[k] for k in ("id", "name") if k in item and isinstance(item[k], (str, int))}
        if named:
            return ", ".join(f"{k} {v!r}" for k, v in named.items())
    return f"a {type(item).__name__}"


NEWEST_FIRST_EVIDENCE = 8
"""Distinct creation times a whole listing must show newest first before the service's listings are read
only down to the time asked for (by chance once in 8! = 40,320)."""

_newest_first: dict[str, bool] = {}
"""Per service (base URL): True once a whole job listing came newest first, False once one did not."""

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def lists_newest_first(service: str) -> bool:
    return _newest_first.get(service, False)


class _ArrayItems:
    """The items of a JSON array whose text arrives in pieces: each one as soon as it is whole."""

    def __init__(self) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._state = "start"  # → first (after [) → next / item (after ,) → end; other: not an array
        self.count = 0

    @property
    def is_array(self) -> bool:
        return self._state != "other"

    @property
    def buffered(self) -> int:
        return len(self._text)

    def feed(self, chunk: bytes, final: bool = False) -> Iterator[tuple[Any, str]]:
        """Yield each item completed by ``chunk`` with its text; ValueError: not JSON."""
        text = self._text + self._decode.decode(chunk, final)
        pos, end = 0, len(text)
        while self._state != "other":
            pos = _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]
            if pos == end:
                break
            if self._state == "start":
                if text[pos] != "[":
                    self._state = "other"
                    break
                pos, self._state = pos + 1, "first"
            elif self._state == "end":
                raise ValueError(f"text after the end of the list at character {pos}")
            elif self._state == "next" or (self._state == "first" and text[pos] == "]"):
                if text[pos] not in ",]":
                    raise ValueError(f"expected ',' or ']' at character {pos}")
                self._state = "item" if text[pos] == "," else "end"
                pos += 1
            else:
                try:
                    item, stop = _DECODER.raw_decode(text, pos)
                except json.JSONDecodeError:
                    if final:
                        raise
                    break  # not whole yet
                if stop == end and not final:
                    break  # a number may go on in the next piece
                self.count += 1
                yield item, text[pos:stop]
                pos, self._state = stop, "next"
        self._text = text[pos:]
        if final and self._state == "start":
            self._state = "other"  # an empty body
        if final and self._state not in ("end", "other"):
            raise ValueError("the list is not closed")


class JobItems:
    """
    A job listing's body read as it arrives (``add`` each piece), keeping the jobs created since ``since``
    (and undated ones); the others are dropped as each is whole. Why: decisions/wire.md.
    """

    def __init__(
        self,
        service: str,
        since: datetime | None,
        *,
        learn: bool,
        limit: int,
        fail: Callable[[str], Exception],
    ) -> None:
        self.service, self.since, self.learn, self._limit, self._fail = service, since, learn, limit, fail
        self._items = _ArrayItems()
        self._kept_text: list[str] = []  # the jobs kept, as JSON lists of their text, one per piece
        self._kept_at = array("q")  # their places in the listing (named when one cannot be read)
        self._batch: list[str] = []
        self.raw = bytearray()  # the body, when it is not a list (parsed whole, as any answer)
        self._kept = 0
        self._stop_early = since is not None and lists_newest_first(service)
        self._previous: datetime | None = None
        self._newest_first, self._distinct, self._below = True, 0, 0
        self.complete = False  # every item was read
        self.stopped = False  # reading stopped before the end (the rest was older than ``since``)

    def add(self, chunk: bytes) -> bool:
        """Read one more piece of the body; True when the rest is not needed."""
        if not self._items.is_array:
            return self._keep_raw(chunk)
        try:
            for item, text in self._items.feed(chunk):
                if self._take(item, text):
                    self.stopped = True
                    self._keep_batch()
                    return True
        except ValueError as exc:
            raise self._fail(f"not JSON ({exc})") from None
        if not self._items.is_array:
            return self._keep_raw(chunk)
        self._keep_batch()
        if self._kept + self._items.buffered > self._limit:
            raise self._fail(f"the jobs kept passed {self._limit} bytes (max_response_bytes)")
        return False

    def listing(self) -> Listing[Job] | None:
        """Return the jobs kept, once the body has ended; None when it was not a list (parse it whole)."""
        if self._items.is_array and not (self.stopped or self.complete):
            try:
                for item, text in self._items.feed(b"", final=True):
                    self._take(item, text)
            except ValueError as exc:
                raise self._fail(f"not JSON ({exc})") from None
            self._keep_batch()
            self.complete = self._items.is_array
            self._learn()
        if not self._items.is_array:
            return None
        listing: Listing[Job] = Listing()
        places = iter(self._kept_at)
        for text in self._kept_text:
            for item in json.loads(text):
                parse_listed(Job, next(places), item, listing)
        return listing

    def _keep_batch(self) -> None:
        if self._batch:
            self._kept_text.append("[" + ",".join(self._batch) + "]")
            self._batch = []

    def _keep_raw(self, chunk: bytes) -> bool:
        if self.raw:
            self.raw += chunk
        else:  # the body so far: the decoder kept every character (no item was complete)
            self.raw += self._items._text.encode("utf-8") if self._items._text else chunk
        if len(self.raw) > self._limit:
            raise self._fail(f"the answer passed {self._limit} bytes (max_response_bytes)")
        return False

    def _take(self, item: Any, text: str) -> bool:
        """Keep ``item`` if wanted; True when the listing need not be read further."""
        created = listed_created_utc(item)
        if created is not None:
            self._order(created)
        if created is None or self.since is None or created >= self.since:
            self._batch.append(text)
            self._kept_at.append(self._items.count - 1)
            self._kept += len(text)
            self._below = 0
            return False
        self._below += 1
        return self._stop_early and self._newest_first and self._below >= 2

    def _order(self, created: datetime) -> None:
        previous = self._previous
        if previous is not None and created > previous:
            self._newest_first = False
            if self.learn:
                _newest_first[self.service] = False
        if previous is None or created < previous:
            self._distinct += 1
        self._previous = created

    def _learn(self) -> None:
        if self.learn and self.complete and self._newest_first and self._distinct >= NEWEST_FIRST_EVIDENCE:
            _newest_first[self.service] = True
