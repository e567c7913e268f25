"""WorkflowJobSensor on a known job starts in the triggerer (Airflow 3.3+): the scheduler's arguments,
the triggerer's rendering of the templated job id, the trigger's deadline (the real scheduler: e2e)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

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
    }


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
