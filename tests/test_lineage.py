"""Lineage: dataset identity of connectors and files, and the events the OpenLineage provider emits.

The identity functions are checked directly. The events are the OpenLineage provider's own: the
example DAGs, two connector-driven DAGs and an S3-fed one (``lineage_dags/``; moto's S3 server) run
with ``dag.test()`` in a process
where the provider's plugin is on, with its ``file`` transport; the tests read the JSON events it
wrote. Secrets (the connection's token and API key; connector secrets under key names no rule knows,
in a URL's user info and query) are searched for in every event.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKE_WORKFLOW_ID

from airflow_provider_workflowsvc.assets import asset_event_extra, destination_asset
from airflow_provider_workflowsvc.emulator.testing import running_emulator
from airflow_provider_workflowsvc.lineage import (
    FILE_DATASETS_MAX,
    DatasetIdentity,
    connector_datasets,
    destination_identity,
    job_output_dataset,
    object_dataset,
    uploaded_datasets,
)
from scripts.s3_server import running_s3_server

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_JSON = REPO_ROOT / "docs" / "lineage-examples.json"
UPDATE_EXAMPLES_ENV = "WORKFLOWSVC_UPDATE_LINEAGE_EXAMPLES"
STORAGE_BUCKET = "lineage-storage"

# The DAG runs behind `lineage_events` are one subprocess, set up inside the first test that uses it. The
# bound only stops a hang: four DAGs ran past 280 s on a busy 3.2 leg (load 10-13), whose dag.test()
# starts each task seconds slower; the claims are the events the runs wrote, however long they took.
LINEAGE_RUNS_HANG_BOUND = 1500
pytestmark = pytest.mark.timeout(LINEAGE_RUNS_HANG_BOUND + 60)

# -- identity ----------------------------------------------------------------------------------------


def ids(datasets: list[DatasetIdentity]) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def test_s3_dataset_is_the_bucket_and_the_key_prefix() -> None:
    assert ids(connector_datasets("s3", {"remote_url": "s3://docs-bucket/in/handbook/"})) == [
        ("s3://docs-bucket", "in/handbook")
    ]
    assert ids(connector_datasets("S3", {"remote_url": "s3://docs-bucket"})) == [("s3://docs-bucket", "/")]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"remote_url": "az://reports/2026/", "account_name": "acme"},
            ("wasbs://reports@acme.blob.core.windows.net", "2026"),
        ),
        (
            {"remote_url": "abfss://lake@acme.dfs.core.windows.net/raw"},
            ("abfss://lake@acme.dfs.core.windows.net", "raw"),
        ),
        (
            {"remote_url": "wasbs://box@acme.blob.core.windows.net/a/b"},
            ("wasbs://box@acme.blob.core.windows.net", "a/b"),
        ),
        (
            {"remote_url": "https://acme.blob.core.windows.net/box/a?sv=1&sig=abc"},
            ("wasbs://box@acme.blob.core.windows.net", "a"),
        ),
        ({"remote_url": "az://reports"}, ("az://reports", "/")),
    ],
)
def test_azure_dataset_is_the_account_container_and_path(
    config: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert ids(connector_datasets("azure", config)) == [expected]


def test_confluence_gives_one_dataset_per_space() -> None:
    config = {"url": "https://acme.atlassian.net/wiki/", "spaces": ["ENG", "SALES"], "token": "t"}
    assert ids(connector_datasets("confluence", config)) == [
        ("https://acme.atlassian.net/wiki", "spaces/ENG"),
        ("https://acme.atlassian.net/wiki", "spaces/SALES"),
    ]
    assert ids(connector_datasets("confluence", {"url": "https://wiki.acme.com"})) == [
        ("https://wiki.acme.com", "spaces")
    ]


def test_astradb_dataset_is_the_keyspace_and_collection() -> None:
    config = {"api_endpoint": "https://0c1d-eu.apps.astra.datastax.com", "collection_name": "pages"}
    assert ids(connector_datasets("astradb", {**config, "keyspace": "ks"})) == [
        ("astradb://0c1d-eu.apps.astra.datastax.com", "ks.pages")
    ]
    assert destination_identity("astradb", config).name == "default_keyspace.pages"


def test_unknown_type_or_unidentified_config_gives_the_type_and_connector_id() -> None:
    secret = "box-secret-" + secrets.token_hex(4)
    assert ids(connector_datasets("box", {"box_app_config": secret, "remote_url": "box://x"}, "c-1")) == [
        ("workflowsvc://box", "c-1")
    ]
    # an S3 config without remote_url: nothing else is read, whatever its keys
    assert ids(connector_datasets("s3", {"bucket": "b", "key": "k"}, "c-2")) == [("workflowsvc://s3", "c-2")]


def test_identity_never_holds_a_url_password_query_or_unlisted_value() -> None:
    password, sig, other = (f"{name}-{secrets.token_hex(4)}" for name in ("pw", "sig", "other"))
    datasets = [
        *connector_datasets("s3", {"remote_url": f"s3://u:{password}@bkt/p?sig={sig}", "secret": other}),
        *connector_datasets(
            "confluence", {"url": f"https://u:{password}@w.acme.com/?t={sig}", "password": other}
        ),
        *connector_datasets(
            "astradb",
            {"api_endpoint": f"https://t:{password}@db.astra.com", "token": other, "collection_name": "c"},
        ),
        *connector_datasets(
            "azure", {"remote_url": f"https://acct.blob.core.windows.net/c/p?sig={sig}", "sas_token": other}
        ),
    ]
    text = json.dumps(ids(datasets))
    assert len(datasets) == 4
    for value in (password, sig, other):
        assert value not in text


def test_many_local_files_become_their_directory(tmp_path: Path) -> None:
    few = [str(tmp_path / f"f{i}.txt") for i in range(3)]
    assert ids(uploaded_datasets(few)) == [("file", p) for p in sorted(few)]
    many = [str(tmp_path / "a" / f"f{i}.txt") for i in range(FILE_DATASETS_MAX + 1)]
    assert ids(uploaded_datasets(many)) == [("file", str(tmp_path / "a"))]


def test_objects_are_named_as_openlineage_names_them() -> None:
    """Issue #35: ``s3://bucket`` (also for s3a/s3n), ``gs://bucket`` (also gcs), the key as the name."""
    assert ids([object_dataset("s3", "b", "in/a.txt")]) == [("s3://b", "in/a.txt")]
    assert ids([object_dataset("s3a", "b", "/in/")]) == [("s3://b", "in")]
    assert ids([object_dataset("gcs", "b", "")]) == [("gs://b", "/")]


