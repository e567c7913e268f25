"""Asset events of RunWorkflowOperator's outlets, through ``dag.test()`` against the emulator.

A successful job records an asset event (Airflow's own table) for each ``Asset`` outlet, with the job
in its extra; a failed task records none. The extra names the job the task ran (its XCom ``job_id``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_provider_workflowsvc.assets import destination_asset
from airflow_provider_workflowsvc.operators.connectors import (
    CreateDestinationConnectorOperator,
    CreateSourceConnectorOperator,
)
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
S3_OUT = {"remote_url": "s3://assets-test/processed/"}


def asset_events(uri: str, run_id: str) -> list[Any]:
    """The asset events of ``uri`` that ``run_id`` recorded, from Airflow's metadata DB."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == uri, AssetEvent.source_run_id == run_id)
        )
        events = list(session.scalars(query))
        session.expunge_all()
    return events


def test_connector_run_records_the_job_in_its_asset_event(dag_runner: Any) -> None:
    asset = destination_asset("s3", S3_OUT)
    with DAG("assets_connector_run", schedule=None, start_date=START, catchup=False) as dag:
        source = CreateSourceConnectorOperator(
            task_id="create_source",
            name="assets-s3-in",
            connector_type="s3",
            config={"remote_url": "s3://assets-test/in/", "emulator_documents": 3},
        )
        destination = CreateDestinationConnectorOperator(
            task_id="create_destination",
            name="assets-s3-out",
            connector_type="s3",
            config=dict(S3_OUT),
        )
        workflow = CreateWorkflowOperator(
            task_id="create_workflow",
            name="assets-s3-to-s3",
            workflow_type="basic",
            source_id=source.output,
            destination_id=destination.output,
        )
        RunWorkflowOperator(
            task_id="run", workflow_id=workflow.output, poll_interval=0.05, deferrable=True, outlets=[asset]
        )

    dr = dag_runner(dag)

    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    result = dr.get_task_instance("run").xcom_pull(task_ids="run")
    (event,) = asset_events(asset.uri, dr.run_id)
    assert event.source_task_id == "run"
    assert event.extra == {
        "job_id": result["job_id"],
        "workflow_id": result["workflow_id"],
        "status": "completed",
        "documents_written": 3,
        "failed_count": 0,
    }


def test_failed_files_are_counted_and_a_failed_task_records_no_event(dag_runner: Any, tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("some text")
    (tmp_path / "empty.txt").write_text("")
    kept, failing = (
        destination_asset("s3", S3_OUT),
        destination_asset("s3", {"remote_url": "s3://assets-test/x"}),
    )
    with DAG("assets_failed_files", schedule=None, start_date=START, catchup=False) as dag:
        workflow = CreateWorkflowOperator(
            task_id="create_workflow", name="assets-local", workflow_type="basic"
        )
        RunWorkflowOperator(
            task_id="run_tolerant",
            workflow_id=workflow.output,
            files=str(tmp_path),
            poll_interval=0.05,
            fail_on_failed_files=False,
            outlets=[kept],
        )
        RunWorkflowOperator(
            task_id="run_strict",
            workflow_id=workflow.output,
            files=str(tmp_path),
            poll_interval=0.05,
            outlets=[failing],
        )

    dr = dag_runner(dag)

    assert dr.get_task_instance("run_tolerant").state == "success"
    assert dr.get_task_instance("run_strict").state == "failed"  # empty.txt fails it
    (event,) = asset_events(kept.uri, dr.run_id)
    assert event.extra["documents_written"] == 1 and event.extra["failed_count"] == 1
    assert event.extra["job_id"] == dr.get_task_instance("run_tolerant").xcom_pull(
        task_ids="run_tolerant", key="job_id"
    )
    assert asset_events(failing.uri, dr.run_id) == []
