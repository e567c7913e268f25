"""
Each endpoint is declared once (``hooks/_calls.py``'s ``Endpoints``, the job events' in ``_event_calls.py``)
and each hook has it as a real method.

Every endpoint of ``_event_calls.ENDPOINTS`` is one method of the same name on each hook, with the endpoint's
parameters, answer type and docstring; runtime tools (``inspect``, ``help``, tracebacks, ``autospec``)
see real functions, and a type checker sees each method typed (sync: the answer; async: an awaitable).
"""

from __future__ import annotations

import asyncio
import inspect
import pydoc
import subprocess
import sys
import traceback
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from unittest import mock

import pytest

from airflow_provider_workflowsvc.hooks._calls import Endpoint
from airflow_provider_workflowsvc.hooks._event_calls import ENDPOINTS, JobEventEndpoints as Endpoints
from airflow_provider_workflowsvc.hooks._exchange import ApiCall
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ENDPOINT_NAMES,
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.models import Job

HOOKS = (WorkflowServiceHook, WorkflowServiceAsyncHook)
BUILDERS = {each.name: each.build for each in ENDPOINTS}

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


def _endpoint(name: str) -> Endpoint[Any, Any]:
    found = inspect.getattr_static(Endpoints, name)
    assert isinstance(found, Endpoint)
    return found


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


def test_the_endpoint_list_names_each_endpoint_once() -> None:
    assert len({each.name for each in ENDPOINTS}) == len(ENDPOINTS)
    assert tuple(BUILDERS) == ENDPOINT_NAMES
    assert all(
        _text(inspect.signature(b).return_annotation).startswith("ApiCall[") for b in BUILDERS.values()
    )


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_each_hook_holds_a_real_function_per_endpoint(hook: type) -> None:
    for name in ENDPOINT_NAMES:
        method = inspect.getattr_static(hook, name)
        assert inspect.isfunction(method), name
        assert (method.__name__, method.__qualname__) == (name, f"{hook.__qualname__}.{name}")
        assert method.__module__ == hook.__module__


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.__name__)
def test_a_hook_has_no_public_method_outside_the_endpoint_list(hook: type) -> None:
    assert _public_methods(hook) - NOT_ENDPOINTS[hook] == set(ENDPOINT_NAMES)


def test_the_method_check_notices_a_method_missing_from_the_list() -> None:
    class Grown(WorkflowServiceHook):
        def get_job_logs(self, job_id: str) -> list[str]:
            return []

    assert _public_methods(Grown) - NOT_ENDPOINTS[WorkflowServiceHook] == {"get_job_logs"}


def test_a_subclass_keeps_the_endpoint_methods_it_overrides_and_inherits_the_others() -> None:
    class Mine(WorkflowServiceHook):
        def get_job(self, job_id: str) -> Any:
            return "mine"

    hook = Mine(settings=ConnectionSettings(base_url="https://svc.test/api/v1", token="tok-shape-1"))
    assert hook.get_job("j1") == "mine"
    assert "get_job_details" not in vars(Mine)
    assert Mine.get_job_details is WorkflowServiceHook.get_job_details


# --------------------------------------------------------------------------------------------------
# Signatures, answer types, coroutines, docstrings


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_sync_async_and_builder_signatures_agree(name: str) -> None:
    build = BUILDERS[name]
    expected = _shape(build, drop_self=False)
    assert _shape(getattr(WorkflowServiceHook, name), drop_self=True) == expected
    assert _shape(getattr(WorkflowServiceAsyncHook, name), drop_self=True) == expected


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_hook_methods_return_the_builders_answer_type(name: str) -> None:
    answer = _answer_type(BUILDERS[name])
    for hook in HOOKS:
        assert _text(inspect.signature(getattr(hook, name)).return_annotation) == answer, hook.__name__
        assert _text(inspect.signature(getattr(_hook(hook), name)).return_annotation) == answer


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_annotations_resolve_to_real_types(name: str) -> None:
    for hook in HOOKS:
        hints = typing.get_type_hints(getattr(hook, name))
        assert "return" in hints
        assert "ApiCall" not in repr(hints["return"])


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_only_the_async_hook_has_coroutine_functions(name: str) -> None:
    assert inspect.iscoroutinefunction(getattr(WorkflowServiceAsyncHook, name))
    assert inspect.iscoroutinefunction(getattr(_hook(WorkflowServiceAsyncHook), name))
    assert not inspect.iscoroutinefunction(getattr(WorkflowServiceHook, name))


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_docstrings_are_the_builders_on_both_hooks(name: str) -> None:
    expected = inspect.getdoc(BUILDERS[name])
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


@pytest.mark.parametrize("name", ENDPOINT_NAMES)
def test_each_method_hands_its_arguments_to_its_builder_and_sends_the_result(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = BUILDERS[name]
    built: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    sent: list[Any] = []
    call = ApiCall("GET", "/x", lambda data: data)

    def fake_build(*args: Any, **kwargs: Any) -> ApiCall[Any]:
        built.append((args, kwargs))
        return call

    def sync_send(self: Any, given: ApiCall[Any], **options: Any) -> Any:
        sent.append(given)
        raise _Boom

    async def async_send(self: Any, given: ApiCall[Any], **options: Any) -> Any:
        sent.append(given)
        raise _Boom

    monkeypatch.setattr(_endpoint(name), "build", fake_build)
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
        "send",
    ]
    assert not {"send_sync", "send_async", "method"} & set(names)


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


# --------------------------------------------------------------------------------------------------
# What a type checker sees, as users call the hooks

TYPED_USE = """
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

def sync(hook: WorkflowServiceHook) -> None:
    reveal_type(hook.get_workflow("w"))
    reveal_type(hook.list_jobs(status="completed"))
    hook.get_job(job_id=1)

async def aio(hook: WorkflowServiceAsyncHook) -> None:
    reveal_type(await hook.get_workflow("w"))
    reveal_type(hook.get_job_details)
    await hook.cancel_job("j", "extra")
"""


def test_a_type_checker_sees_each_endpoint_typed_on_both_hooks(tmp_path: Any) -> None:
    (tmp_path / "use.py").write_text(TYPED_USE)
    command = [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", "use.py"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    lines = [line.split(": ", 2)[2] for line in result.stdout.splitlines() if line.startswith("use.py:")]
    models = "airflow_provider_workflowsvc.models"
    assert lines == [
        f'Revealed type is "{models}.Workflow"',
        f'Revealed type is "list[{models}.Job]"',
        'Argument "job_id" has incompatible type "int"; expected "str"  [arg-type]',
        f'Revealed type is "{models}.Workflow"',
        f'Revealed type is "def (job_id: str) -> typing.Awaitable[{models}.JobDetails]"',
        "Too many arguments  [call-arg]",
    ], result.stdout
