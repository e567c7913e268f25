"""
Operators that create, update, delete and check source and destination connectors: one implementation per
operation serves both kinds (``kind``). A create looks the unique name up first and applies ``if_exists``, so
a DAG that runs every day does not pile up duplicates.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_workflowsvc._tasks.base import (
    IF_EXISTS_CHOICES,
    WorkflowServiceBaseOperator,
    check_uuid,
    input_error,
    interval_seconds,
    invalid_input_fails,
    is_deferred_value,
    one_of,
    rendered,
    static_str,
)
from airflow_provider_workflowsvc.exceptions import ConnectionCheckFailedError  # re-exported: raised here

if TYPE_CHECKING:
    from airflow.sdk import Context, XComArg

    from airflow_provider_workflowsvc._tasks.resources import Difference
    from airflow_provider_workflowsvc.connectors_catalog import Kind
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import ConnectionCheck, DestinationConnector, SourceConnector

    Connector = SourceConnector | DestinationConnector

__all__ = [
    "ConnectionCheckFailedError",
    "CreateDestinationConnectorOperator",
    "CreateSourceConnectorOperator",
    "DeleteDestinationConnectorOperator",
    "DeleteSourceConnectorOperator",
    "DestinationConnectionCheckOperator",
    "SourceConnectionCheckOperator",
    "UpdateDestinationConnectorOperator",
    "UpdateSourceConnectorOperator",
]


@dataclass(frozen=True)
class _Connectors:
    """The hook's endpoints for one kind of connector, as bound methods (typed, for mypy)."""

    list: Callable[[], Sequence[Connector]]
    get: Callable[[str], Connector]
    create: Callable[[str, str, Any], Connector]
    update: Callable[[str, Any, str | None], Connector]
    delete: Callable[[str], None]
    start_check: Callable[[str], ConnectionCheck]
    get_check: Callable[[str], ConnectionCheck]

    @classmethod
    def of(cls, hook: WorkflowServiceHook, kind: Kind) -> _Connectors:
        """Return the endpoints of ``hook`` for source or destination connectors."""
        names = {
            "list": f"list_{kind}s",
            "get": f"get_{kind}",
            "create": f"create_{kind}",
            "update": f"update_{kind}",
            "delete": f"delete_{kind}",
            "start_check": f"start_{kind}_connection_check",
            "get_check": f"get_{kind}_connection_check",
        }
        return cls(**{field: getattr(hook, name) for field, name in names.items()})


def _check_config(config: Any) -> None:
    """Refuse, at DAG parse time, a config that is neither a mapping, a config model nor a template."""
    if config is None or not (
        isinstance(config, Mapping) or hasattr(config, "model_dump") or is_deferred_value(config)
    ):
        raise input_error(
            f"config must be a dict or a config model (AzureSourceConfig, GenericConfig, ...), "
            f"got {type(config).__name__}"
        )


def _check_vocabulary(operator: _ConnectorOperator, connector_type: Any, config: Any) -> None:
    """
    At DAG parse time: warn about a connector type the provider does not know (it is sent as given),
    and check a dict config of a known type against the live docs' settings (missing required settings
    and URLs that are not URLs fail; unknown settings warn). Templates are checked once rendered.
    """
    if connector_type is None or is_deferred_value(connector_type):
        return
    if not isinstance(connector_type, str) or not connector_type.strip():
        what = f"{operator.kind} connector type"
        raise input_error(f"{what} must be a non-empty string, got {connector_type!r}")
    from airflow_provider_workflowsvc.connectors_catalog import check_config, known_or_warned

    if not known_or_warned(operator.kind, connector_type, operator.log.warning):
        return
    if isinstance(config, Mapping) and not is_deferred_value(list(config)):
        try:
            warnings = check_config(operator.kind, connector_type, config, pending=is_deferred_value)
        except ValueError as exc:
            raise input_error(str(exc)) from None
        for warning in warnings:
            operator.log.warning("%s", warning)


