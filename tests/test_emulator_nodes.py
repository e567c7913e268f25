"""The emulator's chunk and embed nodes, and what destination connectors receive: the node functions
directly (fast), then over HTTP in both dialects (runs, on-demand jobs, the control API's writes)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.emulator.nodes import NodeError, decode_orig_elements, run_nodes
from airflow_provider_workflowsvc.emulator.partition import Block, make_elements

STEP = 100.0


def elements(*blocks: tuple[str, str] | tuple[str, str, int]) -> list[dict[str, Any]]:
    return make_elements("doc.txt", "text/plain", [Block(*b) for b in blocks])


def chunk(subtype: str, items: list[dict[str, Any]], **settings: Any) -> list[dict[str, Any]]:
    return run_nodes([{"type": "chunk", "subtype": subtype, "settings": settings}], items)


def texts(chunks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["type"], c["text"]) for c in chunks]


DOC = elements(
    ("Title", "Intro", 1),
    ("NarrativeText", "First words.", 1),
    ("Title", "Body", 1),
    ("NarrativeText", "Second words.", 2),
)


# --------------------------------------------------------------------------------------------------
# The nodes themselves


def test_chunk_by_title_starts_a_chunk_at_each_title_and_each_page() -> None:
    assert texts(chunk("chunk_by_title", DOC)) == [
        ("CompositeElement", "Intro\n\nFirst words."),
        ("CompositeElement", "Body"),
        ("CompositeElement", "Second words."),
    ]
    assert texts(chunk("chunk_by_title", DOC, multipage_sections=True)) == [
        ("CompositeElement", "Intro\n\nFirst words."),
        ("CompositeElement", "Body\n\nSecond words."),
    ]
    # a section under 30 characters is combined with the next while the chunk fits
    combined = chunk("chunk_by_title", DOC, combine_text_under_n_chars=30, multipage_sections=True)
    assert texts(combined) == [("CompositeElement", "Intro\n\nFirst words.\n\nBody\n\nSecond words.")]


def test_the_other_chunkers_draw_their_own_boundaries() -> None:
    assert texts(chunk("chunk_by_character", DOC)) == [
        ("CompositeElement", "Intro\n\nFirst words.\n\nBody\n\nSecond words.")
    ]
    assert [t for _, t in texts(chunk("chunk_by_page", DOC))] == [
        "Intro\n\nFirst words.\n\nBody",
        "Second words.",
    ]
    similar = elements(
        ("NarrativeText", "red apples grow"), ("NarrativeText", "red apples fall"), ("Title", "Cars")
    )
    assert [t for _, t in texts(chunk("chunk_by_similarity", similar, similarity_threshold=0.6))] == [
        "red apples grow\n\nred apples fall",
        "Cars",
    ]


def test_size_limits_split_long_text_with_overlap_and_keep_tables_apart() -> None:
    long = elements(("NarrativeText", "abcdefghij" * 3), ("Table", "a b"), ("NarrativeText", "tail"))
    pieces = chunk("chunk_by_character", long, max_characters=12, overlap=2)
    assert texts(pieces) == [
        ("CompositeElement", "abcdefghijab"),
        ("CompositeElement", "abcdefghijab"),
        ("CompositeElement", "abcdefghij"),
        ("Table", "a b"),
        ("CompositeElement", "tail"),
    ]
    soft = chunk(
        "chunk_by_character",
        elements(("NarrativeText", "aaaa"), ("NarrativeText", "bbbb")),
        new_after_n_chars=3,
    )
    assert [t for _, t in texts(soft)] == ["aaaa", "bbbb"]
    everywhere = chunk("chunk_by_character", soft, max_characters=4, overlap=2, overlap_all=True)
    assert [t for _, t in texts(everywhere)] == ["aaaa", "aa bbbb"]


def test_orig_elements_are_base64_zlib_json_of_the_chunk_s_elements() -> None:
    [first, *_] = chunk("chunk_by_title", DOC, include_orig_elements=True)
    assert first["metadata"]["orig_elements"].startswith("eJ")  # zlib's header, as the service writes it
    assert decode_orig_elements(first["metadata"]["orig_elements"]) == DOC[:2]
    assert "orig_elements" not in chunk("chunk_by_title", DOC)[0]["metadata"]  # the documented default


@pytest.mark.parametrize(
    ("subtype", "settings", "size"),
    [
        ("azure_openai", {"model_name": "text-embedding-3-large"}, 3072),
        ("voyageai", {"model_name": "voyage-3-lite"}, 512),
        ("bedrock", {"model_name": "amazon.titan-embed-text-v2:0"}, 1024),
        ("text-embedding-3-small", {}, 1536),  # the model as the subtype: the emulator's default workflows
    ],
)
def test_embeddings_have_the_model_s_dimension_and_are_deterministic(
    subtype: str, settings: dict[str, Any], size: int
) -> None:
    node = [{"type": "embed", "subtype": subtype, "settings": settings}]
    once, again = run_nodes(node, DOC), run_nodes(node, DOC)
    assert [len(e["embeddings"]) for e in once] == [size] * len(DOC)
    assert once == again
    assert all(math.isclose(sum(v * v for v in e["embeddings"]), 1.0, abs_tol=1e-4) for e in once)
    assert once[0]["embeddings"] != once[1]["embeddings"]
    assert [{k: v for k, v in e.items() if k != "embeddings"} for e in once] == DOC


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ({"type": "chunk", "subtype": "chunk_by_paragraph"}, "unknown chunker subtype 'chunk_by_paragraph'"),
        (
            {"type": "chunk", "subtype": "chunk_by_title", "settings": {"max_characters": "9"}},
            "max_characters",
        ),
        (
            {"type": "embed", "subtype": "openai"},
            "unknown embedder subtype 'openai'; the providers are: azure",
        ),
        ({"type": "embed", "subtype": "voyageai", "settings": {"model_name": "voyage-9"}}, "'voyage-9'"),
        ({"type": "embed", "subtype": "voyageai"}, "needs settings.model_name"),
    ],
)
def test_an_unknown_subtype_model_or_setting_is_a_clear_reason(node: dict[str, Any], reason: str) -> None:
    with pytest.raises(NodeError, match=reason.replace(".", r"\.").replace("(", r"\(")):
        run_nodes([node], DOC)


# --------------------------------------------------------------------------------------------------
# Over HTTP

NODES = [
    {"name": "Partitioner", "type": "partition", "subtype": "unstructured_api", "settings": {}},
    {
        "name": "Chunker",
        "type": "chunk",
        "subtype": "chunk_by_title",
        "settings": {"include_orig_elements": True},
    },
    {"name": "Embedder", "type": "embed", "subtype": "voyageai", "settings": {"model_name": "voyage-3-lite"}},
]
TEXT = b"Plan\n\nBuild it.\n\nShip\n\nShip it."


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    emulator.configure(processing_delay=STEP)
    with emulator.api_client() as client:
        yield client


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def custom_workflow(api: httpx.Client, name: str, nodes: list[dict[str, Any]], **fields: Any) -> str:
    body = {"name": name, "workflow_type": "custom", "workflow_nodes": nodes, **fields}
    return str(ok(api.post("/workflows/", json=body))["id"])


def run(api: httpx.Client, workflow_id: str, *files: tuple[str, bytes]) -> str:
    parts = [("input_files", (name, data, "text/plain")) for name, data in files]
    response = api.post(f"/workflows/{workflow_id}/run", files=parts)
    assert response.status_code in (200, 202), response.text  # 202: the platform dialect
    return str(response.json()["id"])


def test_a_custom_workflow_s_output_is_chunked_and_embedded(emulator: Any, api: httpx.Client) -> None:
    job_id = run(api, custom_workflow(api, "nodes", NODES), ("plan.txt", TEXT))
    emulator.advance_clock(10 * STEP)
    [output] = ok(api.get(f"/jobs/{job_id}"))["output_node_files"]
    chunks = ok(api.get(f"/jobs/{job_id}/download", params=output))
    assert [(c["type"], c["text"], len(c["embeddings"])) for c in chunks] == [
        ("CompositeElement", "Plan\n\nBuild it.", 512),
        ("CompositeElement", "Ship\n\nShip it.", 512),
    ]
    originals = decode_orig_elements(chunks[0]["metadata"]["orig_elements"])
    assert [(e["type"], e["text"]) for e in originals] == [("Title", "Plan"), ("NarrativeText", "Build it.")]


def test_an_unknown_embedding_model_fails_each_file_saying_so(emulator: Any, api: httpx.Client) -> None:
    nodes = [*NODES[:2], {**NODES[2], "settings": {"model_name": "voyage-0"}}]
    job_id = run(api, custom_workflow(api, "bad-model", nodes), ("a.txt", TEXT), ("b.txt", TEXT))
    emulator.advance_clock(10 * STEP)
    failed = ok(api.get(f"/jobs/{job_id}/failed-files"))["failed_files"]
    assert [f["document"] for f in failed] == ["a.txt", "b.txt"]
    assert failed[0]["error"].startswith("unknown embedding model 'voyage-0' of provider 'voyageai'")


def test_a_destination_s_writes_are_kept_as_each_file_goes_through(emulator: Any, api: httpx.Client) -> None:
    config = {"remote_url": "s3://bucket/out"}
    destination = ok(api.post("/destinations/", json={"name": "lake", "type": "s3", "config": config}))
    workflow_id = custom_workflow(api, "to-lake", NODES, destination_id=destination["id"])
    emulator.configure(failing_files=["bad*"])
    job_id = run(api, workflow_id, ("one.txt", TEXT), ("bad.txt", TEXT), ("two.txt", b"Other text."))
    assert emulator.destination_writes("lake") == []  # scheduled: nothing written yet
    emulator.advance_clock(4 * STEP)  # one.txt is through the three nodes (slots 0-2)
    assert [w["document"] for w in emulator.destination_writes(destination["id"])] == ["one.txt"]
    emulator.advance_clock(10 * STEP)
    writes = emulator.destination_writes("lake")
    assert [(w["job_id"], w["document"]) for w in writes] == [(job_id, "one.txt"), (job_id, "two.txt")]
    assert [c["text"] for c in writes[1]["elements"]] == ["Other text."]
    assert len(writes[1]["elements"][0]["embeddings"]) == 512
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        emulator.destination_writes("nowhere")
    assert unknown.value.response.status_code == 404


def test_an_on_demand_job_runs_its_nodes(platform_emulator_server: Any) -> None:
    platform_emulator_server.reset()
    platform_emulator_server.configure(processing_delay=0, on_demand_launch_interval=0)
    nodes = [NODES[0], {**NODES[1], "settings": {"max_characters": 8}}, NODES[2]]
    with platform_emulator_server.api_client() as api:
        data = {"request_data": json.dumps({"job_nodes": nodes})}
        job = ok(api.post("/jobs/", data=data, files=[("input_files", ("p.txt", TEXT, "text/plain"))]))
        [output] = ok(api.get(f"/jobs/{job['id']}"))["output_node_files"]
        chunks = ok(api.get(f"/jobs/{job['id']}/download", params=output))
    assert [c["text"] for c in chunks] == ["Plan", "Build it", ".", "Ship", "Ship it."]
    assert {len(c["embeddings"]) for c in chunks} == {512}
