"""
Named resources (connectors, workflows): create-or-reuse by unique name, and a delete that verifies
what it did. Imported only when a task runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from airflow_provider_workflowsvc._tasks.base import invalid_input_fails
from airflow_provider_workflowsvc.exceptions import (  # re-exported: raised here
    ExistingResourceError,
    WorkflowServiceConflictError,
    WorkflowServiceConnectionError,
    WorkflowServiceNotFoundError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
)

AMBIGUOUS_CREATE_ERRORS = (
    WorkflowServiceServerError,
    WorkflowServiceConnectionError,
    WorkflowServiceResponseError,
)
"""Create failures after which the resource may exist all the same."""


def delete_resource(
    delete: Callable[[str], Any],
    resource_id: str,
    *,
    what: str,
    missing_ok: bool,
    log: logging.Logger | Any,
    get: Callable[[str], Any],
) -> None:
    """
    Delete a resource; one that does not exist is success when ``missing_ok``. Verified, not assumed: after an
    ambiguous failure the resource is read (gone means deleted); with ``missing_ok=False`` it is read first,
    so a 404 from the DELETE afterwards means a retried DELETE found it gone.
    """
    if not missing_ok:
        missing = _not_found(get, resource_id)
        if missing is not None:
            raise missing
    try:
        with invalid_input_fails():
            delete(resource_id)
    except WorkflowServiceNotFoundError:
        if missing_ok:
            log.info(
                "%s %s does not exist (already deleted?); nothing to delete", what.capitalize(), resource_id
            )
            return
        log.info("%s %s is gone (a retried DELETE found it deleted)", what.capitalize(), resource_id)
    except AMBIGUOUS_CREATE_ERRORS as exc:
        if _not_found(get, resource_id, after=exc) is None:
            raise
        log.warning("The DELETE of %s %s failed (%s), but it is gone: deleted", what, resource_id, exc)
    log.info("Deleted %s %s", what, resource_id)


def _not_found(
    get: Callable[[str], Any], resource_id: str, after: Exception | None = None
) -> WorkflowServiceNotFoundError | None:
    """Return the 404 reading the resource gives, None when it exists; re-raise ``after`` if reading fails."""
    try:
        with invalid_input_fails():
            get(resource_id)
    except WorkflowServiceNotFoundError as exc:
        return exc
    except Exception as exc:
        if after is not None:
            raise after from exc
        raise
    return None


class Named(Protocol):
    """A resource with an id and a unique name (connector, workflow)."""

    @property
    def id(self) -> Any: ...

    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=Named)

Difference = tuple[str, Any, Any]
"""A setting in which an existing resource differs from the request: (setting, current, wanted)."""


class _Shown:
    """A value a difference line shows as ``text`` (never a setting's value)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


NOT_SET: Any = _Shown("(not set)")
"""The current value of a declared setting the existing resource does not have."""
_UNSEEN: Any = _Shown("(a secret, not given back)")


def unseen_secret(setting: str) -> Difference:
    """Return the difference of a declared secret, not compared: the service does not give secrets back."""
    return (setting, _UNSEEN, _Shown("***"))


def _seen(differences: Sequence[Difference]) -> tuple[list[Difference], list[str]]:
    """Split ``differences`` into those seen and the names of the secrets that could not be compared."""
    seen = [d for d in differences if d[1] is not _UNSEEN]
    return seen, [d[0] for d in differences if d[1] is _UNSEEN]


def difference_lines(differences: Sequence[Difference], between: str, prefix: str = "") -> str:
    """
    One indented line per difference: ``setting: <prefix>current<between>wanted`` (the credentials of
    any URL in a value shown as ``***``).
    """
    from airflow_provider_workflowsvc._tasks.secrets import without_url_secrets

    return "".join(
        f"\n  {setting}: {prefix}{without_url_secrets(current)!r}{between}{without_url_secrets(wanted)!r}"
        for setting, current, wanted in differences
    )


def only_one_named(candidates: Sequence[R], name: str, what: str) -> R | None:
    """
    Return the one of ``candidates`` named exactly ``name``, None when there is none; several fail, and so
    does an unreadable listed item (``skipped``) of that name: it may be the one meant.
    """
    skipped = getattr(candidates, "skipped", ())
    unreadable = [item for item in skipped if isinstance(item, dict) and item.get("name") == name]
    if unreadable:
        raise ExistingResourceError(
            f"a {what} named {name!r} exists but the provider cannot read it "
            f"(id {unreadable[0].get('id')!r}); see the warning above; nothing was chosen or created"
        )
    matches = [r for r in candidates if r.name == name]
    if len(matches) > 1:
        ids = ", ".join(str(r.id) for r in matches)
        raise ExistingResourceError(
            f"{len(matches)} {what}s are named {name!r} ({ids}); names should be unique, "
            "delete the extra ones or use another name"
        )
    return matches[0] if matches else None


def _service_vs_task(differences: Sequence[Difference]) -> str:
    return difference_lines(differences, ", the task sets ", prefix="the service has ")


@dataclass
class UniqueName(Generic[R]):
    """
    Create a resource whose name is unique, or apply ``if_exists`` (``reuse``, ``update``, ``fail``) to the
    one that has the name (``what``: the resource in messages). ``find`` lists the resources that may carry
    the name; ``mismatch`` says why an existing one cannot stand for the request (another type), or None;
    ``drift`` lists each setting an existing one has otherwise (both values; a declared secret as
    :func:`unseen_secret`), warned on reuse and logged on update; ``verify_update`` fails an update whose
    answer still differs (off where the service may give settings back otherwise: connector configs).
    """

    what: str
    name: str
    if_exists: str
    find: Callable[[], Sequence[R]]
    create: Callable[[], R]
    update: Callable[[R], Any]
    mismatch: Callable[[R], str | None]
    log: logging.Logger | Any
    drift: Callable[[R], list[Difference]]
    verify_update: bool = True

    def ensure(self) -> str:
        """Return the id of the resource named ``name``, after creating it or applying ``if_exists``."""
        existing = self.lookup()
        if existing is not None:
            return self.apply_if_exists(existing)
        self.log.info("No %s named %r exists; creating it", self.what, self.name)
        try:
            created = self.create()
        except WorkflowServiceConflictError as exc:
            return self._after_conflict(exc)
        except AMBIGUOUS_CREATE_ERRORS as exc:
            return self._after_ambiguous_failure(exc)
        self.log.info("Created %s %r (%s)", self.what, self.name, created.id)
        return str(created.id)

    def lookup(self) -> R | None:
        """Find the one resource named exactly ``name``, None when there is none; more is an error."""
        return only_one_named(self.find(), self.name, self.what)

    def apply_if_exists(self, existing: R) -> str:
        """Reuse, update or refuse ``existing`` as ``if_exists`` says; return its id."""
        label = f"{self.what} {self.name!r} ({existing.id})"
        reason = self.mismatch(existing)
        if reason is not None:
            raise ExistingResourceError(f"{label} already exists but {reason}; use another name")
        if self.if_exists == "fail":
            raise ExistingResourceError(f"{label} already exists and if_exists='fail'")
        if self.if_exists == "update":
            self._update(existing, label)
        else:
            self.log.info("Found existing %s; reusing it as is (if_exists='reuse')", label)
            self._warn_drift(existing, label)
        return str(existing.id)

    def _update(self, existing: R, label: str) -> None:
        """
        Apply the requested settings, log each difference (before → after) and check the answer: a
        setting the service did not take fails the task.
        """
        differences, _ = _seen(self.drift(existing))
        self.log.info(
            "Found existing %s; updating it to the task's settings (if_exists='update'), %s",
            label,
            f"{len(differences)} difference(s):{difference_lines(differences, ' → ')}"
            if differences
            else "no difference seen (every declared setting is sent all the same)",
        )
        updated = self.update(existing)
        kept = _seen(self.drift(updated))[0] if updated is not None and self.verify_update else []
        if kept:
            raise ExistingResourceError(
                f"{label} was updated, but the service's answer still differs from the task's settings "
                f"in {len(kept)} setting(s):{_service_vs_task(kept)}"
            )
        self.log.info(
            "Updated %s%s",
            label,
            f"; now as declared:{difference_lines(differences, ' → ')}" if differences else "",
        )

    def _warn_drift(self, existing: R, label: str) -> None:
        differences, secrets = _seen(self.drift(existing))
        if secrets:
            self.log.info(
                "%s: the task's secret setting(s) %s cannot be compared (the service does not give secrets "
                "back); they are NOT applied (if_exists='reuse'; if_exists='update' sends them)",
                label,
                ", ".join(secrets),
            )
        if differences:
            lines = _service_vs_task(differences)
            self.log.warning(
                "%s differs from the task's settings in %d setting(s), NOT changed (if_exists='reuse'; "
                "use if_exists='update' to apply them):%s",
                label,
                len(differences),
                lines,
            )

    def _after_conflict(self, exc: WorkflowServiceConflictError) -> str:
        self.log.info("Create of %s %r answered 409 (%s); looking it up again", self.what, self.name, exc)
        existing = self.lookup()
        if existing is None:
            raise exc
        return self.apply_if_exists(existing)

    def _after_ambiguous_failure(self, exc: Exception) -> str:
        """Look the name up after an ambiguous create: a resource found now is taken as the one created."""
        self.log.warning(
            "Create of %s %r failed (%s) and may have reached the service; looking it up",
            self.what,
            self.name,
            exc,
        )
        try:
            existing = self.lookup()
        except Exception as lookup_exc:
            raise exc from lookup_exc
        if existing is None:
            raise exc
        if self.mismatch(existing) is not None:
            return self.apply_if_exists(existing)
        self.log.warning(
            "Found %s %r (%s) after the failed create; taking it as the one created",
            self.what,
            self.name,
            existing.id,
        )
        return str(existing.id)
