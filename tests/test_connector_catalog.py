"""The table of connector knowledge read from the live docs, and what it drives (issue #23)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_provider_workflowsvc import connectors_catalog as catalog
from airflow_provider_workflowsvc._tasks.secrets import config_secrets
from airflow_provider_workflowsvc.connectors_catalog import check_config, known_types, settings_of
from airflow_provider_workflowsvc.models import DestinationType, SourceType
from scripts.build_connector_table import TABLE_FILE, dump
from scripts.connector_settings_page import PAGE, example_config, render

ALL = [(k, t) for k in ("source", "destination") for t in known_types(k)]  # type: ignore[arg-type]


def test_the_committed_settings_page_is_what_the_table_gives() -> None:
    assert PAGE.read_text() == render(), "run: python scripts/connector_settings_page.py"
    assert "connector-settings" in (PAGE.parent / "index.rst").read_text()


def test_the_table_is_package_data_as_its_script_writes_it() -> None:
    text = TABLE_FILE.read_text()
    table = json.loads(text)
    revision = table.pop("docs_revision")
    assert text == dump(table, revision), "regenerate it: python scripts/build_connector_table.py"
    assert revision == catalog.DOCS_REVISION
    assert len(revision) == 40


def test_importing_the_operators_reads_no_table() -> None:
    statement = (
        "import airflow_provider_workflowsvc.operators.connectors, airflow_provider_workflowsvc.models; "
        "from airflow_provider_workflowsvc.connectors_catalog import _table; "
        "print(_table.cache_info().misses)"
    )
    read = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, check=True)
    assert read.stdout.split()[-1] == "0", (
        "the table is read when a connector is first checked, not on import"
    )


def test_every_known_type_has_a_settings_entry_and_back() -> None:
    from airflow_provider_workflowsvc.emulator.dialect import connector_types

    assert set(known_types("source")) == {t.value for t in SourceType}
    assert set(known_types("destination")) == {t.value for t in DestinationType}
    # the emulator (which never imports the provider) knows the same list in its platform dialect
    assert set(connector_types("source", "platform")) == set(known_types("source"))
    assert set(connector_types("destination", "platform")) == set(known_types("destination"))
    sources, destinations = len(known_types("source")), len(known_types("destination"))
    print(f"\nsettings entries: {sources} sources / {destinations} destinations")


@pytest.mark.parametrize(("kind", "connector_type"), ALL)
def test_each_entry_is_consistent_and_its_example_passes(kind: str, connector_type: str) -> None:
    entry = settings_of(kind, connector_type)  # type: ignore[arg-type]
    assert entry is not None
    assert entry.settings, "a type with no settings"
    documented = set(entry.settings)
    assert set(entry.required) <= documented
    assert entry.secret <= documented
    assert entry.url <= documented
    assert all(set(keys) <= documented for keys in entry.auth_variants.values())
    assert check_config(kind, connector_type, example_config(kind, connector_type)) == []  # type: ignore[arg-type]


def test_spellings_of_a_type_find_its_entry() -> None:
    assert settings_of("source", "Kafka_Cloud") is settings_of("source", "kafka-cloud")
    assert settings_of("destination", "nope") is None
    assert check_config("destination", "nope", {"anything": 1}) == []


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"bucket": "b"}, "missing required setting 'remote_url'"),
        ({"remote_url": "not-a-url", "anonymous": True}, "setting 'remote_url' must be a URL"),
        (
            {"remote_url": "s3://b", "endpoint_url": "minio:9000", "anonymous": True},
            "'endpoint_url' must be a URL",
        ),
    ],
)
def test_known_settings_are_checked(config: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        check_config("source", "s3", config)


def test_unknown_settings_and_incomplete_authentication_warn() -> None:
    warnings = check_config("source", "s3", {"remote_url": "s3://b", "secert": "x", "key": "k"})
    assert warnings == [
        "source connector type 's3': setting 'secert' is not one the provider knows (sent as given); "
        "did you mean 'secret'?",
        "source connector type 's3': no complete authentication; the docs give these ways: AWS STS token "
        "authentication: token, key, secret; AWS access key ID with AWS secret access key authentication: "
        "key, secret; anonymous authentication: anonymous",
    ]


def test_a_template_is_not_checked_as_a_url() -> None:
    pending = catalog.check_config(
        "source",
        "s3",
        {"remote_url": "{{ var.value.bucket }}", "anonymous": True},
        pending=lambda v: "{{" in v,
    )
    assert pending == []


def test_masking_knows_the_docs_secrets_and_plain_settings() -> None:
    config = {
        "client_id": "app-id-visible",
        "client_cred": "cred-hidden",
        "user_pname": "me@example.com",
        "password": "pw-hidden",
        "tenant": "tenant-visible",
        "authority_url": "https://login.example.com",
        "undocumented": "also-hidden",
    }
    secrets = set(config_secrets(config, "onedrive"))
    assert secrets == {"cred-hidden", "pw-hidden", "also-hidden"}