def test_many_objects_become_their_common_prefix_per_store(tmp_path: Path) -> None:
    class Stored:  # what uploaded_datasets reads of a storage.StoredObject: its path
        def __init__(self, protocol: str, bucket: str, key: str) -> None:
            self.path = type("P", (), {"protocol": protocol, "bucket": bucket, "key": key})()

    few = [Stored("s3", "b", f"in/{n}.txt") for n in range(3)]
    assert ids(uploaded_datasets([*few, str(tmp_path / "a.txt")])) == [
        ("file", str(tmp_path / "a.txt")),
        ("s3://b", "in/0.txt"),
        ("s3://b", "in/1.txt"),
        ("s3://b", "in/2.txt"),
    ]
    many = [Stored("s3", "b", f"in/2024/{n}.txt") for n in range(FILE_DATASETS_MAX)]
    many += [Stored("s3", "b", "in/2025/x.txt"), Stored("gs", "g", "docs/a.pdf")]
    assert ids(uploaded_datasets(many)) == [("gs://g", "docs"), ("s3://b", "in")]


def test_job_output_dataset_is_on_the_service_without_credentials() -> None:
    dataset = job_output_dataset("https://user:pw@svc.example.com:8443/api/v1/", "j-1")
    assert (dataset.namespace, dataset.name) == (
        "workflowsvc://svc.example.com:8443",
        "api/v1/jobs/j-1/output",
    )


