"""
Error answers of the emulated API: ``{"detail": "..."}`` and FastAPI-style validation lists.

Validation messages never carry input values (they may be secrets): pydantic's ``input`` and ``ctx`` are
dropped and any message that would quote the input is replaced by a generic one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

__all__ = ["ApiError", "InvalidRequest", "describe_errors", "render_errors"]

_GENERIC_MESSAGES = {
    "uuid_parsing": "Input should be a valid UUID",
    "uuid_type": "Input should be a valid UUID",
    "json_invalid": "Invalid JSON",
    "url_parsing": "Input should be a valid URL",
    "datetime_parsing": "Input should be a valid datetime",
    "datetime_from_date_parsing": "Input should be a valid datetime",
}
_MIN_ECHO = 3


class ApiError(Exception):
    """An error answer with a status code and a ``detail`` string."""

    def __init__(self, status_code: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status_code, self.detail, self.headers = status_code, detail, dict(headers or {})


class InvalidRequest(Exception):
    """A 422 answer: a list of ``{"loc", "msg", "type"}`` errors."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(str(e["msg"]) for e in errors))
        self.errors = errors

    @classmethod
    def one(cls, loc: Sequence[str | int], msg: str, type_: str = "value_error") -> InvalidRequest:
        return cls([{"loc": list(loc), "msg": msg, "type": type_}])

    @classmethod
    def from_pydantic(cls, exc: ValidationError, prefix: Sequence[str | int] = ()) -> InvalidRequest:
        return cls(render_errors(exc.errors(include_url=False), prefix))


def render_errors(
    errors: Iterable[Mapping[str, Any]], prefix: Sequence[str | int] = ()
) -> list[dict[str, Any]]:
    """Pydantic/FastAPI error dicts as ``loc``/``msg``/``type`` only, with messages that echo nothing."""
    return [
        {
            "loc": [*prefix, *(p for p in err.get("loc", ()) if not _is_union_tag(p))],
            "msg": _safe_message(err),
            "type": str(err.get("type", "value_error")),
        }
        for err in errors
    ]


def describe_errors(errors: Iterable[Mapping[str, Any]]) -> str:
    """Join rendered errors into one line: ``loc.path: message; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)


def _is_union_tag(part: Any) -> bool:
    text = str(part)
    return text.startswith("function-") or text[:1].isupper()


def _safe_message(err: Mapping[str, Any]) -> str:
    kind = str(err.get("type", ""))
    message = _GENERIC_MESSAGES.get(kind) or str(err.get("msg", "Invalid value"))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if any(text in message for text in _strings(err.get("input"))):
        return "Invalid value"
    return message


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Return the string leaves of an input long enough to be recognisable in a message."""
    if depth > 4:
        return
    if isinstance(value, str) and len(value) >= _MIN_ECHO:
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value[:50]:
            yield from _strings(item, depth + 1)
