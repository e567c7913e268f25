"""The hooks' explicit endpoint methods stay in step with the table of wire facts in ``hooks/_calls.py``.

Every builder of ``_calls.ENDPOINTS`` has one method of the same name on each hook, with the builder's
parameters and the builder's answer type; runtime tools (``inspect``, ``help``, tracebacks, ``autospec``)
see real functions.
"""

from __future__ import annotations

import asyncio
import inspect
import pydoc
import traceback
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from unittest import mock

import pytest

from airflow_provider_workflowsvc.hooks import _calls
from airflow_provider_workflowsvc.hooks._calls import ENDPOINTS, READINGS, ApiCall
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ENDPOINT_NAMES,
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.models import Job

HOOKS = (WorkflowServiceHook, WorkflowServiceAsyncHook)
BUILDERS = {build.__name__: build for build in ENDPOINTS}
READING_NAMES = tuple(build.__name__ for build in READINGS)
METHOD_NAMES = (*ENDPOINT_NAMES, *READING_NAMES)
"""Every hook method built by a builder: the endpoints, and other readings of them."""
ALL_BUILDERS = {**BUILDERS, **{build.__name__: build for build in READINGS}}

NOT_ENDPOINTS = {
    WorkflowServiceHook: {
        "close",
        "get_conn",
        "get_connection_form_widgets",
        "get_ui_field_behaviour",
        "iter_workflows",
        "settings",
        "test_connection",
    },
    WorkflowServiceAsyncHook: {"aclose", "get_async_conn", "iter_workflows"},
}
"""The public methods a hook defines besides its endpoints (a new one must be named here or in ENDPOINTS)."""


class _Boom(Exception):
    pass


def _shape(function: Callable[..., Any], *, drop_self: bool) -> list[tuple[str, Any, Any, str]]:
    """Each parameter as (name, kind, default, annotation as text)."""
    params = list(inspect.signature(function).parameters.values())
    if drop_self:
        assert params[0].name == "self"
        params = params[1:]
    return [(p.name, p.kind, p.default, _text(p.annotation)) for p in params]


def _text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _answer_type(build: Callable[..., Any]) -> str:
    """The ``T`` of the builder's ``ApiCall[T]`` return annotation, as text."""
    returned = _text(inspect.signature(build).return_annotation)
    assert returned.startswith("ApiCall["), returned
    assert returned.endswith("]"), returned
    return returned[len("ApiCall[") : -1]


def _public_methods(hook: type) -> set[str]:
    return {name for name, value in vars(hook).items() if not name.startswith("_") and callable(value)} | {
        name for name, value in vars(hook).items() if isinstance(value, property) and not name.startswith("_")
    }