def test_an_unreadable_workflow_leaves_connectors_out_but_keeps_files_and_facets(
    mock_service: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import httpx

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.lineage import run_lineage

    mock_service.get(f"/workflows/{FAKE_WORKFLOW_ID}").mock(
        return_value=httpx.Response(404, json={"detail": "gone"})
    )
    paths = [str(tmp_path / "a.txt")]
    summary = {
        "status": "completed",
        "failed_files": [{"document": "a.txt", "error": "bad"}],
        "failed_file_count": 1,
    }
    with WorkflowServiceHook() as hook:
        lineage = run_lineage(
            hook,
            workflow_id=FAKE_WORKFLOW_ID,
            job_id="j-1",
            summary=summary,
            uploaded=uploaded_datasets(paths),
            log=logging.getLogger("lineage-test"),
        )
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", paths[0])]
    assert lineage.outputs == []  # a local destination cannot be told from a connector one
    assert lineage.run_facets["workflowsvc_job"].jobId == "j-1"
    assert lineage.run_facets["workflowsvc_job"].workflowName is None
    assert lineage.run_facets["workflowsvc_failedFiles"].failedCount == 1
    assert f"could not read workflow {FAKE_WORKFLOW_ID}" in caplog.text


def test_no_lineage_before_a_job_exists() -> None:
    from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator

    run = RunWorkflowOperator(task_id="run", workflow_id=FAKE_WORKFLOW_ID)
    download = DownloadJobOutputOperator(task_id="download", job_id="j", output_dir="/tmp/x")
    assert run.get_openlineage_facets_on_complete(None) is None
    assert download.get_openlineage_facets_on_complete(None) is None


# -- assets ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "uri"),
    [
        ("s3", {"remote_url": "s3://bkt/processed/", "secret": "x"}, "s3://bkt/processed"),
        (
            "astradb",
            {
                "api_endpoint": "https://db.astra.com",
                "keyspace": "k",
                "collection_name": "c",
                "token": "{{ var.value.t }}",
            },
            "astradb://db.astra.com/k.c",
        ),
    ],
)
def test_destination_asset_uri_is_the_lineage_output(kind: str, config: dict[str, Any], uri: str) -> None:
    asset = destination_asset(kind, config)
    identity = destination_identity(kind, config)
    assert asset.uri == uri == identity.uri
    assert f"{identity.namespace}/{identity.name}" == uri


def test_destination_asset_refuses_templates_and_unidentified_destinations() -> None:
    with pytest.raises(ValueError, match="api_endpoint of the astradb config is a template"):
        destination_asset("astradb", {"api_endpoint": "{{ var.value.e }}", "collection_name": "c"})
    with pytest.raises(ValueError, match="give connector_id"):
        destination_asset("pinecone", {"index_name": "i"})
    assert destination_asset("pinecone", {}, connector_id="c-9").uri == "workflowsvc://pinecone/c-9"


def test_asset_event_extra_counts_documents_of_the_last_node() -> None:
    summary = {
        "job_id": "j",
        "workflow_id": "w",
        "status": "completed",
        "node_stats": [{"success": 5, "failure": 1}, {"success": 4, "failure": 1}],
        "failed_file_count": 1,
        "output_files": [],
    }
    assert asset_event_extra(summary) == {
        "job_id": "j",
        "workflow_id": "w",
        "status": "completed",
        "documents_written": 4,
        "failed_count": 1,
    }
    no_stats = {
        **summary,
        "node_stats": [],
        "output_files": [{"file_id": "a"}, {"file_id": "a"}, {"file_id": "b"}],
    }
    assert asset_event_extra(no_stats)["documents_written"] == 2


# -- events of the OpenLineage provider --------------------------------------------------------------

SECRETS = {name: f"{name}-{secrets.token_hex(5)}" for name in ("a", "b", "c", "d", "e", "f", "g", "h")}
"""Values of the ``lineage_secret_*`` and example Variables; ``a`` and ``b`` sit in a URL."""


