"""The public SDK's own platform lifecycle check, as our test: the same SDK calls with the same
expectations, against a standalone emulator process (platform dialect) on the SDK's own authentication.

The SDK's repository has an integration test that drives a live service (its ``PLATFORM_API_URL`` and
``UNSTRUCTURED_API_KEY``) through workflows, templates and on-demand jobs, retrying a 429 after a pause.
CI cannot reach that repository, so this module makes those calls itself; where that test sleeps before
retrying a 429, this one moves the emulator clock by the ``Retry-After`` the answer gave.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from unstructured_client import UnstructuredClient
from unstructured_client.models import operations, shared
from unstructured_client.models.errors import SDKError, UnstructuredClientError

from airflow_provider_workflowsvc.emulator.samples import simple_pdf
from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle, running_emulator

T = TypeVar("T")

API_KEY = "key-sdk-lifecycle-61e2"
TOKEN = "tok-sdk-lifecycle-0d94"
WORKFLOW_NAME = "sdk_lifecycle_workflow"
MAX_ATTEMPTS = 5
PDF = simple_pdf([["A Layout Study", "Documents are read page by page."], ["Second page text."]])
CUSTOM_NODES = [
    {
        "id": "6d0f3a1e-2b4c-4e8d-9f7a-1c3b5d7e9f20",
        "name": "partition step",
        "type": "partition",
        "subtype": "unstructured_api",
        "settings": {"strategy": "fast", "include_page_breaks": False},
    }
]


class RateLimitedCalls:
    """Calls that, on a 429, wait the ``Retry-After`` on the emulator clock and try again."""

    def __init__(self, emulator: EmulatorHandle) -> None:
        self.emulator = emulator
        self.waits: list[float] = []

    def __call__(self, func: Callable[..., T], **kwargs: Any) -> T:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return func(**kwargs)
            except UnstructuredClientError as exc:
                if exc.status_code != 429 or attempt == MAX_ATTEMPTS:
                    raise
                wait = float(exc.headers["retry-after"])
                self.waits.append(wait)
                self.emulator.advance_clock(wait)
        raise AssertionError("the 429 retry loop ended without an answer")


@pytest.fixture(scope="module")
def standalone() -> Iterator[EmulatorHandle]:
    """The emulator as its own process (``python -m airflow_provider_workflowsvc.emulator --port 0``)."""
    with running_emulator(token=TOKEN, api_key=API_KEY, dialect="platform", subprocess=True) as emulator:
        yield emulator


@pytest.fixture
def emulator(standalone: EmulatorHandle) -> EmulatorHandle:
    standalone.reset()
    standalone.configure(on_demand_launch_interval=3600)  # a second launch always meets the 429
    return standalone


@pytest.fixture
def client(emulator: EmulatorHandle) -> Iterator[UnstructuredClient]:
    with UnstructuredClient(api_key_auth=API_KEY, server_url=emulator.root_url) as sdk:
        yield sdk


@pytest.fixture
def call(emulator: EmulatorHandle) -> RateLimitedCalls:
    return RateLimitedCalls(emulator)


@pytest.fixture
def workflow_id(client: UnstructuredClient, call: RateLimitedCalls) -> Iterator[str]:
    """A workflow made for the test, deleted afterwards if the test left it."""
    created = call(
        client.workflows.create_workflow,
        request=operations.CreateWorkflowRequest(
            create_workflow=shared.CreateWorkflow(name=WORKFLOW_NAME, workflow_type="basic")
        ),
    )
    assert created.status_code == 200
    assert created.workflow_information is not None
    workflow_id = str(created.workflow_information.id)
    yield workflow_id
    try:
        call(client.workflows.get_workflow, request=operations.GetWorkflowRequest(workflow_id=workflow_id))
    except SDKError:
        return  # the test deleted it
    call(client.workflows.delete_workflow, request=operations.DeleteWorkflowRequest(workflow_id=workflow_id))


def create_job(
    client: UnstructuredClient, call: RateLimitedCalls, request_data: dict[str, Any], files: list[Any]
) -> operations.CreateJobResponse:
    body = shared.BodyCreateJob(request_data=json.dumps(request_data), input_files=files or None)
    return call(client.jobs.create_job, request=operations.CreateJobRequest(body_create_job=body))


def job_of(response: operations.CreateJobResponse | operations.GetJobResponse) -> shared.JobInformation:
    assert response.job_information is not None
    return response.job_information


def test_workflow_templates_and_a_template_job(
    client: UnstructuredClient, call: RateLimitedCalls, workflow_id: str
) -> None:
    listed = call(client.workflows.list_workflows, request=operations.ListWorkflowsRequest())
    assert listed.status_code == 200
    assert isinstance(listed.response_list_workflows, list)

    got = call(client.workflows.get_workflow, request=operations.GetWorkflowRequest(workflow_id=workflow_id))
    assert got.status_code == 200
    workflow = got.workflow_information
    assert workflow is not None
    assert (str(workflow.id), workflow.name) == (workflow_id, WORKFLOW_NAME)

    templates = call(client.templates.list_templates, request=operations.ListTemplatesRequest())
    assert templates.status_code == 200
    template_ids = [t.id for t in templates.response_list_templates or []]
    assert {"hi_res_partition", "hi_res_and_enrichment"} <= set(template_ids)

    template = call(
        client.templates.get_template, request=operations.GetTemplateRequest(template_id="hi_res_partition")
    )
    assert template.status_code == 200
    assert template.template_detail is not None
    assert template.template_detail.id == "hi_res_partition"

    pdf = shared.InputFiles(content=PDF, file_name="layout-study.pdf", content_type="application/pdf")
    created = create_job(client, call, {"template_id": "hi_res_partition"}, [pdf])
    assert created.status_code == 200
    job_id = str(job_of(created).id)
    assert job_of(created).status in ["SCHEDULED", "IN_PROGRESS"]

    got_job = call(client.jobs.get_job, request=operations.GetJobRequest(job_id=job_id))
    assert got_job.status_code == 200
    assert str(job_of(got_job).id) == job_id

    jobs = call(client.jobs.list_jobs, request=operations.ListJobsRequest())
    assert jobs.status_code == 200
    assert isinstance(jobs.response_list_jobs, list)

    deleted = call(
        client.workflows.delete_workflow, request=operations.DeleteWorkflowRequest(workflow_id=workflow_id)
    )
    assert deleted.status_code in [200, 204]
    assert call.waits == []


def test_a_job_of_custom_nodes(client: UnstructuredClient, call: RateLimitedCalls) -> None:
    templates = call(client.templates.list_templates, request=operations.ListTemplatesRequest())
    assert templates.status_code == 200

    created = create_job(client, call, {"job_nodes": CUSTOM_NODES}, [])
    assert created.status_code == 200
    job_id = str(job_of(created).id)

    got = call(client.jobs.get_job, request=operations.GetJobRequest(job_id=job_id))
    assert got.status_code == 200
    assert str(job_of(got).id) == job_id


def test_back_to_back_launches_meet_one_429_and_succeed_after_its_retry_after(
    client: UnstructuredClient, call: RateLimitedCalls, emulator: EmulatorHandle
) -> None:
    """The original runs its two launches within a second of each other: the second meets the launch
    gap, and its retry after the pause must succeed."""
    first = create_job(client, call, {"template_id": "hi_res_partition"}, [])
    second = create_job(client, call, {"job_nodes": CUSTOM_NODES}, [])
    assert (first.status_code, second.status_code) == (200, 200)
    assert len(call.waits) == 1
    assert 0 < call.waits[0] <= 3600
    launches = [e["status"] for e in emulator.requests(method="POST", path_contains="/jobs")]
    assert launches == [200, 429, 200]