def _sentinel_arguments(build: Callable[..., Any]) -> tuple[list[Any], dict[str, Any]]:
    """One distinct object per parameter, passed the way the parameter takes it."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(build).parameters.values():
        value = object()
        if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            args.append(value)
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[param.name] = value
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs["some_filter"] = value
        else:  # pragma: no cover - a new kind of parameter needs a case here
            raise AssertionError(f"{build.__name__}: unexpected parameter kind {param.kind}")
    return args, kwargs


def _hook(hook_class: type) -> Any:
    return hook_class(settings=ConnectionSettings(base_url="https://svc.test/api/v1", token="tok-shape-1"))


# --------------------------------------------------------------------------------------------------
# The list and the hooks name the same endpoints


def test_the_endpoint_list_names_each_builder_once() -> None:
    assert len(set(ENDPOINTS)) == len(ENDPOINTS)
    assert tuple(BUILDERS) == ENDPOINT_NAMES


def test_every_call_builder_in_calls_is_in_the_endpoint_list() -> None:
    builders = {
        name
        for name, value in vars(_calls).items()
        if inspect.isfunction(value)
        and value.__module__ == _calls.__name__
        and _text(inspect.signature(value).return_annotation).startswith("ApiCall[")
    }
    assert builders == set(BUILDERS) | set(READING_NAMES)


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_a_hook_has_no_public_method_outside_the_endpoint_list(hook: type) -> None:
    assert _public_methods(hook) - NOT_ENDPOINTS[hook] == set(METHOD_NAMES)


def test_the_method_check_notices_a_method_missing_from_the_list() -> None:
    class Grown(WorkflowServiceHook):
        def get_job_logs(self, job_id: str) -> list[str]:
            return []

    grown = _public_methods(Grown) - NOT_ENDPOINTS[WorkflowServiceHook] - set(METHOD_NAMES)
    assert grown == {"get_job_logs"}


# --------------------------------------------------------------------------------------------------
# Signatures, answer types, coroutines, docstrings


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_sync_async_and_builder_signatures_agree(name: str) -> None:
    build = ALL_BUILDERS[name]
    expected = _shape(build, drop_self=False)
    assert _shape(getattr(WorkflowServiceHook, name), drop_self=True) == expected
    assert _shape(getattr(WorkflowServiceAsyncHook, name), drop_self=True) == expected


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_hook_methods_return_the_builders_answer_type(name: str) -> None:
    answer = _answer_type(ALL_BUILDERS[name])
    for hook in HOOKS:
        assert _text(inspect.signature(getattr(hook, name)).return_annotation) == answer, hook.__name__
        assert _text(inspect.signature(getattr(_hook(hook), name)).return_annotation) == answer


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_annotations_resolve_to_real_types(name: str) -> None:
    for hook in HOOKS:
        hints = typing.get_type_hints(getattr(hook, name))
        assert "return" in hints
        assert "ApiCall" not in repr(hints["return"])


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_only_the_async_hook_has_coroutine_functions(name: str) -> None:
    assert inspect.iscoroutinefunction(getattr(WorkflowServiceAsyncHook, name))
    assert inspect.iscoroutinefunction(getattr(_hook(WorkflowServiceAsyncHook), name))
    assert not inspect.iscoroutinefunction(getattr(WorkflowServiceHook, name))


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_docstrings_are_the_builders_on_both_hooks(name: str) -> None:
    expected = inspect.getdoc(ALL_BUILDERS[name])
    assert expected
    assert inspect.getdoc(getattr(WorkflowServiceHook, name)) == expected
    assert inspect.getdoc(getattr(WorkflowServiceAsyncHook, name)) == expected


def test_help_shows_the_signature_and_the_docstring() -> None:
    for hook, prefix in ((WorkflowServiceHook, "list_jobs("), (WorkflowServiceAsyncHook, "async list_jobs(")):
        text = pydoc.render_doc(hook.list_jobs, renderer=pydoc.plaintext)
        assert prefix in text
        assert "workflow_id: 'str | UUID | None' = None" in text
        assert "status: 'JobStatus | str | None' = None" in text
        assert "-> 'list[Job]'" in text
        assert "List jobs, optionally of one workflow" in text
    whole = pydoc.render_doc(WorkflowServiceHook, renderer=pydoc.plaintext)
    assert "get_job(self, job_id: 'str') -> 'Job'" in whole


# --------------------------------------------------------------------------------------------------
# Calls: arguments passed through, frames named after the endpoint


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_each_method_hands_its_arguments_to_its_builder_and_sends_the_result(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = ALL_BUILDERS[name]
    built: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    sent: list[Any] = []
    call = ApiCall("GET", "/x", lambda data: data)

    def fake_build(*args: Any, **kwargs: Any) -> ApiCall[Any]:
        built.append((args, kwargs))
        return call

    def sync_send(self: Any, given: ApiCall[Any]) -> Any:
        sent.append(given)
        raise _Boom

    async def async_send(self: Any, given: ApiCall[Any]) -> Any:
        sent.append(given)
        raise _Boom

    monkeypatch.setattr(_calls, name, fake_build)
    monkeypatch.setattr(WorkflowServiceHook, "_send", sync_send)
    monkeypatch.setattr(WorkflowServiceAsyncHook, "_send", async_send)
    args, kwargs = _sentinel_arguments(build)

    for hook, send in (
        (_hook(WorkflowServiceHook), "sync_send"),
        (_hook(WorkflowServiceAsyncHook), "async_send"),
    ):
        with pytest.raises(_Boom) as raised:
            result = getattr(hook, name)(*args, **kwargs)
            if inspect.iscoroutine(result):
                asyncio.run(result)
        names = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
        assert names[-2:] == [name, send]

    assert built == [(tuple(args), kwargs)] * 2
    assert sent == [call, call]


def test_a_real_failure_inside_send_names_the_endpoint_in_the_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any) -> Any:
        raise _Boom("no client in this test")

    monkeypatch.setattr(WorkflowServiceHook, "get_conn", refuse)
    with _hook(WorkflowServiceHook) as hook, pytest.raises(_Boom) as raised:
        hook.get_job_details("job-1")
    names = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert names[:3] == [
        "test_a_real_failure_inside_send_names_the_endpoint_in_the_traceback",
        "get_job_details",
        "_send",
    ]
    assert "method" not in names


# --------------------------------------------------------------------------------------------------
# autospec, as users patch a hook in their own DAG tests


def test_autospec_patch_of_a_hook_method_works_through_an_operator(dag_runner: Any) -> None:
    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.operators.jobs import CancelJobOperator

    ended = Job.model_validate(
        {
            "id": "job-autospec-1",
            "workflow_id": "0b7c6a9e-3f0e-4a51-9c7b-1d2e3f4a5b6c",
            "status": "COMPLETED",
            "created_at": datetime(2026, 1, 1, tzinfo=timezone.utc).isoformat(),
        }
    )
    with DAG("hook_autospec", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        CancelJobOperator(task_id="cancel", job_id="job-autospec-1")

    with mock.patch.object(WorkflowServiceHook, "get_job", autospec=True, return_value=ended) as get_job:
        dr = dag_runner(dag)

    ti = dr.get_task_instance("cancel")
    assert ti.state == "success"
    get_job.assert_called_once_with(mock.ANY, "job-autospec-1")
    assert isinstance(get_job.call_args.args[0], WorkflowServiceHook)
    assert ti.xcom_pull(task_ids="cancel") == {
        "job_id": "job-autospec-1",
        "cancelled": False,
        "status": "completed",
    }


def test_autospec_refuses_a_call_the_real_signature_refuses() -> None:
    with mock.patch.object(WorkflowServiceHook, "get_job", autospec=True) as get_job:
        hook = _hook(WorkflowServiceHook)
        with pytest.raises(TypeError):
            hook.get_job("job-1", "unexpected")
        hook.get_job("job-1")
    get_job.assert_called_once_with(hook, "job-1")