class _ConnectorOperator(WorkflowServiceBaseOperator):
    """An operator on one kind of connector (``kind`` is set by each public subclass)."""

    kind: ClassVar[Kind]
    ui_color = "#e8f0fe"

    def __init_subclass__(cls, kind: Kind | None = None, **kwargs: Any) -> None:
        """Set a public operator's ``kind``; put the shared description and parameters after its summary."""
        super().__init_subclass__(**kwargs)
        if kind is None:  # a base of the public operators
            return
        cls.kind = kind
        _summary, _, details = inspect.cleandoc(cls.__bases__[0].__doc__ or "").partition("\n\n")
        cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\n{details}".strip()

    @property
    def connectors(self) -> _Connectors:
        """The hook's endpoints for this operator's kind of connector."""
        return _Connectors.of(self.hook, self.kind)

    @property
    def what(self) -> str:
        """``source connector`` or ``destination connector``, for messages."""
        return f"{self.kind} connector"


class _ConfigOperator(_ConnectorOperator):
    """A connector operator that sends a config (which may hold secrets)."""

    secret_fields: ClassVar[Sequence[str]] = ("config",)
    template_fields_renderers: ClassVar[dict[str, str]] = {"config": "json"}

    def mask_secret_fields(self) -> None:
        """Register the config's strings but the known non-secret settings of its type (and URI secrets)."""
        from airflow_provider_workflowsvc._tasks.secrets import mask_fields

        mask_fields(self, config=True)


