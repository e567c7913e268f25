"""The emulated API over HTTP: auth, validation, conflicts, listings, slash forms, connection checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import check_spelling

SECRET = "s3cr3t-value-never-echoed"
CONFLUENCE = {"url": "https://wiki.example.com", "username": "me@example.com", "token": SECRET}


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    with emulator.api_client() as client:
        yield client


def create(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def source(api: httpx.Client, name: str = "src", **config: Any) -> dict[str, Any]:
    return create(api, "/sources", {"name": name, "type": "s3", "config": {"remote_url": "s3://b", **config}})


def destination(api: httpx.Client, name: str = "dst") -> dict[str, Any]:
    return create(api, "/destinations/", {"name": name, "type": "s3", "config": {"remote_url": "s3://out"}})


def workflow(api: httpx.Client, name: str = "wf", **fields: Any) -> dict[str, Any]:
    return create(api, "/workflows/", {"name": name, "workflow_type": "basic", **fields})


def errors_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 422, response.text
    detail: list[dict[str, Any]] = response.json()["detail"]
    assert all(set(e) == {"loc", "msg", "type"} for e in detail)
    return detail


# --------------------------------------------------------------------------------------------------
# Authentication


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": "Basic xyz"},
        {"authorization": "Bearer {token}"},
        {"authorization": "Bearer {token}", "service-api-key": "wrong"},
    ],
)
def test_unauthenticated_requests_get_401(emulator: Any, headers: dict[str, str]) -> None:
    headers = {k: v.format(token=emulator.token) for k, v in headers.items()}
    response = httpx.get(emulator.base_url + "/sources", headers=headers)
    assert response.status_code == 401
    assert "Not authenticated" in response.json()["detail"]
    assert emulator.token not in response.text
    assert emulator.api_key not in response.text


def test_bearer_scheme_is_case_insensitive_and_control_needs_no_api_key(emulator: Any) -> None:
    headers = {"authorization": f"bearer {emulator.token}", "service-api-key": emulator.api_key}
    assert httpx.get(emulator.base_url + "/sources", headers=headers).status_code == 200
    control = {"authorization": f"bearer {emulator.token}"}
    assert httpx.get(emulator.root_url + "/_emulator/health", headers=control).json()["status"] == "ok"


# --------------------------------------------------------------------------------------------------
# Connectors: shapes, validation, conflicts


def test_connector_shape_masks_secrets(api: httpx.Client) -> None:
    created = create(api, "/sources", {"name": "wiki", "type": "confluence", "config": CONFLUENCE})
    assert uuid.UUID(created["id"])
    assert created["type"] == "confluence"
    assert created["updated_at"] is None
    assert created["config"]["token"] == "**********"
    assert created["config"]["max_num_of_docs_from_each_space"] == 150
    assert SECRET not in api.get(f"/sources/{created['id']}").text
    astra = {
        "collection_name": "c",
        "api_endpoint": "https://a.example.com",
        "token": SECRET,
        "flatten_metadata": False,
    }
    dest = create(api, "/destinations/", {"name": "astra", "type": "astradb", "config": astra})
    assert "flatten_metadata" not in dest["config"]


MASK = "**********"


@pytest.mark.parametrize(
    ("collection", "connector_type", "config", "shown"),
    [
        (
            "sources",
            "s3",
            {
                "remote_url": f"s3://AKIAUSER:{SECRET}@bucket/docs",
                "endpoint_url": "https://minio.example.com",
                "anonymous": False,
                "recursive": True,
                "key": "AKIAUSER",
                "secret": SECRET,
                "region": "eu-west-1",
            },
            {
                "remote_url": f"s3://{MASK}@bucket/docs",
                "endpoint_url": "https://minio.example.com",
                "anonymous": False,
                "recursive": True,
                "key": MASK,
                "secret": MASK,
                "region": MASK,
            },
        ),
        (
            "sources",
            "azure",
            {
                "remote_url": "az://container/x",
                "account_name": "acct",
                "account_key": SECRET,
                "recursive": False,
            },
            {
                "remote_url": "az://container/x",
                "account_name": "acct",
                "account_key": MASK,
                "recursive": False,
            },
        ),
        (
            "sources",
            "box",
            {"remote_url": "box://folder", "box_app_config": {"client": SECRET, "n": 3}, "ids": [SECRET, 7]},
            {"remote_url": MASK, "box_app_config": {"client": MASK, "n": 3}, "ids": [MASK, 7]},
        ),
        (
            "destinations",
            "astradb",
            {
                "collection_name": "c",
                "keyspace": "k",
                "api_endpoint": "https://a.example.com",
                "token": SECRET,
            },
            {"collection_name": "c", "keyspace": "k", "api_endpoint": "https://a.example.com", "token": MASK},
        ),
        (
            "destinations",
            "postgres",
            {"uri": f"postgresql://admin:{SECRET}@db.example.com/app", "batch_size": 100},
            {"uri": MASK, "batch_size": 100},
        ),
    ],
    ids=["s3", "azure", "box", "astradb", "postgres"],
)
def test_connector_configs_show_only_known_settings(
    api: httpx.Client, collection: str, connector_type: str, config: dict[str, Any], shown: dict[str, Any]
) -> None:
    created = create(api, f"/{collection}/", {"name": "c1", "type": connector_type, "config": config})
    assert created["config"] == shown
    updated = api.put(f"/{collection}/{created['id']}", json={"config": config})
    assert updated.json()["config"] == shown
    for answer in (created, updated.json(), *api.get(f"/{collection}/").json()):
        assert SECRET not in str(answer)
    assert SECRET not in api.get(f"/{collection}/{created['id']}").text


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        (
            {"name": "x", "type": "ftp", "config": {"a": SECRET}},
            ["body", "type"],
            "unknown source connector type",
        ),
        ({"type": "s3", "config": {"a": 1}}, ["body", "name"], "name"),
        ({"name": "x", "type": "s3"}, ["body", "config"], "Field required"),
        ({"name": "x", "type": "s3", "config": {}}, ["body", "config"], "must not be empty"),
        (
            {"name": "x", "type": "confluence", "config": {"url": "https://w"}},
            ["body", "config"],
            "no authentication",
        ),
        (
            {"name": "x", "type": "confluence", "config": {**CONFLUENCE, "password": SECRET}},
            ["body", "config"],
            "mixes authentication variants",
        ),
        (
            {"name": "x", "type": "confluence", "config": {"url": "https://w", "password": SECRET}},
            ["body", "config"],
            "username is missing",
        ),
        (
            {
                "name": "x",
                "type": "confluence",
                "config": {"url": "https://w", "token": SECRET, "cloud": True},
            },
            ["body", "config"],
            "requires cloud=false",
        ),
        (
            {"name": "x", "type": "azure", "config": {"remote_url": "az://c", "sas_tokn": SECRET}},
            ["body", "config", "sas_tokn"],
            "Extra inputs",
        ),
        ({"name": "x", "type": "s3", "config": {"a": 1}, "owner": SECRET}, ["body", "owner"], "Extra inputs"),
    ],
)
def test_connector_validation(api: httpx.Client, body: dict[str, Any], loc: list[str], message: str) -> None:
    response = api.post("/sources", json=body)
    errors = errors_of(response)
    assert any(e["loc"] == loc and message in e["msg"] for e in errors), errors
    assert SECRET not in response.text


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b""])
def test_bodies_that_are_not_objects(api: httpx.Client, raw: bytes) -> None:
    response = api.post("/sources", content=raw, headers={"content-type": "application/json"})
    assert errors_of(response)[0]["loc"] == ["body"]


def test_update_connector_rules(api: httpx.Client) -> None:
    created = create(api, "/sources", {"name": "wiki", "type": "confluence", "config": CONFLUENCE})
    path = f"/sources/{created['id']}"
    renamed = api.put(path, json={"name": "other", "config": CONFLUENCE})
    assert errors_of(renamed) == [
        {"loc": ["body", "name"], "msg": "name cannot be changed", "type": "value_error"}
    ]
    retyped = errors_of(api.put(path, json={"type": "s3", "config": CONFLUENCE}))
    assert retyped[0]["msg"] == "type cannot be changed"
    bad = api.put(path, json={"config": {**CONFLUENCE, "password": SECRET}})
    assert "mixes" in errors_of(bad)[0]["msg"]
    assert SECRET not in bad.text
    updated = api.put(path, json={"name": "wiki", "config": {**CONFLUENCE, "spaces": ["ENG"]}}).json()
    assert updated["config"]["spaces"] == ["ENG"]
    assert updated["updated_at"] is not None
    assert updated["name"] == "wiki"


def test_not_found_and_bad_ids(api: httpx.Client) -> None:
    missing = str(uuid.uuid4())
    for path in (
        f"/sources/{missing}",
        f"/destinations/{missing}",
        f"/workflows/{missing}",
        f"/jobs/{missing}",
    ):
        response = api.get(path)
        assert response.status_code == 404
        assert missing in response.json()["detail"]
    assert errors_of(api.get("/sources/not-a-uuid")) == [
        {"loc": ["path", "source_id"], "msg": "Input should be a valid UUID", "type": "uuid_parsing"}
    ]
    assert errors_of(api.get("/jobs/123"))[0]["loc"] == ["path", "job_id"]
    src = source(api)
    assert api.get(f"/destinations/{src['id']}").status_code == 404


def test_duplicate_names_conflict_per_kind(api: httpx.Client) -> None:
    first = source(api, "same")
    response = api.post("/sources", json={"name": "same", "type": "gcs", "config": {"bucket": "b"}})
    assert response.status_code == 409
    assert first["id"] in response.json()["detail"]
    destination(api, "same")
    workflow(api, "flow")
    assert api.post("/workflows/", json={"name": "flow", "workflow_type": "basic"}).status_code == 409


def test_delete_connector_in_use_conflicts(api: httpx.Client) -> None:
    src = source(api)
    flow = workflow(api, source_id=src["id"])
    assert api.delete(f"/sources/{src['id']}").status_code == 409
    assert api.delete(f"/workflows/{flow['id']}").status_code == 200
    assert api.delete(f"/sources/{src['id']}").status_code == 200
    assert api.get(f"/sources/{src['id']}").status_code == 404


def test_list_connectors_with_type_filter(api: httpx.Client) -> None:
    source(api, "a")
    create(api, "/sources", {"name": "b", "type": "gcs", "config": {"bucket": "x"}})
    assert [s["name"] for s in api.get("/sources").json()] == ["a", "b"]
    assert [s["name"] for s in api.get("/sources", params={"source_type": "gcs"}).json()] == ["b"]
    assert errors_of(api.get("/sources", params={"source_type": "ftp"}))[0]["loc"] == ["query", "source_type"]
    destination(api)
    assert [d["name"] for d in api.get("/destinations/", params={"destination_type": "s3"}).json()] == ["dst"]


# --------------------------------------------------------------------------------------------------
# Workflows: shapes, validation, listing


def test_workflow_shape_and_schedule(api: httpx.Client) -> None:
    src, dst = source(api), destination(api)
    flow = workflow(
        api, source_id=src["id"], destination_id=dst["id"], schedule="every hour", reprocess_all=True
    )
    assert flow["sources"] == [src["id"]]
    assert flow["destinations"] == [dst["id"]]
    assert flow["schedule"] == {"crontab_entries": [{"cron_expression": "0 * * * *"}]}
    assert flow["status"] == "active"
    assert flow["reprocess_all"] is True
    assert [n["name"] for n in flow["workflow_nodes"]] == ["Partitioner", "Chunker", "Embedder"]
    assert all(uuid.UUID(n["id"]) for n in flow["workflow_nodes"])
    updated = api.put(f"/workflows/{flow['id']}", json={"schedule": None, "name": "renamed"}).json()
    assert updated["schedule"] is None
    assert updated["name"] == "renamed"
    assert updated["updated_at"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"name": "w", "workflow_type": "basic", "schedule": "hourly"}, ["body", "schedule"]),
        ({"name": "w", "workflow_type": "weird"}, ["body", "workflow_type"]),
        ({"workflow_type": "basic"}, ["body", "name"]),
        ({"name": "w", "workflow_type": "custom"}, ["body"]),
        ({"name": "w", "workflow_type": "basic", "source_id": SECRET}, ["body", "source_id"]),
        ({"name": "w", "workflow_type": "basic", "source_id": str(uuid.uuid4())}, ["body", "source_id"]),
    ],
)
def test_workflow_validation(api: httpx.Client, body: dict[str, Any], loc: list[str]) -> None:
    response = api.post("/workflows/", json=body)
    assert errors_of(response)[0]["loc"] == loc
    assert SECRET not in response.text


def test_custom_workflow_nodes_and_update_rules(api: httpx.Client) -> None:
    nodes = [{"name": "Parse", "type": "partition", "subtype": "fast", "settings": {"k": 1}}]
    flow = workflow(api, workflow_type="custom", workflow_nodes=nodes)
    assert [(n["name"], n["settings"]) for n in flow["workflow_nodes"]] == [("Parse", {"k": 1})]
    path = f"/workflows/{flow['id']}"
    assert api.put(path, json={"workflow_type": "basic"}).json()["workflow_nodes"][0]["name"] == "Partitioner"
    kept = api.put(path, json={"workflow_type": "custom"}).json()  # a custom workflow keeps its nodes
    assert [n["name"] for n in kept["workflow_nodes"]] == ["Partitioner", "Chunker", "Embedder"]
    assert errors_of(api.put(path, json={"workflow_nodes": []}))[0]["loc"] == ["body", "workflow_nodes"]
    assert errors_of(api.put(path, json={}))[0]["loc"] == ["body"]
    assert errors_of(api.put(path, json={"status": "paused"}))[0]["loc"] == ["body", "status"]
    assert api.put(path, json={"status": "inactive"}).json()["status"] == "inactive"


def test_workflow_listing_filters_sort_and_pages(emulator: Any, api: httpx.Client) -> None:
    src, dst = source(api), destination(api)
    names = [f"wf-{i:02d}" for i in range(25)]
    created = {}
    for i, name in enumerate(names):
        fields = {"source_id": src["id"]} if i % 5 == 0 else {}
        if i == 3:
            fields["destination_id"] = dst["id"]
        created[name] = workflow(api, name, **fields)
        emulator.advance_clock(10)
    recommender = workflow(api, "recommender-auto")
    api.put(f"/workflows/{created['wf-07']['id']}", json={"status": "inactive"})
    api.delete(f"/workflows/{created['wf-09']['id']}")

    def listed(**params: Any) -> list[str]:
        response = api.get("/workflows/", params=params)
        assert response.status_code == 200, response.text
        return [w["name"] for w in response.json()]

    everything = [n for n in names if n != "wf-09"]
    by_id = sorted(everything, key=lambda n: created[n]["id"])
    assert listed() == by_id[:20]
    assert listed(page=2) == by_id[20:]
    assert listed(sort_by="name", page_size=100) == everything
    assert listed(sort_by="name", sort_direction="desc", page=2, page_size=5) == everything[::-1][5:10]
    assert listed(sort_by="created_at", page_size=3, page=3) == everything[6:9]
    assert listed(name="WF-1", sort_by="name") == [n for n in everything if n.startswith("wf-1")]
    assert listed(source_id=src["id"], sort_by="name") == ["wf-00", "wf-05", "wf-10", "wf-15", "wf-20"]
    assert listed(destination_id=dst["id"]) == ["wf-03"]
    assert listed(status="inactive") == ["wf-07"]
    assert "wf-07" not in listed(status="active", page_size=100)
    since, before = created["wf-10"]["created_at"], created["wf-13"]["created_at"]
    assert listed(created_since=since, created_before=before, sort_by="name") == ["wf-10", "wf-11", "wf-12"]
    assert listed(show_only_soft_deleted="true") == ["wf-09"]
    assert "recommender-auto" not in listed(page_size=100)
    assert "recommender-auto" in listed(page_size=100, show_recommender_workflows="true")
    node_id = created["wf-04"]["workflow_nodes"][0]["id"]
    assert listed(dag_node_configuration_id=node_id) == ["wf-04"]
    assert listed(dag_node_configuration_id=recommender["workflow_nodes"][0]["id"]) == []
    assert errors_of(api.get("/workflows/", params={"sort_by": "color"}))[0]["loc"] == ["query", "sort_by"]
    assert errors_of(api.get("/workflows/", params={"page": 0}))[0]["loc"] == ["query", "page"]
    assert errors_of(api.get("/workflows/", params={"status": "paused"}))[0]["loc"] == ["query", "status"]


def test_deleted_workflow_is_gone_but_listed_as_soft_deleted(api: httpx.Client) -> None:
    flow = workflow(api)
    assert api.delete(f"/workflows/{flow['id']}").json()["detail"].endswith("deleted")
    assert api.get(f"/workflows/{flow['id']}").status_code == 404
    assert api.delete(f"/workflows/{flow['id']}").status_code == 404
    assert api.post(f"/workflows/{flow['id']}/run").status_code == 404
    workflow(api)  # the name is free again


# --------------------------------------------------------------------------------------------------
# Slash forms and redirects


COLLECTIONS = ["/sources", "/destinations", "/workflows", "/jobs"]


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_both_slash_forms_without_redirects(api: httpx.Client, collection: str) -> None:
    for path in (collection, collection + "/"):
        response = api.get(path)
        assert response.status_code == 200
        assert response.json() == []


@pytest.mark.parametrize("status", [301, 307, 308])
def test_spec_redirect_mode(emulator: Any, api: httpx.Client, status: int) -> None:
    emulator.configure(redirect_slashes="spec", redirect_status=status)
    redirected = api.get("/sources/", params={"source_type": "s3"})
    assert redirected.status_code == status
    assert redirected.headers["location"] == "/api/v1/sources?source_type=s3"
    assert api.get("/sources").status_code == 200
    assert api.get("/workflows").headers["location"] == "/api/v1/workflows/"
    assert api.get("/jobs/").headers["location"] == "/api/v1/jobs"
    response = api.post("/destinations", json={"name": "d", "type": "s3", "config": {"a": 1}})
    assert response.status_code == status
    assert response.headers["location"] == "/api/v1/destinations/"
    assert api.get("/destinations").json() == []  # nothing was created by the redirected POST
    assert api.get("/destinations/").headers["location"] == "/api/v1/destinations"
    followed = httpx.get(emulator.base_url + "/workflows", headers=dict(api.headers), follow_redirects=True)
    assert followed.status_code == 200


def test_add_and_strip_redirect_modes(emulator: Any, api: httpx.Client) -> None:
    emulator.configure(redirect_slashes="add")
    assert api.get("/sources").headers["location"] == "/api/v1/sources/"
    assert api.get("/sources/").status_code == 200
    emulator.configure(redirect_slashes="strip")
    assert api.get("/workflows/").headers["location"] == "/api/v1/workflows"
    assert api.get("/workflows").status_code == 200


# --------------------------------------------------------------------------------------------------
# Connection checks


@pytest.mark.parametrize("collection", ["sources", "destinations"])
def test_connection_check_lifecycle(emulator: Any, api: httpx.Client, collection: str) -> None:
    emulator.configure(connection_check_delay=30)
    good = create(api, f"/{collection}", {"name": "good", "type": "s3", "config": {"remote_url": "s3://b"}})
    bad_config = {"remote_url": "s3://b", "secret_access_key": "fail-check-" + SECRET}
    bad = create(api, f"/{collection}", {"name": "bad", "type": "s3", "config": bad_config})
    assert api.get(f"/{collection}/{good['id']}/connection-check").status_code == 404
    started = api.post(f"/{collection}/{good['id']}/connection-check").json()
    scheduled = check_spelling(emulator.dialect, "scheduled")
    assert started["status"] == scheduled
    assert started["reason"] is None
    assert uuid.UUID(started["id"])
    assert api.get(f"/{collection}/{good['id']}/connection-check").json()["status"] == scheduled
    api.post(f"/{collection}/{bad['id']}/connection-check")
    emulator.advance_clock(30)
    result = api.get(f"/{collection}/{good['id']}/connection-check").json()
    success = check_spelling(emulator.dialect, "success")
    assert result["status"] == success
    assert result["id"] == started["id"]
    assert result["reported_at"]
    failure = api.get(f"/{collection}/{bad['id']}/connection-check")
    assert failure.json()["status"] == check_spelling(emulator.dialect, "failure")
    assert "secret_access_key" in failure.json()["reason"]
    assert SECRET not in failure.text


def test_fixing_the_config_fixes_the_next_check(emulator: Any, api: httpx.Client) -> None:
    config = {"url": "https://wiki.invalid", "username": "u", "token": "t"}
    created = create(api, "/sources", {"name": "wiki", "type": "confluence", "config": config})
    path = f"/sources/{created['id']}"
    api.post(f"{path}/connection-check")
    emulator.advance_clock(1)
    assert "could not be resolved" in api.get(f"{path}/connection-check").json()["reason"]
    api.put(path, json={"config": {**config, "url": "https://wiki.example.com"}})
    api.post(f"{path}/connection-check")
    emulator.advance_clock(1)
    assert api.get(f"{path}/connection-check").json()["status"] == check_spelling(emulator.dialect, "success")


def test_unknown_routes_and_methods(api: httpx.Client) -> None:
    assert api.get("/partition").status_code == 404
    assert api.patch("/sources").status_code == 405
