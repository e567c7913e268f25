"""Models of the Workflow Service API: parsing tolerance, request strictness, secrets."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timezone
from uuid import UUID

import pytest
from pydantic import SecretStr, ValidationError

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceConnectionError,
    WorkflowServiceInputError,
    WorkflowServiceNotFoundError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    format_validation_errors,
    validate_input,
)
from airflow_provider_workflowsvc.models import (
    AstraDBDestinationConfig,
    AzureSourceConfig,
    ConfluenceSourceConfig,
    ConnectionCheck,
    ConnectionCheckStatus,
    CreateDestinationConnector,
    CreateSourceConnector,
    CreateWorkflow,
    DestinationConnector,
    DestinationType,
    Element,
    GenericConfig,
    Job,
    JobDetails,
    JobFailedFiles,
    JobStatus,
    ListWorkflowsParams,
    Schedule,
    SourceConnector,
    SourceType,
    UpdateConnector,
    UpdateWorkflow,
    Workflow,
    WorkflowStatus,
    WorkflowType,
    config_model_for,
    confluence_auth_variant,
    is_secret_field,
    request_json,
)
from scripts.connector_settings_page import example_config

SECRET = "s3cr3t-model-test-value"
UUID1 = "6f1d3c4e-0000-4000-8000-000000000001"
UUID2 = "6f1d3c4e-0000-4000-8000-000000000002"


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        assert SECRET not in str(text)


# --------------------------------------------------------------------------------------------------
# Job status


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("im progress", JobStatus.IN_PROGRESS),
        ("in progress", JobStatus.IN_PROGRESS),
        ("in_progress", JobStatus.IN_PROGRESS),
        ("IN_PROGRESS", JobStatus.IN_PROGRESS),
        ("In-Progress", JobStatus.IN_PROGRESS),
        ("IM PROGRESS", JobStatus.IN_PROGRESS),
        ("Im_Progress", JobStatus.IN_PROGRESS),
        ("  in   progress ", JobStatus.IN_PROGRESS),
        ("inprogress", JobStatus.IN_PROGRESS),
        ("running", JobStatus.IN_PROGRESS),
        ("completed", JobStatus.COMPLETED),
        ("COMPLETED", JobStatus.COMPLETED),
        ("Completed", JobStatus.COMPLETED),
        ("failed", JobStatus.FAILED),
        ("FAILED", JobStatus.FAILED),
        ("scheduled", JobStatus.SCHEDULED),
        ("Scheduled", JobStatus.SCHEDULED),
        ("stopped", JobStatus.STOPPED),
        ("STOPPED", JobStatus.STOPPED),
        ("cancelled", JobStatus.STOPPED),
        ("canceled", JobStatus.STOPPED),
        ("exploded", JobStatus.UNKNOWN),
        ("", JobStatus.UNKNOWN),
        ("complete d", JobStatus.UNKNOWN),
        ("in progres", JobStatus.UNKNOWN),
    ],
)
def test_job_status_spellings(raw: str, expected: JobStatus) -> None:
    assert JobStatus(raw) is expected
    job = Job.model_validate({"id": "job-1", "status": raw})
    assert job.status is expected
    assert job.raw_status == raw


@pytest.mark.parametrize("raw", [None, 3, 1.5, ["completed"], {"state": "completed"}])
def test_job_status_non_string_is_unknown_not_an_error(raw: object) -> None:
    job = Job.model_validate({"id": "job-1", "status": raw})
    assert job.status is JobStatus.UNKNOWN
    assert not job.status.is_success
    assert not job.status.is_terminal


def test_job_without_status_is_unknown() -> None:
    job = Job.model_validate({"id": "job-1"})
    assert job.status is JobStatus.UNKNOWN
    assert job.raw_status is None


@pytest.mark.parametrize(
    ("status", "terminal", "success", "active"),
    [
        (JobStatus.SCHEDULED, False, False, True),
        (JobStatus.IN_PROGRESS, False, False, True),
        (JobStatus.COMPLETED, True, True, False),
        (JobStatus.FAILED, True, False, False),
        (JobStatus.STOPPED, True, False, False),
        (JobStatus.UNKNOWN, False, False, False),
    ],
)
def test_job_status_helpers(status: JobStatus, terminal: bool, success: bool, active: bool) -> None:
    assert status.is_terminal is terminal
    assert status.is_success is success
    assert status.is_active is active


def test_only_completed_statuses_are_success() -> None:
    assert [s for s in JobStatus if s.is_success] == [JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS]


@pytest.mark.parametrize(
    ("wire", "status"),
    [
        ("SUCCESS", JobStatus.COMPLETED),
        ("COMPLETED_WITH_ERRORS", JobStatus.COMPLETED_WITH_ERRORS),
        ("IN_PROGRESS", JobStatus.IN_PROGRESS),
        ("SCHEDULED", JobStatus.SCHEDULED),
    ],
)
def test_platform_processing_statuses_parse_without_unknown(wire: str, status: JobStatus) -> None:
    assert JobStatus(wire) is status
    assert status.is_terminal is (status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS))


@pytest.mark.parametrize(
    ("status", "wire"),
    [
        (JobStatus.IN_PROGRESS, "im progress"),
        (JobStatus.COMPLETED, "completed"),
        (JobStatus.FAILED, "failed"),
        (JobStatus.SCHEDULED, "scheduled"),
        (JobStatus.STOPPED, "stopped"),
    ],
)
def test_job_status_wire_value(status: JobStatus, wire: str) -> None:
    assert status.wire_value == wire


def test_job_details_processing_status_tolerant() -> None:
    details = JobDetails.model_validate(
        {
            "id": "job-1",
            "processing_status": "IN_PROGRESS",
            "message": "working",
            "node_stats": [
                {
                    "node_name": "Partitioner",
                    "node_type": "partition",
                    "node_subtype": "fast",
                    "ready": 1,
                    "in_progress": 2,
                    "success": 3,
                    "failure": 4,
                    "new_counter": 9,
                }
            ],
            "extra_field": True,
        }
    )
    assert details.processing_status is JobStatus.IN_PROGRESS
    stats = details.node_stats[0]
    assert (stats.ready, stats.in_progress, stats.success, stats.failure) == (1, 2, 3, 4)
    assert JobDetails.model_validate({"id": "j", "node_stats": None}).node_stats == []


def test_failed_files() -> None:
    failed = JobFailedFiles.model_validate(
        {"failed_files": [{"document": "a.pdf", "error": "corrupt"}, {"document": "b.pdf", "error": "x"}]}
    )
    assert [(f.document, f.error) for f in failed.failed_files] == [("a.pdf", "corrupt"), ("b.pdf", "x")]
    assert JobFailedFiles.model_validate({"failed_files": []}).failed_files == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("scheduled", ConnectionCheckStatus.SCHEDULED),
        ("SUCCESS", ConnectionCheckStatus.SUCCESS),
        ("succeeded", ConnectionCheckStatus.SUCCESS),
        ("failure", ConnectionCheckStatus.FAILURE),
        ("failed", ConnectionCheckStatus.FAILURE),
        ("pending", ConnectionCheckStatus.SCHEDULED),
        ("mystery", ConnectionCheckStatus.UNKNOWN),
        (None, ConnectionCheckStatus.UNKNOWN),
    ],
)
def test_connection_check_status(raw: object, expected: ConnectionCheckStatus) -> None:
    check = ConnectionCheck.model_validate({"id": "c1", "status": raw, "reason": "r", "new": 1})
    assert check.status is expected
    assert check.status.is_terminal is (
        expected in (ConnectionCheckStatus.SUCCESS, ConnectionCheckStatus.FAILURE)
    )


# --------------------------------------------------------------------------------------------------
# Enums of the requests


SOURCE_TYPES = [
    "azure", "box", "confluence", "couchbase", "databricks_volumes", "dropbox", "elasticsearch", "gcs",
    "google_drive", "kafka-cloud", "mongodb", "onedrive", "outlook", "postgres", "s3", "salesforce",
    "sharepoint", "slack", "snowflake", "jira", "zendesk",
]  # fmt: skip
DESTINATION_TYPES = [
    "astradb", "azure_ai_search", "couchbase", "databricks_volumes", "databricks_volume_delta_tables",
    "delta_table", "elasticsearch", "gcs", "kafka-cloud", "milvus", "mongodb", "motherduck", "neo4j",
    "onedrive", "pinecone", "postgres", "redis", "qdrant-cloud", "s3", "snowflake", "weaviate-cloud",
    "ibm_watsonx_s3",
]  # fmt: skip


LIVE_DOCS_ONLY = {"source": {"opensearch", "teradata"}, "destination": {"azure", "opensearch", "teradata"}}


def test_connector_type_enums_are_the_spec_and_the_live_docs() -> None:
    from airflow_provider_workflowsvc.connectors_catalog import known_types

    assert {t.value for t in SourceType} == set(SOURCE_TYPES) | LIVE_DOCS_ONLY["source"]
    assert {t.value for t in DestinationType} == set(DESTINATION_TYPES) | LIVE_DOCS_ONLY["destination"]
    assert set(known_types("source")) == {t.value for t in SourceType}
    assert set(known_types("destination")) == {t.value for t in DestinationType}


@pytest.mark.parametrize("value", SOURCE_TYPES)
def test_every_source_type(value: str) -> None:
    assert SourceType(value).value == value
    assert SourceType(value.upper()).value == value
    body = CreateSourceConnector(name="n", type=value, config=_minimal_source_config(value))
    assert request_json(body)["type"] == value


@pytest.mark.parametrize("value", DESTINATION_TYPES)
def test_every_destination_type(value: str) -> None:
    assert DestinationType(value).value == value
    assert DestinationType(value.upper()).value == value
    body = CreateDestinationConnector(name="n", type=value, config=_minimal_destination_config(value))
    assert request_json(body)["type"] == value


def _minimal_source_config(kind: str) -> dict[str, object]:
    if kind == "azure":
        return {"remote_url": "az://container/path"}
    if kind == "confluence":
        return {"url": "https://wiki.example", "username": "u", "token": SECRET}
    return dict(example_config("source", kind))


def _minimal_destination_config(kind: str) -> dict[str, object]:
    if kind == "astradb":
        return {"collection_name": "c", "api_endpoint": "https://astra.example", "token": SECRET}
    return dict(example_config("destination", kind))


@pytest.mark.parametrize("value", ["s3 ", "kafka_cloud", "KAFKA-CLOUD", "Google Drive"])
def test_source_type_separator_and_case_tolerant(value: str) -> None:
    assert SourceType(value) in (SourceType.S3, SourceType.KAFKA_CLOUD, SourceType.GOOGLE_DRIVE)


def test_unknown_connector_type_passes_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    body = validate_input(
        CreateDestinationConnector, "destination", {"name": "n", "type": "nope", "config": {"a": 1}}
    )
    assert request_json(body) == {"name": "n", "type": "nope", "config": {"a": 1}}
    assert "destination connector type 'nope' is not one the provider knows" in caplog.text
    with pytest.raises(WorkflowServiceInputError, match="config must not be empty"):
        validate_input(CreateDestinationConnector, "destination", {"name": "n", "type": "nope", "config": {}})


@pytest.mark.parametrize("value", ["basic", "advanced", "platinum", "custom", "BASIC"])
def test_workflow_type(value: str) -> None:
    assert WorkflowType(value).value == value.lower()


def test_workflow_status_tolerant() -> None:
    assert WorkflowStatus("ACTIVE") is WorkflowStatus.ACTIVE
    assert WorkflowStatus("paused") is WorkflowStatus.UNKNOWN
    workflow = Workflow.model_validate({"id": UUID1, "name": "w", "status": "archived"})
    assert workflow.status is WorkflowStatus.UNKNOWN


# --------------------------------------------------------------------------------------------------
# Schedules


SCHEDULE_CRON = {
    "every 15 minutes": "*/15 * * * *",
    "every hour": "0 * * * *",
    "every 2 hours": "0 */2 * * *",
    "every 4 hours": "0 */4 * * *",
    "every 6 hours": "0 */6 * * *",
    "every 8 hours": "0 */8 * * *",
    "every 10 hours": "0 */10 * * *",
    "every 12 hours": "0 */12 * * *",
    "daily": "0 0 * * *",
    "weekly": "0 0 * * 0",
    "monthly": "0 0 1 * *",
}


def test_schedule_values_are_the_spec() -> None:
    assert [s.value for s in Schedule] == list(SCHEDULE_CRON)


@pytest.mark.parametrize(("value", "cron"), SCHEDULE_CRON.items())
def test_schedule_cron_mapping(value: str, cron: str) -> None:
    schedule = Schedule(value)
    assert schedule.cron_expression == cron
    assert len(cron.split()) == 5
    # the request sends the enum string; the response carries the crontab object
    body = CreateWorkflow(name="w", workflow_type="basic", schedule=value.upper().replace(" ", "_"))
    assert request_json(body)["schedule"] == value
    workflow = Workflow.model_validate(
        {"id": UUID1, "name": "w", "schedule": {"crontab_entries": [{"cron_expression": cron}]}}
    )
    assert workflow.schedule is not None
    assert workflow.schedule.crontab_entries[0].cron_expression == schedule.cron_expression


def test_schedule_cron_expressions_are_distinct() -> None:
    assert len({s.cron_expression for s in Schedule}) == len(Schedule)


def test_unknown_schedule_refused() -> None:
    with pytest.raises(WorkflowServiceInputError, match=r"invalid workflow: schedule: "):
        validate_input(
            CreateWorkflow, "workflow", {"name": "w", "workflow_type": "basic", "schedule": "hourly"}
        )


# --------------------------------------------------------------------------------------------------
# Confluence authentication variants


@pytest.mark.parametrize(
    ("fields", "variant"),
    [
        ({"username": "me@example.com", "token": SECRET, "cloud": True}, "api token"),
        ({"username": "me@example.com", "token": SECRET, "cloud": False}, "api token"),
        ({"token": SECRET}, "personal access token"),
        ({"token": SECRET, "cloud": False}, "personal access token"),
        ({"username": "me", "password": SECRET}, "password"),
        ({"username": "me", "password": SECRET, "cloud": True}, "password"),
    ],
)
def test_confluence_valid_variants(fields: dict[str, object], variant: str) -> None:
    config = ConfluenceSourceConfig(url="https://wiki.example", **fields)
    assert confluence_auth_variant(config) == variant
    body = request_json(config)
    # every setting is sent, defaults included (the PUT rule), secrets revealed only here
    assert body["max_num_of_spaces"] == 500
    assert body["max_num_of_docs_from_each_space"] == 150
    assert body["extract_images"] is False
    assert body["extract_files"] is False
    assert body["cloud"] is fields.get("cloud", False)
    assert SECRET in body.values()
    assert_no_secret(repr(config), str(config), config.model_dump(), config.model_dump_json())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "confluence config has no authentication"),
        ({"cloud": True}, "confluence config has no authentication"),
        ({"token": "   "}, "confluence config has no authentication"),
        ({"username": "me"}, "authentication is incomplete: username is set but neither token nor password"),
        ({"username": "me", "token": ""}, "incomplete: username is set but neither token nor password"),
        ({"password": SECRET}, "confluence password authentication is incomplete: username is missing"),
        (
            {"username": "  ", "password": SECRET},
            "password authentication is incomplete: username is missing",
        ),
        ({"token": SECRET, "password": SECRET}, "mixes authentication variants"),
        ({"username": "me", "token": SECRET, "password": SECRET}, "mixes authentication variants"),
        ({"token": SECRET, "cloud": True}, "personal access token authentication .* requires cloud=false"),
    ],
)
def test_confluence_invalid_variants(fields: dict[str, object], message: str) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message) as info:
        validate_input(ConfluenceSourceConfig, "confluence config", {"url": "https://wiki.example", **fields})
    assert_no_secret(info.value)
    with pytest.raises(ValidationError):
        ConfluenceSourceConfig(url="https://wiki.example", **fields)


def test_confluence_invalid_variant_through_create_source_names_the_field() -> None:
    with pytest.raises(WorkflowServiceInputError) as info:
        validate_input(
            CreateSourceConnector,
            "source connector",
            {"name": "c", "type": "confluence", "config": {"url": "https://w", "password": SECRET}},
        )
    assert "username is missing" in str(info.value)
    assert_no_secret(info.value)


def test_confluence_limits_and_typo() -> None:
    with pytest.raises(WorkflowServiceInputError, match="max_num_of_spaces"):
        validate_input(
            ConfluenceSourceConfig, "c", {"url": "https://w", "token": SECRET, "max_num_of_spaces": 0}
        )
    with pytest.raises(WorkflowServiceInputError, match="usrname: Extra inputs are not permitted"):
        validate_input(ConfluenceSourceConfig, "c", {"url": "https://w", "token": SECRET, "usrname": "x"})


# --------------------------------------------------------------------------------------------------
# Typed vs generic config, secrets


def test_config_model_for() -> None:
    assert config_model_for("source", "azure") is AzureSourceConfig
    assert config_model_for("source", "confluence") is ConfluenceSourceConfig
    assert config_model_for("destination", "astradb") is AstraDBDestinationConfig
    assert config_model_for("source", "s3") is GenericConfig
    assert config_model_for("destination", "azure") is GenericConfig
    assert config_model_for("source", "astradb") is GenericConfig


def test_typed_config_refuses_unknown_fields_generic_accepts_any() -> None:
    with pytest.raises(WorkflowServiceInputError, match="remote_ur: Extra inputs are not permitted"):
        validate_input(
            CreateSourceConnector, "source", {"name": "a", "type": "azure", "config": {"remote_ur": "x"}}
        )
    body = CreateSourceConnector(
        name="s3 in", type="s3", config={"remote_url": "s3://b/p", "anything": {"nested": [1, 2]}}
    )
    assert isinstance(body.config, GenericConfig)
    assert request_json(body) == {
        "name": "s3 in",
        "type": "s3",
        "config": {"remote_url": "s3://b/p", "anything": {"nested": [1, 2]}},
    }


def test_typed_config_is_chosen_by_type() -> None:
    body = CreateSourceConnector(
        name="az", type="AZURE", config={"remote_url": "az://c", "account_name": "acct", "sas_token": SECRET}
    )
    assert isinstance(body.config, AzureSourceConfig)
    assert request_json(body) == {
        "name": "az",
        "type": "azure",
        "config": {"remote_url": "az://c", "account_name": "acct", "sas_token": SECRET},
    }
    dest = CreateDestinationConnector(
        name="astra",
        type="astradb",
        config={
            "collection_name": "c",
            "keyspace": "k",
            "batch_size": 20,
            "api_endpoint": "https://a",
            "token": SECRET,
            "flatten_metadata": False,
        },
    )
    assert isinstance(dest.config, AstraDBDestinationConfig)
    assert request_json(dest)["config"] == {
        "collection_name": "c",
        "keyspace": "k",
        "batch_size": 20,
        "api_endpoint": "https://a",
        "token": SECRET,
        "flatten_metadata": False,
    }


def test_astradb_requires_its_fields() -> None:
    with pytest.raises(WorkflowServiceInputError) as info:
        validate_input(CreateDestinationConnector, "d", {"name": "a", "type": "astradb", "config": {}})
    for field in ("collection_name", "api_endpoint", "token"):
        assert f"config.{field}: Field required" in str(info.value)


def test_config_model_instance_accepted_and_revalidated_for_type() -> None:
    config = AzureSourceConfig(remote_url="az://c", account_key=SECRET)
    body = CreateSourceConnector(name="a", type="azure", config=config)
    assert request_json(body)["config"] == {"remote_url": "az://c", "account_key": SECRET}
    with pytest.raises(ValidationError):
        # an azure config given for a confluence connector is checked against the confluence schema
        CreateSourceConnector(name="a", type="confluence", config=config)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("token", True),
        ("api_key", True),
        ("sas_token", True),
        ("password", True),
        ("client_secret", True),
        ("private_key", True),
        ("connection_string", True),
        ("service_account_key", True),
        ("aws-secret-access-key", True),
        ("credentials", True),
        ("pat", True),
        ("remote_url", False),
        ("path", False),
        ("username", False),
        ("batch_size", False),
        ("keyspace", False),
    ],
)
def test_is_secret_field(name: str, secret: bool) -> None:
    assert is_secret_field(name) is secret


def test_generic_config_masks_secrets_everywhere_but_request_json() -> None:
    config = GenericConfig.model_validate(
        {
            "bucket": "b",
            "aws_secret_access_key": SECRET,
            "nested": {"api_key": SECRET, "region": "eu"},
            "service_account_key": {"type": "service_account", "private_key": SECRET, "email": SECRET},
            "tokens": [SECRET],
        }
    )
    assert_no_secret(repr(config), str(config), config.model_dump(), config.model_dump_json())
    assert config.model_dump()["bucket"] == "b"
    assert config.model_dump()["nested"]["region"] == "eu"
    revealed = request_json(config)
    assert revealed == {
        "bucket": "b",
        "aws_secret_access_key": SECRET,
        "nested": {"api_key": SECRET, "region": "eu"},
        "service_account_key": {"type": "service_account", "private_key": SECRET, "email": SECRET},
        "tokens": [SECRET],
    }


def test_generic_config_must_not_be_empty() -> None:
    with pytest.raises(WorkflowServiceInputError, match="config must not be empty"):
        validate_input(CreateSourceConnector, "s", {"name": "a", "type": "s3", "config": {}})


@pytest.mark.parametrize(
    "model",
    [
        lambda: AzureSourceConfig(
            remote_url="az://c", account_key=SECRET, connection_string=SECRET, sas_token=SECRET
        ),
        lambda: ConfluenceSourceConfig(url="https://w", username="u", token=SECRET),
        lambda: ConfluenceSourceConfig(url="https://w", username="u", password=SECRET),
        lambda: AstraDBDestinationConfig(collection_name="c", api_endpoint="https://a", token=SECRET),
        lambda: CreateSourceConnector(
            name="a", type="azure", config={"remote_url": "x", "sas_token": SECRET}
        ),
        lambda: CreateDestinationConnector(
            name="a", type="astradb", config={"collection_name": "c", "api_endpoint": "e", "token": SECRET}
        ),
        lambda: UpdateConnector.for_type("source", "s3", {"remote_url": "s3://x", "secret_key": SECRET}),
    ],
)
def test_typed_secrets_masked(model) -> None:  # type: ignore[no-untyped-def]
    instance = model()
    assert_no_secret(repr(instance), str(instance), instance.model_dump(), instance.model_dump_json())
    assert SECRET in json.dumps(request_json(instance))


def test_typed_secret_fields_are_secretstr() -> None:
    for model, fields in [
        (AzureSourceConfig, ("account_key", "connection_string", "sas_token")),
        (ConfluenceSourceConfig, ("token", "password")),
        (AstraDBDestinationConfig, ("token",)),
    ]:
        for field in fields:
            assert "SecretStr" in str(model.model_fields[field].annotation), (model, field)


def test_update_connector_for_type() -> None:
    update = UpdateConnector.for_type("source", "confluence", {"url": "https://w", "token": SECRET})
    assert isinstance(update.config, ConfluenceSourceConfig)
    assert request_json(update) == {
        "config": {
            "url": "https://w",
            "token": SECRET,
            "max_num_of_spaces": 500,
            "max_num_of_docs_from_each_space": 150,
            "extract_images": False,
            "extract_files": False,
            "cloud": False,
        }
    }
    generic = UpdateConnector.for_type("destination", None, {"endpoint": "x", "password": SECRET})
    assert isinstance(generic.config, GenericConfig)
    assert request_json(generic) == {"config": {"endpoint": "x", "password": SECRET}}
    typed = UpdateConnector.for_type("destination", None, AstraDBDestinationConfig(
        collection_name="c", api_endpoint="e", token=SECRET
    ))  # fmt: skip
    assert request_json(typed)["config"]["token"] == SECRET


# --------------------------------------------------------------------------------------------------
# Responses tolerate extra fields; secrets in returned configs are masked


def test_source_connector_response_tolerates_and_masks() -> None:
    source = SourceConnector.model_validate(
        {
            "id": UUID1,
            "name": "src",
            "type": "azure",
            "config": {"remote_url": "az://c", "sas_token": SECRET, "nested": {"password": SECRET}},
            "created_at": "2024-05-01T10:00:00Z",
            "updated_at": None,
            "brand_new_field": {"x": 1},
        }
    )
    assert source.id == UUID1
    assert source.model_extra == {"brand_new_field": {"x": 1}}
    assert source.config["remote_url"] == "az://c"
    assert isinstance(source.config["sas_token"], SecretStr)
    assert source.config["sas_token"].get_secret_value() == SECRET
    assert_no_secret(repr(source), str(source), source.model_dump_json())
    dest = DestinationConnector.model_validate(
        {"id": UUID2, "name": "d", "type": "some_future_type", "config": None}
    )
    assert dest.type == "some_future_type"
    assert dest.config == {}


def test_workflow_response_tolerates_extra_and_nulls() -> None:
    workflow = Workflow.model_validate(
        {
            "id": UUID1,
            "name": "wf",
            "sources": [UUID1],
            "destinations": None,
            "workflow_type": "brand-new-type",
            "workflow_nodes": [
                {"id": UUID2, "name": "Partitioner", "type": "partition", "subtype": "fast", "extra": 1}
            ],
            "schedule": None,
            "status": "active",
            "created_at": "2024-05-01T10:00:00+00:00",
            "updated_at": None,
            "reprocess_all": False,
            "job_count": 3,
        }
    )
    assert workflow.destinations == []
    assert workflow.sources == [UUID1]
    assert workflow.workflow_nodes[0].name == "Partitioner"
    assert workflow.status is WorkflowStatus.ACTIVE
    assert workflow.model_extra == {"job_count": 3}
    assert workflow.created_at == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)


def test_job_response_tolerates_extra_fields() -> None:
    job = Job.model_validate(
        {
            "id": "job-9",
            "status": "completed",
            "workflow_id": UUID1,
            "workflow_name": "wf",
            "created_at": "2024-05-01T10:00:00Z",
            "output_node_files": [{"file_id": "f1", "node_id": "n1", "size": 3}],
            "runtime": 12.5,
            "shard": "eu-1",
        }
    )
    assert job.output_node_files[0].file_id == "f1"
    assert job.output_node_files[0].node_id == "n1"
    assert job.model_extra == {"shard": "eu-1"}
    assert job.runtime == 12.5
    assert "raw_status" not in job.model_dump()
    assert Job.model_validate({"id": "j", "output_node_files": None}).output_node_files == []


# --------------------------------------------------------------------------------------------------
# Workflow create / update


def test_create_workflow_sends_spec_field_names_only_given() -> None:
    body = CreateWorkflow(
        name="wf",
        workflow_type="advanced",
        source_id=UUID1,
        destination_id=UUID2,
        schedule="daily",
        reprocess_all=True,
    )
    assert request_json(body) == {
        "name": "wf",
        "workflow_type": "advanced",
        "source_id": UUID1,
        "destination_id": UUID2,
        "schedule": "daily",
        "reprocess_all": True,
    }
    assert request_json(CreateWorkflow(name="wf", workflow_type="basic")) == {
        "name": "wf",
        "workflow_type": "basic",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"workflow_type": "basic"}, "name: Field required"),
        ({"name": "", "workflow_type": "basic"}, "name: String should have at least 1 character"),
        ({"name": "w"}, "workflow_type: Field required"),
        ({"name": "w", "workflow_type": "gold"}, "workflow_type: Input should be"),
        (
            {"name": "w", "workflow_type": "basic", "source_id": "nope"},
            "source_id: Input should be a valid UUID",
        ),
        ({"name": "w", "workflow_type": "custom"}, "a custom workflow needs at least one node"),
        (
            {"name": "w", "workflow_type": "basic", "sources": [UUID1]},
            "sources: Extra inputs are not permitted",
        ),
        (
            {
                "name": "w",
                "workflow_type": "custom",
                "workflow_nodes": [
                    {"name": "a", "type": "t", "subtype": "s"},
                    {"name": "a", "type": "t", "subtype": "s"},
                ],
            },
            "node names must be unique, repeated: a",
        ),
        (
            {
                "name": "w",
                "workflow_type": "custom",
                "workflow_nodes": [{"name": "a", "type": "t", "subtype": "s", "colour": "red"}],
            },
            r"workflow_nodes.0: unknown field\(s\) colour",
        ),
        (
            {"name": "w", "workflow_type": "custom", "workflow_nodes": [{"name": "a", "type": "t"}]},
            "workflow_nodes.0.subtype: Field required",
        ),
    ],
)
def test_create_workflow_validation(fields: dict[str, object], message: str) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message):
        validate_input(CreateWorkflow, "workflow", fields)


def test_custom_workflow_with_nodes() -> None:
    body = CreateWorkflow(
        name="w",
        workflow_type="custom",
        workflow_nodes=[{"name": "Chunker", "type": "chunk", "subtype": "by_title", "settings": {"max": 5}}],
    )
    assert request_json(body)["workflow_nodes"] == [
        {"name": "Chunker", "type": "chunk", "subtype": "by_title", "settings": {"max": 5}}
    ]


def test_update_workflow_only_given_fields() -> None:
    assert request_json(UpdateWorkflow(schedule="weekly")) == {"schedule": "weekly"}
    # an explicit None is sent (clears the schedule)
    assert request_json(UpdateWorkflow(schedule=None)) == {"schedule": None}
    assert request_json(UpdateWorkflow(name="n2", reprocess_all=False)) == {
        "name": "n2",
        "reprocess_all": False,
    }
    with pytest.raises(WorkflowServiceInputError, match="a workflow update needs at least one field"):
        validate_input(UpdateWorkflow, "workflow update", {})
    with pytest.raises(WorkflowServiceInputError, match="status: Extra inputs are not permitted"):
        validate_input(UpdateWorkflow, "workflow update", {"status": "inactive"})


# --------------------------------------------------------------------------------------------------
# List parameters


def test_list_params_serialization() -> None:
    params = ListWorkflowsParams(
        dag_node_configuration_id="cfg-1",
        source_id=UUID1,
        destination_id=UUID(UUID2),
        status="inactive",
        page=3,
        page_size=50,
        created_since=datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        created_before="2024-02-01T00:00:00Z",
        name="nightly",
        sort_by="created_at",
        sort_direction="desc",
        show_only_soft_deleted=True,
        show_recommender_workflows=False,
    )
    assert params.query() == {
        "dag_node_configuration_id": "cfg-1",
        "source_id": UUID1,
        "destination_id": UUID2,
        "status": "inactive",
        "page": "3",
        "page_size": "50",
        "created_since": "2024-01-02T03:04:05Z",
        "created_before": "2024-02-01T00:00:00Z",
        "name": "nightly",
        "sort_by": "created_at",
        "sort_direction": "desc",
        "show_only_soft_deleted": "true",
        "show_recommender_workflows": "false",
    }
    assert ListWorkflowsParams().query() == {}
    assert ListWorkflowsParams(status=WorkflowStatus.ACTIVE).query() == {"status": "active"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"page": 0}, "page: Input should be greater than or equal to 1"),
        ({"page_size": -1}, "page_size: Input should be greater than or equal to 1"),
        ({"status": "paused"}, "status: Input should be 'active' or 'inactive'"),
        ({"sort_direction": "up"}, "sort_direction"),
        ({"source_id": "x"}, "source_id: Input should be a valid UUID"),
        ({"created_since": "yesterday"}, "created_since"),
        ({"pagesize": 5}, "pagesize: Extra inputs are not permitted"),
    ],
)
def test_list_params_validation(fields: dict[str, object], message: str) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message):
        validate_input(ListWorkflowsParams, "list_workflows parameters", fields)


# --------------------------------------------------------------------------------------------------
# Output elements and their permissions metadata


def test_element_permissions_data() -> None:
    element = Element.model_validate(
        {
            "type": "NarrativeText",
            "element_id": "e1",
            "text": "hello",
            "metadata": {
                "filename": "doc.pdf",
                "page_number": 2,
                "languages": ["eng"],
                "data_source": {
                    "url": "https://wiki.example/page",
                    "permissions_data": [
                        {"read": {"users": ["acct-1", "acct-2"], "groups": ["grp-a"]}},
                        {"update": {"users": ["acct-1"], "groups": []}},
                        {"delete": {"users": [], "groups": None}},
                        {"read": {"users": ["acct-3", "acct-1"], "groups": ["grp-b"]}},
                        {"admin": {"users": ["root"], "groups": []}},
                    ],
                },
            },
        }
    )
    source = element.metadata.data_source
    assert source is not None
    assert source.permissions_data is not None
    assert source.permissions_data[0]["read"].users == ["acct-1", "acct-2"]
    assert source.permissions_data[2]["delete"].groups == []
    read = source.permissions("read")
    assert read.users == ["acct-1", "acct-2", "acct-3"]
    assert read.groups == ["grp-a", "grp-b"]
    assert source.permissions("update").users == ["acct-1"]
    assert source.permissions("delete").users == []
    # an action a newer server adds is kept, not an error
    assert source.permissions_data[4]["admin"].users == ["root"]
    assert element.metadata.model_extra == {"languages": ["eng"]}
    assert source.model_extra == {"url": "https://wiki.example/page"}


def test_element_without_permissions() -> None:
    element = Element.model_validate({"type": "Title", "element_id": "e2"})
    assert element.text == ""
    assert element.metadata.data_source is None
    plain = Element.model_validate({"type": "Title", "element_id": "e3", "metadata": {"data_source": {}}})
    assert plain.metadata.data_source is not None
    assert plain.metadata.data_source.permissions("read").users == []


def test_element_wrong_shape_is_an_error() -> None:
    with pytest.raises(ValidationError):
        Element.model_validate({"type": "Title"})
    with pytest.raises(ValidationError):
        Element.model_validate(
            {"type": "T", "element_id": "e", "metadata": {"data_source": {"permissions_data": [{"read": 5}]}}}
        )


# --------------------------------------------------------------------------------------------------
# Errors


def test_validation_messages_never_echo_input() -> None:
    with pytest.raises(WorkflowServiceInputError) as info:
        validate_input(
            AzureSourceConfig, "azure config", {"remote_url": "x", "sas_token": 12345, "bad": SECRET}
        )
    assert_no_secret(info.value)
    assert "sas_token: Input should be a valid string" in str(info.value)
    assert "bad: Extra inputs are not permitted" in str(info.value)


def test_format_validation_errors() -> None:
    text = format_validation_errors(
        [
            {"loc": ["body", "name"], "msg": "Field required"},
            {"loc": ["body", "config", "function-after[x]", 0], "msg": "Value error, broken"},
            {"loc": [], "msg": "top level"},
            {"loc": ["body", "name"], "msg": "Field required"},
        ]
    )
    assert text == "body.name: Field required; body.config.0: broken; top level"


def test_exceptions_carry_their_fields_and_pickle() -> None:
    error = WorkflowServiceNotFoundError(404, "GET", "/api/v1/jobs/x", "Job not found", "Not Found")
    assert isinstance(error, WorkflowServiceApiError)
    assert (error.status_code, error.method, error.path, error.detail) == (
        404,
        "GET",
        "/api/v1/jobs/x",
        "Job not found",
    )
    assert str(error) == "GET /api/v1/jobs/x → 404 Not Found: Job not found"
    for original in (
        error,
        WorkflowServiceRateLimitError(429, "GET", "/p", "", "Too Many Requests", retry_after=3.0),
        WorkflowServiceConnectionError("POST", "/p", "ConnectError: refused", sent=False),
        WorkflowServiceResponseError("GET", "/p", 200, "not JSON"),
        WorkflowServiceInputError("bad input"),
    ):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is type(original)
        assert str(copy) == str(original)
        assert copy.__dict__ == original.__dict__


@pytest.mark.parametrize(
    ("kind", "connector_type", "config"),
    [
        ("source", "azure", {"remote_url": "az://c", "sas_token": SECRET}),
        ("source", "confluence", {"url": "https://w", "username": "u", "password": SECRET}),
        ("destination", "astradb", {"collection_name": "c", "api_endpoint": "https://a", "token": SECRET}),
        ("destination", "pinecone", {"index_name": "i", "api_key": SECRET}),
    ],
)
def test_update_connector_keeps_every_typed_config(kind: str, connector_type: str, config: dict) -> None:
    # Regression: a union serializer used to hand typed configs to the generic one, sending "config": {}.
    for update in (
        UpdateConnector.for_type(kind, connector_type, config),  # type: ignore[arg-type]
        UpdateConnector.for_type(kind, None, config_model_for(kind, connector_type).model_validate(config)),  # type: ignore[arg-type]
    ):
        body = request_json(update)["config"]
        assert {k: body[k] for k in config} == config
        assert_no_secret(update.model_dump(), update.model_dump_json(), repr(update))
