"""Unit tests of the emulator's pure parts: partitioning, remote documents, job timeline, faults.

PDFs have their own module: test_emulator_pdf.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_workflowsvc.emulator.config import EmulatorConfig, FaultSpec
from airflow_provider_workflowsvc.emulator.errors import render_errors
from airflow_provider_workflowsvc.emulator.faults import FaultInjector
from airflow_provider_workflowsvc.emulator.jobs import JobFile, JobNode, JobRecord
from airflow_provider_workflowsvc.emulator.middleware import redirect_target
from airflow_provider_workflowsvc.emulator.partition import PartitionError, partition
from airflow_provider_workflowsvc.emulator.remote import remote_documents
from airflow_provider_workflowsvc.emulator.schema import JobState
from airflow_provider_workflowsvc.emulator.service import check_failure
from airflow_provider_workflowsvc.models import Element


def kinds(elements: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["text"]) for e in elements]


# --------------------------------------------------------------------------------------------------
# Partitioning


def test_text_paragraphs_titles_lists_and_form_feed_pages() -> None:
    data = (
        b"Annual Report\n\nRevenue grew. Costs fell.\nMore text.\n\n- one\n- two\f\nSecond Page\n\nEnd text."
    )
    elements = partition("report.txt", "text/plain", data)
    assert kinds(elements) == [
        ("Title", "Annual Report"),
        ("NarrativeText", "Revenue grew. Costs fell. More text."),
        ("ListItem", "one"),
        ("ListItem", "two"),
        ("Title", "Second Page"),
        ("NarrativeText", "End text."),
    ]
    assert [e["metadata"]["page_number"] for e in elements] == [1, 1, 1, 1, 2, 2]
    assert {e["metadata"]["filename"] for e in elements} == {"report.txt"}
    assert {e["metadata"]["filetype"] for e in elements} == {"text/plain"}
    for element in elements:
        Element.model_validate(element)


def test_element_ids_are_deterministic_and_distinct() -> None:
    data = b"Title\n\nSame.\n\nSame."
    first, second = partition("a.txt", None, data), partition("a.txt", None, data)
    assert [e["element_id"] for e in first] == [e["element_id"] for e in second]
    assert len({e["element_id"] for e in first}) == len(first)
    assert first[0]["element_id"] != partition("b.txt", None, data)[0]["element_id"]


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        (
            "doc.md",
            b"# Heading\n\nPara one\nline two.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nx = 1\n```\n* x\n",
            [
                ("Title", "Heading"),
                ("NarrativeText", "Para one line two."),
                ("Table", "a b\n1 2"),
                ("CodeSnippet", "x = 1"),
                ("ListItem", "x"),
            ],
        ),
        (
            "page.html",
            b"<html><head><title>T</title><style>p{}</style></head><body><h2>Head</h2><p>Para &amp; more.</p>"
            b"<ul><li>one</li></ul><table><tr><th>a</th></tr><tr><td>1</td></tr></table>"
            b"<div>loose text here.</div></body></html>",
            [
                ("Title", "Head"),
                ("NarrativeText", "Para & more."),
                ("ListItem", "one"),
                ("Table", "a\n1"),
                ("NarrativeText", "loose text here."),
            ],
        ),
        (
            "bullets.txt",
            "Options\n\n\u25cf round\n\u2022 dot\n\u25aa square\n\u2013 dash\n- hyphen\n2) two".encode(),
            [
                ("Title", "Options"),
                *[("ListItem", item) for item in ("round", "dot", "square", "dash", "hyphen", "two")],
            ],
        ),
        ("data.csv", b"name,qty\napple,3\n", [("Table", "name qty\napple 3")]),
        ("data.tsv", b"name\tqty\npear\t4\n", [("Table", "name qty\npear 4")]),
        (
            "doc.json",
            b'{"title": "Doc", "body": ["x is here.", {"n": 3}]}',
            [("Title", "Doc"), ("NarrativeText", "x is here."), ("NarrativeText", "body[1].n: 3")],
        ),
        (
            "doc.xml",
            b"<doc><title>XT</title><p>Para text.</p></doc>",
            [("Title", "XT"), ("NarrativeText", "Para text.")],
        ),
    ],
)
def test_text_like_formats(name: str, data: bytes, expected: list[tuple[str, str]]) -> None:
    assert kinds(partition(name, None, data)) == expected


def test_tables_carry_html() -> None:
    (table,) = partition("t.csv", "text/csv", b"a,b\n1,<2>\n")
    assert (
        table["metadata"]["text_as_html"]
        == "<table><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>&lt;2&gt;</td></tr></table>"
    )


def test_media_type_decides_when_there_is_no_extension() -> None:
    (element,) = partition("README", "text/markdown", b"# Hello")
    assert element["type"] == "Title"
    assert element["metadata"]["filetype"] == "text/markdown"


@pytest.mark.parametrize(
    ("name", "media_type", "data", "reason"),
    [
        ("a.txt", "text/plain", b"", "empty"),
        ("a.txt", "text/plain", b"  \n\n", "only whitespace"),
        ("a.txt", "text/plain", b"ab\x00cd", "binary data"),
        ("a.txt", "text/plain", b"abc\xff\xfe", r"not valid UTF-8 text \(invalid byte at offset 3\)"),
        ("a.bin", "application/octet-stream", b"xyz", "unsupported file type"),
        ("a.docx", None, b"PK", "unsupported file type"),
        ("a.json", None, b"{bad", "invalid JSON"),
        ("a.xml", None, b"<a><b></a>", "invalid XML"),
        ("a.xml", None, b'<!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>', "entity"),
        ("a.pdf", None, b"not a pdf", "not a PDF"),
        ("a.csv", None, b'a,"b\n', "malformed"),
    ],
)
def test_unprocessable_files_say_why(name: str, media_type: str | None, data: bytes, reason: str) -> None:
    with pytest.raises(PartitionError, match=reason):
        partition(name, media_type, data)


# --------------------------------------------------------------------------------------------------
# Remote documents and connection checks


def test_confluence_documents_follow_spaces_and_caps() -> None:
    config = {
        "url": "https://wiki.example.com",
        "spaces": ["A", "B", "C"],
        "max_num_of_spaces": 2,
        "max_num_of_docs_from_each_space": 3,
    }
    docs = remote_documents("confluence", config)
    assert len(docs) == 6
    assert {d.data_source["record_locator"]["space_key"] for d in docs if d.data_source} == {"A", "B"}
    permissions = docs[0].data_source["permissions_data"] if docs[0].data_source else []
    assert [next(iter(p)) for p in permissions] == ["read", "update", "delete"]
    assert all(set(next(iter(p.values()))) == {"users", "groups"} for p in permissions)
    assert docs == remote_documents("confluence", config)


def test_confluence_defaults_two_spaces_of_five() -> None:
    assert len(remote_documents("confluence", {"url": "https://w.example.com"})) == 10


def test_generic_documents_from_hints_or_hash() -> None:
    docs = remote_documents(
        "s3", {"remote_url": "s3://b", "emulator_documents": 4, "emulator_failed_documents": 1}
    )
    assert len(docs) == 4
    assert [d.error is not None for d in docs] == [False, False, False, True]
    assert 1 <= len(remote_documents("s3", {"remote_url": "s3://other"})) <= 3


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"url": "https://ok.example.com", "token": "fine"}, None),
        ({"url": "https://ok.example.com", "token": "x-fail-check-x"}, "credentials in config field 'token'"),
        ({"bucket": "fail-check"}, "resource in config field 'bucket'"),
        ({"url": "https://host.invalid/x"}, "host in config field 'url' could not be resolved"),
        ({"nested": {"api_key": "FAIL-CHECK"}}, "config field 'nested.api_key'"),
    ],
)
def test_connection_check_outcome(config: dict[str, Any], reason: str | None) -> None:
    outcome = check_failure(config)
    if reason is None:
        assert outcome is None
    else:
        assert outcome is not None
        assert reason in outcome
        assert "fail-check" not in outcome.lower()


# --------------------------------------------------------------------------------------------------
# Job timeline


def make_job(errors: list[str | None], delay: float = 10.0) -> JobRecord:
    nodes = [JobNode(f"n{j}", f"Node{j}", "t", "s") for j in range(3)]
    files = [JobFile(f"f{i}", f"id{i}", error) for i, error in enumerate(errors)]
    return JobRecord("j", "w", "wf", 1000.0, delay, nodes, files, local_source=True, local_destination=True)


def stats(job: JobRecord, at: float) -> list[tuple[int, int, int, int]]:
    return [(s["ready"], s["in_progress"], s["success"], s["failure"]) for s in job.node_stats(at)]


def test_pipeline_timeline() -> None:
    job = make_job([None, "bad", None])
    assert job.status(1000.0) is JobState.SCHEDULED
    assert stats(job, 1000.0) == [(3, 0, 0, 0)] * 3
    assert job.status(1010.0) is JobState.IN_PROGRESS
    assert stats(job, 1010.0) == [(2, 1, 0, 0), (3, 0, 0, 0), (3, 0, 0, 0)]
    assert stats(job, 1020.0) == [(1, 1, 1, 0), (2, 1, 0, 0), (3, 0, 0, 0)]
    assert job.failed_files(1020.0) == []
    assert stats(job, 1030.0) == [(0, 1, 1, 1), (1, 0, 1, 0), (1, 1, 0, 0)]
    assert [f.name for f in job.failed_files(1030.0)] == ["f1"]
    assert job.status(1059.0) is JobState.IN_PROGRESS
    assert job.status(1060.0) is JobState.COMPLETED
    assert stats(job, 1060.0) == [(0, 0, 2, 1), (0, 0, 2, 0), (0, 0, 2, 0)]
    assert [(f, node.id) for f, node in job.outputs(1060.0)] == [("id0", "n2"), ("id2", "n2")]
    assert "Processed 2 of 3" in job.message(1060.0)


def test_all_failed_and_empty_jobs() -> None:
    failed = make_job(["bad", "worse"])
    assert failed.status(2000.0) is JobState.FAILED
    assert failed.message(2000.0).startswith("All 2 file(s) failed; first error: f0: bad")
    assert failed.outputs(2000.0) == []
    empty = make_job([])
    assert empty.status(1010.0) is JobState.COMPLETED
    empty.empty_message = "no input"
    assert empty.status(1010.0) is JobState.FAILED
    assert empty.message(1010.0) == "no input"


def test_stopped_job_freezes() -> None:
    job = make_job([None, None])
    job.stopped_at = 1025.0
    assert job.status(5000.0) is JobState.STOPPED
    assert stats(job, 5000.0) == stats(job, 1025.0)
    assert job.outputs(5000.0) == []


def test_zero_delay_completes_at_once() -> None:
    assert make_job([None], delay=0).status(1000.0) is JobState.COMPLETED


def test_round_trip_through_dict() -> None:
    job = make_job([None, "bad"])
    assert JobRecord.from_dict(job.to_dict()) == job


# --------------------------------------------------------------------------------------------------
# Faults, redirects, error rendering


def test_fault_rules_match_count_and_seed() -> None:
    injector = FaultInjector()
    injector.set(
        FaultSpec.model_validate({"errors": [503], "count": 2, "method": "get", "path": "/api/v1/jobs*"})
    )
    assert injector.decide("POST", "/api/v1/jobs") is None
    assert [d.error if d else None for d in (injector.decide("GET", "/api/v1/jobs/x") for _ in range(3))] == [
        503,
        503,
        None,
    ]
    spec = FaultSpec.model_validate({"errors": "429,500,drop", "rate": 0.5, "seed": 7})
    runs = []
    for _ in range(2):
        injector.set(spec)
        runs.append([str(injector.decide("GET", "/api/v1/x")) for _ in range(30)])
    assert runs[0] == runs[1]
    assert any(d == "None" for d in runs[0])
    assert any(d != "None" for d in runs[0])


def test_regex_rules_and_latency_only() -> None:
    injector = FaultInjector()
    injector.set(FaultSpec(rules=[{"path_regex": r"/details$", "latency": 0.5}]))  # type: ignore[list-item]
    decision = injector.decide("GET", "/api/v1/jobs/1/details")
    assert decision is not None
    assert decision.latency == 0.5
    assert decision.error is None
    assert injector.decide("GET", "/api/v1/jobs/1") is None


@pytest.mark.parametrize(
    ("mode", "method", "path", "target"),
    [
        ("off", "GET", "/api/v1/sources/", None),
        ("spec", "GET", "/api/v1/sources/", "/api/v1/sources"),
        ("spec", "GET", "/api/v1/sources", None),
        ("spec", "GET", "/api/v1/workflows", "/api/v1/workflows/"),
        ("spec", "GET", "/api/v1/destinations/", "/api/v1/destinations"),
        ("spec", "POST", "/api/v1/destinations", "/api/v1/destinations/"),
        ("spec", "GET", "/api/v1/jobs/abc", None),
        ("spec", "DELETE", "/api/v1/jobs/", None),
        ("add", "POST", "/api/v1/workflows/x/run", "/api/v1/workflows/x/run/"),
        ("add", "GET", "/api/v1/jobs/", None),
        ("strip", "GET", "/api/v1/destinations/", "/api/v1/destinations"),
        ("strip", "GET", "/api/v1/", None),
    ],
)
def test_redirect_targets(mode: str, method: str, path: str, target: str | None) -> None:
    config = EmulatorConfig(redirect_slashes=mode)  # type: ignore[arg-type]
    assert redirect_target(method, path, config) == target


def test_rendered_errors_never_echo_input() -> None:
    errors = [
        {
            "type": "uuid_parsing",
            "loc": ("id",),
            "msg": "invalid character: found `s` at 0",
            "input": "sekret",
        },
        {
            "type": "value_error",
            "loc": ("x",),
            "msg": "Value error, bad value sekret-token",
            "input": "sekret-token",
        },
        {"type": "missing", "loc": ("function-after[x]", "name"), "msg": "Field required", "input": {}},
    ]
    rendered = render_errors(errors, ("body",))
    assert rendered == [
        {"loc": ["body", "id"], "msg": "Input should be a valid UUID", "type": "uuid_parsing"},
        {"loc": ["body", "x"], "msg": "Invalid value", "type": "value_error"},
        {"loc": ["body", "name"], "msg": "Field required", "type": "missing"},
    ]


# --------------------------------------------------------------------------------------------------
# Connector config masking


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("s3://user:pass@bucket/key", "s3://**********@bucket/key"),
        ("https://token@git.example.com/repo", "https://**********@git.example.com/repo"),
        (
            "see mongodb://a:b@h1,h2/db and redis://:pw@cache:6379",
            "see mongodb://**********@h1,h2/db and redis://**********@cache:6379",
        ),
        ("https://example.com/path@v2", "https://example.com/path@v2"),
        ("plain text", "plain text"),
    ],
)
def test_uri_credentials_are_masked(text: str, masked: str) -> None:
    from airflow_provider_workflowsvc.emulator.masking import mask_uri_credentials

    assert mask_uri_credentials(text) == masked


def test_the_masking_rule_depends_on_the_connector_type() -> None:
    from airflow_provider_workflowsvc.emulator.masking import MASK, mask_config

    config = {"remote_url": "s3://bucket", "account_name": "acct", "recursive": True, "count": 3}
    assert mask_config("source", "azure", config) == config
    assert mask_config("source", "s3", config) == {**config, "account_name": MASK}
    assert mask_config("source", "dropbox", config) == {**config, "remote_url": MASK, "account_name": MASK}
    assert mask_config("destination", "azure", config)["account_name"] == MASK  # no azure destination list


def test_the_emulator_masks_url_queries_of_known_settings() -> None:
    """Issue #24: a SAS or presigned URL under a known non-secret key keeps its location, not its query."""
    from airflow_provider_workflowsvc.emulator.masking import MASK, mask_config

    config = {
        "remote_url": "https://acct.blob.core.windows.net/c/docs?sv=2022&sig=abc%2Bdef",
        "recursive": True,
    }
    assert mask_config("source", "azure", config) == {
        "remote_url": f"https://acct.blob.core.windows.net/c/docs?{MASK}",
        "recursive": True,
    }