@pytest.fixture(scope="module")
def lineage_events(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the example DAGs and ``lineage_dags/`` once with OpenLineage on; yields their events."""
    folder = tmp_path_factory.mktemp("lineage-dags")
    shutil.copytree(REPO_ROOT / "example_dags", folder, dirs_exist_ok=True)
    for dag_file in ("lineage_connectors.py", "lineage_object_storage.py"):
        shutil.copy(Path(__file__).parent / "lineage_dags" / dag_file, folder)
    events_file = folder.parent / "events.jsonl"
    token, api_key = f"tok-{secrets.token_hex(5)}", f"key-{secrets.token_hex(5)}"
    with (
        running_emulator(token=token, api_key=api_key, processing_delay=0.05, dialect="platform") as emu,
        running_s3_server() as s3,
    ):
        s3.put_tree(STORAGE_BUCKET, {"docs/a.txt": b"alpha", "docs/sub/b.md": b"# bravo"})
        conn = {
            "conn_type": "workflowsvc",
            "host": emu.base_url,
            "password": token,
            "extra": {"api_key": api_key, "retry_wait": 0.05},
        }
        variables = {
            "lineage_bucket_user": "reader",
            **{f"lineage_secret_{k}": v for k, v in SECRETS.items()},
            "workflowsvc_confluence_url": "https://example.atlassian.net/wiki",
            "workflowsvc_confluence_user": "me@example.com",
            "workflowsvc_confluence_token": SECRETS["g"],
            "workflowsvc_astra_endpoint": "https://0c1d-eu-west-1.apps.astra.datastax.com",
            "workflowsvc_astra_token": SECRETS["h"],
            "lineage_storage_bucket": STORAGE_BUCKET,
            "lineage_storage_conn": "lineage_s3",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"] = json.dumps(conn)
        env.update(s3.connection_env("lineage_s3"))
        states_file = folder.parent / "states.jsonl"
        env["WORKFLOWSVC_LINEAGE_STATES"] = str(states_file)
        env.update({f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()})
        runs = [
            "workflowsvc_example_local_files=" + json.dumps({"output_dir": str(folder.parent / "out")}),
            "workflowsvc_example_connectors_pipeline",
            "lineage_s3_to_astradb",
            "lineage_box_to_s3",
            "lineage_object_storage",
        ]
        process = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).parent / "_lineage_process.py"),
                str(events_file),
                str(folder),
                *runs,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=LINEAGE_RUNS_HANG_BOUND,
        )
    output = process.stdout + process.stderr
    lines = states_file.read_text().splitlines() if states_file.exists() else []
    states = [json.loads(line) for line in lines]
    assert process.returncode == 0, output[-4000:]
    assert len(states) == len(runs), output[-4000:]
    assert all(s["state"] == "success" for s in states), states
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    yield {
        "events": events,
        "raw": events_file.read_text(),
        "output": output,
        "folder": folder,
        "secrets": [token, api_key, *SECRETS.values(), s3.secret_key],
        "service": emu.base_url,
    }


def complete_event(events: list[dict[str, Any]], job_name: str) -> dict[str, Any]:
    found = [e for e in events if e["job"]["name"] == job_name and e["eventType"] == "COMPLETE"]
    assert len(found) == 1, f"{job_name}: {len(found)} COMPLETE events"
    return found[0]


def dataset_ids(event: dict[str, Any], side: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event[side]]


def test_local_files_example_lineage(lineage_events: dict[str, Any]) -> None:
    events, folder = lineage_events["events"], lineage_events["folder"]
    run = complete_event(events, "workflowsvc_example_local_files.run_workflow")
    docs = sorted(str(p) for p in (folder / "sample_docs").iterdir())
    assert dataset_ids(run, "inputs") == [("file", p) for p in docs]
    job = run["run"]["facets"]["workflowsvc_job"]
    assert job["workflowName"] == "airflow-example-local-files"
    assert (job["status"], job["documentsWritten"], job["failedCount"]) == ("completed", 4, 1)
    assert re.fullmatch(r"[0-9a-f-]{36}", job["jobId"])
    assert re.fullmatch(r"[0-9a-f-]{36}", job["workflowId"])
    (output,) = dataset_ids(run, "outputs")
    assert output[1].endswith(f"/jobs/{job['jobId']}/output")
    failed = run["run"]["facets"]["workflowsvc_failedFiles"]
    assert failed["failedCount"] == 1
    assert [f["document"] for f in failed["files"]] == ["empty.txt"]
    assert failed["files"][0]["error"]
    # the download continues the graph: the job's output in the service → the local directory
    download = complete_event(events, "workflowsvc_example_local_files.download_output")
    assert dataset_ids(download, "inputs") == [output]
    out_dir = str(folder.parent / "out" / job["jobId"])
    assert dataset_ids(download, "outputs") == [("file", out_dir)]


def test_connectors_example_lineage(lineage_events: dict[str, Any]) -> None:
    run = complete_event(lineage_events["events"], "workflowsvc_example_connectors_pipeline.run_workflow")
    assert dataset_ids(run, "inputs") == [
        ("https://example.atlassian.net/wiki", "spaces/ENG"),
        ("https://example.atlassian.net/wiki", "spaces/SALES"),
    ]
    assert dataset_ids(run, "outputs") == [
        ("astradb://0c1d-eu-west-1.apps.astra.datastax.com", "default_keyspace.confluence_pages")
    ]
    job = run["run"]["facets"]["workflowsvc_job"]
    assert job["workflowName"] == "airflow-example-confluence-to-astradb"
    assert job["status"] == "completed"
    assert job["failedCount"] == 0
    assert job["documentsWritten"] > 0
    assert "workflowsvc_failedFiles" not in run["run"]["facets"]


def test_connector_driven_lineage_reads_only_identifying_settings(lineage_events: dict[str, Any]) -> None:
    events = lineage_events["events"]
    s3_to_astra = complete_event(events, "lineage_s3_to_astradb.run_workflow")
    assert dataset_ids(s3_to_astra, "inputs") == [("s3://lineage-in", "handbook")]
    assert dataset_ids(s3_to_astra, "outputs") == [
        ("astradb://db-1234-eu.apps.astra.datastax.com", "docs_ks.handbook")
    ]
    assert s3_to_astra["run"]["facets"]["workflowsvc_job"]["documentsWritten"] == 3
    box_to_s3 = complete_event(events, "lineage_box_to_s3.run_workflow")
    ((namespace, name),) = dataset_ids(box_to_s3, "inputs")
    assert namespace == "workflowsvc://box"
    assert re.fullmatch(r"[0-9a-f-]{36}", name)
    assert dataset_ids(box_to_s3, "outputs") == [("s3://lineage-out", "processed")]


def test_an_s3_fed_run_names_its_objects_and_the_download_its_prefix(lineage_events: dict[str, Any]) -> None:
    """Issue #35: objects as OpenLineage names them (``s3://bucket`` and the key), not a local path."""
    events = lineage_events["events"]
    run = complete_event(events, "lineage_object_storage.run_workflow")
    namespace = f"s3://{STORAGE_BUCKET}"
    assert dataset_ids(run, "inputs") == [(namespace, "docs/a.txt"), (namespace, "docs/sub/b.md")]
    (output,) = dataset_ids(run, "outputs")
    assert output[1].endswith(f"/jobs/{run['run']['facets']['workflowsvc_job']['jobId']}/output")
    download = complete_event(events, "lineage_object_storage.download_output")
    assert dataset_ids(download, "inputs") == [output]
    assert dataset_ids(download, "outputs") == [(namespace, "out/lineage")]


def test_no_secret_reaches_any_event(lineage_events: dict[str, Any]) -> None:
    raw = lineage_events["raw"]
    assert raw.count('"workflowsvc_job"') >= 4  # the events searched are the ones with our facets
    leaked = [value for value in lineage_events["secrets"] if value in raw]
    assert leaked == []


def example_facets(events: list[dict[str, Any]], folder: Path, service: str) -> dict[str, Any]:
    """The run tasks' lineage in the example DAGs, with run-specific values replaced by placeholders."""
    found: dict[str, Any] = {}
    for dag_id in ("workflowsvc_example_local_files", "workflowsvc_example_connectors_pipeline"):
        run = complete_event(events, f"{dag_id}.run_workflow")
        job = run["run"]["facets"]["workflowsvc_job"]
        found[dag_id] = {
            "inputs": [{"namespace": d["namespace"], "name": d["name"]} for d in run["inputs"]],
            "outputs": [{"namespace": d["namespace"], "name": d["name"]} for d in run["outputs"]],
            "run_facets": {k: v for k, v in run["run"]["facets"].items() if k.startswith("workflowsvc")},
        }
        text = json.dumps(found[dag_id])
        for value, placeholder in (
            (job["jobId"], "<job id>"),
            (job["workflowId"], "<workflow id>"),
            (str(folder), "<repo>/example_dags"),
            (service.split("://", 1)[1].split("/", 1)[0], "<service host>"),
        ):
            text = text.replace(value, placeholder)
        found[dag_id] = json.loads(text)
    return found


def test_documented_example_facets_are_what_the_provider_emits(lineage_events: dict[str, Any]) -> None:
    """``docs/lineage-examples.json`` is this output (rewrite: $WORKFLOWSVC_UPDATE_LINEAGE_EXAMPLES=1)."""
    found = example_facets(lineage_events["events"], lineage_events["folder"], lineage_events["service"])
    if os.environ.get(UPDATE_EXAMPLES_ENV):
        EXAMPLES_JSON.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    documented = json.loads(EXAMPLES_JSON.read_text())
    for facets in (found, documented):  # the producer's version varies with the installed provider
        for entry in facets.values():
            for facet in entry["run_facets"].values():
                facet.pop("_producer", None)
    assert documented == found