class _CreateConnectorOperator(_ConfigOperator):
    """
    Create a connector, or reuse / update / refuse the one that already has its name.

    :param name: the connector's unique name.
    :param connector_type: the connector type (``confluence``, ``azure``, ``astradb``, ...).
    :param config: the type's settings: a config model (``ConfluenceSourceConfig``, ...) or a dict.
        Templates are rendered inside both; secret values are masked in logs and rendered fields.
    :param if_exists: when a connector with this name exists: ``reuse`` it as is (default; each
        declared setting it has otherwise is logged as a warning with both values, URL credentials as
        ``***``, and the declared secret settings are named as not compared: the service does not
        give secrets back), ``update`` its config (every declared setting is sent; each difference
        seen is logged), or ``fail``. An existing connector of another type always fails the task.
    :return: the connector id (XCom).
    """

    template_fields: Sequence[str] = ("name", "connector_type", "config")

    def __init__(
        self,
        *,
        name: str,
        connector_type: str,
        config: Any,
        if_exists: str = "reuse",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name, self.connector_type, self.config = name, connector_type, config
        self.if_exists = one_of(if_exists, IF_EXISTS_CHOICES, "if_exists")
        if static_str(name) is not None and not name.strip():
            raise input_error("name must not be empty")
        _check_config(config)
        _check_vocabulary(self, connector_type, config)

    def execute(self, context: Context) -> str:
        from airflow_provider_workflowsvc._tasks.resources import UniqueName
        from airflow_provider_workflowsvc.models import connector_type_name

        self.mask_secret_fields()
        with invalid_input_fails():
            body = self._valid_body(self.name, self.connector_type, self.config)
        name, connector_type = body.name, connector_type_name(body.type)
        connectors = self.connectors
        with self.closing_hook():
            return UniqueName(
                what=self.what,
                name=name,
                if_exists=self.if_exists,
                find=connectors.list,
                create=lambda: connectors.create(name, connector_type, body.config),
                update=lambda existing: connectors.update(str(existing.id), body.config, connector_type),
                mismatch=lambda existing: _type_mismatch(existing.type, connector_type),
                drift=lambda existing: config_drift(existing.config, self.config, connector_type),
                verify_update=False,
                log=self.log,
            ).ensure()

    def _valid_body(self, name: str, connector_type: str, config: Any) -> Any:
        """Validate the create body as a model; an invalid one fails the task before any request."""
        from airflow_provider_workflowsvc.exceptions import validate_input
        from airflow_provider_workflowsvc.models import CreateDestinationConnector, CreateSourceConnector

        model = CreateSourceConnector if self.kind == "source" else CreateDestinationConnector
        body = {"name": name, "type": connector_type, "config": config}
        return validate_input(model, self.what, body)


def config_drift(current: Mapping[str, Any], config: Any, connector_type: str) -> list[Difference]:
    """
    Every declared setting of ``config`` the connector's ``current`` config has otherwise, with both values
    (compared with URL credentials as ``***``); a setting that holds secrets by the masking rule, or one the
    service gives back as a secret, is listed as not compared (:func:`.resources.unseen_secret`).
    """
    from pydantic import SecretStr

    from airflow_provider_workflowsvc._tasks.resources import NOT_SET, unseen_secret
    from airflow_provider_workflowsvc._tasks.secrets import (
        plain_config_keys,
        plain_data,
        without_url_secrets,
    )

    declared = plain_data(config)
    if not isinstance(declared, Mapping):
        return []
    plain = plain_config_keys(connector_type)
    differences: list[Difference] = []
    for key, wanted in declared.items():
        have = current.get(key, NOT_SET)
        if (key not in plain and _holds(str, wanted)) or _holds(SecretStr, have):
            differences.append(unseen_secret(str(key)))
        elif without_url_secrets(have) != without_url_secrets(wanted):
            differences.append((str(key), have, wanted))
    return differences


def _holds(kind: type, value: Any) -> bool:
    """Whether ``value`` is, or holds (nested in mappings and lists), a value of ``kind``."""
    if isinstance(value, kind):
        return True
    if isinstance(value, Mapping):
        return any(_holds(kind, v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_holds(kind, v) for v in value)


def _type_mismatch(existing_type: str, wanted_type: str) -> str | None:
    """Why a connector of ``existing_type`` cannot stand for one of ``wanted_type``, or None."""
    from airflow_provider_workflowsvc.connectors_catalog import normalized

    if normalized(existing_type) == normalized(wanted_type):
        return None
    return f"its type is {existing_type!r}, not {wanted_type!r} (a connector's type cannot change)"


class _UpdateConnectorOperator(_ConfigOperator):
    """
    Replace a connector's config (every setting is sent; name and type cannot change).

    :param connector_id: the connector's id.
    :param config: the full new config: a config model or a dict (templates rendered inside).
    :param connector_type: the connector's type; when given the config is validated before any
        request, otherwise the connector is read first to learn its type.
    :return: the connector id (XCom).
    """

    template_fields: Sequence[str] = ("connector_id", "connector_type", "config")

    def __init__(
        self, *, connector_id: str | XComArg, config: Any, connector_type: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.connector_id, self.config, self.connector_type = rendered(connector_id), config, connector_type
        check_uuid(connector_id, "connector_id")
        _check_config(config)
        _check_vocabulary(self, connector_type, config)

    def execute(self, context: Context) -> str:
        self.mask_secret_fields()
        with self.closing_hook(), invalid_input_fails():
            connector_type = self.connector_type or self._current_type()
            updated = self.connectors.update(self.connector_id, self.config, connector_type)
        self.log.info("Updated %s %r (%s)", self.what, updated.name, updated.id)
        return str(updated.id)

    def _current_type(self) -> str:
        connector = self.connectors.get(self.connector_id)
        self.log.info("%s %s has type %r", self.what.capitalize(), connector.id, connector.type)
        return str(connector.type)


class _DeleteConnectorOperator(_ConnectorOperator):
    """
    Delete a connector.

    :param connector_id: the connector's id.
    :param missing_ok: succeed when the connector does not exist (already deleted); default True, so
        a teardown task can run again.
    """

    template_fields: Sequence[str] = ("connector_id",)

    def __init__(self, *, connector_id: str | XComArg, missing_ok: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connector_id, self.missing_ok = rendered(connector_id), missing_ok
        check_uuid(connector_id, "connector_id")

    def execute(self, context: Context) -> None:
        from airflow_provider_workflowsvc._tasks.resources import delete_resource

        with self.closing_hook():
            delete_resource(
                self.connectors.delete,
                self.connector_id,
                what=self.what,
                missing_ok=self.missing_ok,
                log=self.log,
                get=self.connectors.get,
            )


class _ConnectionCheckOperator(_ConnectorOperator):
    """
    Start a connection check of a connector and wait for its result.

    The task fails with the service's reason when the check reports failure, and when no result
    arrives within ``timeout``; a status the provider does not know never counts as success.
    ``timeout`` bounds the whole task: every request and retry ends by then.

    :param connector_id: the connector's id.
    :param poll_interval: seconds between two reads of the check's status (at least
        ``[workflowsvc] min_poll_interval``, 1 s by default).
    :param timeout: seconds to wait for a result.
    :return: the connector id (XCom), so downstream tasks can depend on a checked connector.
    """

    template_fields: Sequence[str] = ("connector_id",)

    def __init__(
        self,
        *,
        connector_id: str | XComArg,
        poll_interval: float = 5.0,
        timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if timeout <= 0:
            raise input_error(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.connector_id, self.timeout = rendered(connector_id), timeout
        check_uuid(connector_id, "connector_id")

    def execute(self, context: Context) -> str:
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceConnectionError
        from airflow_provider_workflowsvc.hooks.workflowsvc import deadline

        at = time.time() + self.timeout
        with self.closing_hook(), deadline(at):
            try:
                with invalid_input_fails():
                    started = self.connectors.start_check(self.connector_id)
            except WorkflowServiceConnectionError as exc:
                raise self._no_result_after(exc, at, "the start request did not finish") from exc
            self.log.info("Started a connection check of %s %s", self.what, self.connector_id)
            check = self._wait(started, at)
        return self._result(check)

    def _wait(self, check: ConnectionCheck, at: float) -> ConnectionCheck:
        """Poll until the check started as ``check`` reports success or failure, or ``at`` passes."""
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceConnectionError

        started_id = check.id
        while not (check.status.is_terminal and _same_check(started_id, check)):
            remaining = at - time.time()
            if remaining <= 0:
                raise self._no_result(f"last status: {check.status.value}")
            self.log.info(
                "Connection check status: %s; next poll in %g s",
                check.status.value,
                min(self.poll_interval, remaining),
            )
            time.sleep(min(self.poll_interval, remaining))
            try:
                check = self.connectors.get_check(self.connector_id)
            except WorkflowServiceConnectionError as exc:
                raise self._no_result_after(exc, at, f"last status: {check.status.value}") from exc
        return check

    def _no_result(self, why: str) -> ConnectionCheckFailedError:
        return ConnectionCheckFailedError(
            f"connection check of {self.what} {self.connector_id} gave no result within "
            f"{self.timeout:g} s ({why})",
            connector_id=str(self.connector_id),
        )

    def _no_result_after(self, exc: Exception, at: float, why: str) -> Exception:
        """``exc`` itself when it failed before ``at``; else the timeout it stands for."""
        return exc if time.time() < at else self._no_result(why)

    def _result(self, check: ConnectionCheck) -> str:
        from airflow_provider_workflowsvc._url_secrets import mask_url_secrets
        from airflow_provider_workflowsvc.models import ConnectionCheckStatus

        if check.status is not ConnectionCheckStatus.SUCCESS:
            reason = mask_url_secrets(check.reason) if check.reason else None  # the service's text
            raise ConnectionCheckFailedError(
                f"connection check of {self.what} {self.connector_id} failed: "
                f"{reason or 'the service gave no reason'}",
                connector_id=str(self.connector_id),
                reason=reason,
            )
        self.log.info("Connection check of %s %s succeeded", self.what, self.connector_id)
        return str(self.connector_id)


def _same_check(started_id: str | None, check: ConnectionCheck) -> bool:
    """Whether ``check`` is the one started (a read can still return the previous check's result)."""
    return started_id is None or check.id is None or check.id == started_id


class CreateSourceConnectorOperator(_CreateConnectorOperator, kind="source"):
    """Create a source connector, or reuse / update / refuse the one that already has its name."""


class CreateDestinationConnectorOperator(_CreateConnectorOperator, kind="destination"):
    """Create a destination connector, or reuse / update / refuse the one that already has its name."""


class UpdateSourceConnectorOperator(_UpdateConnectorOperator, kind="source"):
    """Replace a source connector's config (every setting is sent; name and type cannot change)."""


class UpdateDestinationConnectorOperator(_UpdateConnectorOperator, kind="destination"):
    """Replace a destination connector's config (every setting is sent; name and type cannot change)."""


class DeleteSourceConnectorOperator(_DeleteConnectorOperator, kind="source"):
    """Delete a source connector."""


class DeleteDestinationConnectorOperator(_DeleteConnectorOperator, kind="destination"):
    """Delete a destination connector."""


class SourceConnectionCheckOperator(_ConnectionCheckOperator, kind="source"):
    """Start a connection check of a source connector and wait for its result."""


class DestinationConnectionCheckOperator(_ConnectionCheckOperator, kind="destination"):
    """Start a connection check of a destination connector and wait for its result."""
