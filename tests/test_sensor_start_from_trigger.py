"""WorkflowJobSensor on a known job starts in the triggerer (Airflow 3.3+): the scheduler's arguments,
the triggerer's rendering of the templated job id, the trigger's deadline (the real scheduler: e2e)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest.mock import MagicMock

import pytest
from airflow.sdk import DAG, Asset

from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor
from airflow_provider_workflowsvc.triggers.job import DEFERRAL_BACKSTOP, WorkflowJobTrigger

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
TEMPLATED = "{{ params.job }}"


def sensor(**kwargs: Any) -> WorkflowJobSensor:
    with DAG("wfsvc_start_from_trigger", schedule=None, start_date=START, params={"job": "job-42"}):
        return WorkflowJobSensor(task_id="wait", **{"deferrable": True, "poke_interval": 3, **kwargs})


@pytest.mark.airflow_min("3.3", reason="the triggerer renders a start-from-trigger task's fields from 3.3")
def test_a_deferrable_sensor_on_a_job_starts_in_the_triggerer() -> None:
    task = sensor(job_id=TEMPLATED, timeout=100, workflowsvc_conn_id="other")
    assert task.start_from_trigger is True
    args = task.start_trigger_args
    assert args is not None
    assert args.trigger_cls == "airflow_provider_workflowsvc.triggers.job.WorkflowJobTrigger"
    assert args.next_method == "execute_complete"
    assert args.timeout == timedelta(seconds=100 + DEFERRAL_BACKSTOP)
    assert args.trigger_kwargs == {
        "job_id": TEMPLATED,
        "deadline": None,
        "poll_interval": 3.0,
        "workflowsvc_conn_id": "other",
        "cancel_on_kill": False,
        "end_on_success": True,  # a job that passes ends the task in the triggerer
        "fail_on_failed_files": True,
        "push_summary": True,
    }
    flags = sensor(job_id="j", fail_on_failed_files=False, do_xcom_push=False).start_trigger_args
    assert flags is not None
    assert flags.trigger_kwargs["fail_on_failed_files"] is False
    assert flags.trigger_kwargs["push_summary"] is False
    # a task ended by the triggerer emits no outlet asset events: a sensor with outlets ends in a worker
    with_outlets = sensor(job_id="j", outlets=[Asset("s3://bucket/out")]).start_trigger_args
    assert with_outlets is not None
    assert with_outlets.trigger_kwargs["end_on_success"] is False
    # one timeout whatever the mode: an execution_timeout shorter than timeout bounds the wait too
    bounded = sensor(job_id="j", timeout=100, execution_timeout=timedelta(seconds=30)).start_trigger_args
    assert bounded is not None
    assert bounded.timeout == timedelta(seconds=30 + DEFERRAL_BACKSTOP)
    longer = sensor(job_id="j", timeout=100, execution_timeout=timedelta(hours=1)).start_trigger_args
    assert longer is not None
    assert longer.timeout == timedelta(seconds=100 + DEFERRAL_BACKSTOP)


@pytest.mark.airflow_min("3.3", reason="the triggerer renders a start-from-trigger task's fields from 3.3")
def test_the_serialized_dag_keeps_it_and_the_trigger_renders_the_job_id_as_the_triggerer_does() -> None:
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.serialization.serialized_objects import DagSerialization

    task = sensor(job_id=TEMPLATED)
    assert task.dag is not None
    restored = DagSerialization.from_dict(DagSerialization.to_dict(task.dag)).get_task("wait")
    assert restored.start_from_trigger is True
    assert restored.start_trigger_args is not None
    stored = restored.start_trigger_args.trigger_kwargs
    kwargs = {k: smart_decode_trigger_kwargs(v) for k, v in smart_decode_trigger_kwargs(stored).items()}
    assert kwargs["job_id"] == TEMPLATED

    # what the triggerer does: build the trigger, attach the task instance, render with its context
    trigger = WorkflowJobTrigger(**kwargs)

    class RuntimeTI:
        task_id = "wait"

    ti = RuntimeTI()
    ti.task = restored  # type: ignore[attr-defined]  # the triggerer's task: from the serialized DAG
    trigger.task_instance = ti  # type: ignore[assignment]
    assert set(trigger.template_fields) == {"job_id", "workflowsvc_conn_id"}
    trigger.render_template_fields(context={"params": {"job": "job-42"}})
    assert trigger.job_id == "job-42"


def test_the_trigger_takes_its_deadline_from_airflows_timeout_less_the_backstop() -> None:
    trigger = WorkflowJobTrigger(job_id="j", deadline=None)
    with pytest.raises(ValueError, match="deadline"):
        trigger._deadline()
    timeout_after = datetime.now(timezone.utc) + timedelta(seconds=DEFERRAL_BACKSTOP + 60)
    trigger.timeout_after = timeout_after  # type: ignore[attr-defined]
    assert trigger._deadline() == pytest.approx(time.time() + 60, abs=2)
    assert WorkflowJobTrigger(job_id="j", deadline=123.0)._deadline() == 123.0
    path, kwargs = trigger.serialize()
    assert kwargs["deadline"] is None
    assert WorkflowJobTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"job_id": "j", "start_from_trigger": False},  # asked: the first poke in a worker
        {"job_id": "j", "deferrable": False},  # pokes in a worker
        {"workflow_id": "w"},  # the job is looked for in a worker first
        {"job_id": "{{ ti.xcom_pull(task_ids='run', key='job_id') }}"},  # the triggerer cannot pull XCom
        {"job_id": "{{ task_instance.xcom_pull('run') }}"},
    ],
)
def test_other_sensors_start_in_a_worker(kwargs: dict[str, Any]) -> None:
    task = sensor(**kwargs)
    assert task.start_from_trigger is False
    assert task.start_trigger_args is None


@pytest.mark.airflow_below("3.3", reason="the fallback of older Airflow")
def test_before_airflow_3_3_the_sensor_defers_from_a_worker() -> None:
    task = sensor(job_id="j")
    assert task.start_from_trigger is False
    assert task.start_trigger_args is None


@pytest.mark.airflow_min("3.3", reason="a sensor starts (and so ends) in the triggerer from 3.3")
@pytest.mark.parametrize("fail_on_failed_files", [True, False])
def test_the_trigger_ends_the_task_with_the_xcoms_execute_complete_pushes(fail_on_failed_files: bool) -> None:
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

    failed = [] if fail_on_failed_files else [{"document": "x.bin", "error": "unsupported"}]
    outcome = JobOutcome.model_validate(
        {
            "status": "success",
            "job_id": "job-42",
            "workflow_id": "wf-1",
            "job_status": "completed",
            "message": "done",
            "failed_files": failed,
            "output_files": [{"file_id": "a.txt", "node_id": "n1"}],
            "elapsed": 6.04,
            "job_seconds": 5.5,
            "job_seconds_from": "runtime",
        }
    )
    task = sensor(job_id=TEMPLATED, fail_on_failed_files=fail_on_failed_files)
    assert task.start_trigger_args is not None
    kwargs = {**task.start_trigger_args.trigger_kwargs, "job_id": "job-42"}
    event = WorkflowJobTrigger(**kwargs)._event(outcome)

    ti = MagicMock()
    returned = task.execute_complete({"ti": ti}, event=outcome.to_event())  # type: ignore[arg-type]
    pushed = {call.kwargs["key"]: call.kwargs["value"] for call in ti.xcom_push.call_args_list}
    assert event.xcoms == {**pushed, "return_value": returned}  # what a worker would have pushed
