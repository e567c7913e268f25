"""The emulator as a process: command line, printed URL, signals, persistence across restarts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.emulator.__main__ import main
from airflow_provider_workflowsvc.emulator.testing import emulator_command, running_emulator, stop_process

URL_LINE = re.compile(r"^Workflow Service emulator listening on (http://127\.0\.0\.1:\d+/api/v1)$")


def start(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start the emulator; its first stdout line must be exactly the URL line."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().rstrip("\n")
    match = URL_LINE.match(line)
    if match is None:
        stop_process(proc)
        pytest.fail(f"unexpected first line {line!r}")
    return proc, match.group(1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_prints_url_and_stops_cleanly(sig: signal.Signals) -> None:
    script = Path(sys.executable).with_name("workflowsvc-emulator")
    command = [str(script), *emulator_command()[3:]] if sig is signal.SIGINT else emulator_command()
    proc, url = start([*command, "--token", "cli-token-123", "--api-key", "cli-key-456"])
    try:
        headers = {"authorization": "Bearer cli-token-123", "service-api-key": "cli-key-456"}
        assert httpx.get(url + "/sources", headers=headers).status_code == 200
        assert (
            httpx.get(url + "/sources", headers={"authorization": "Bearer cli-token-123"}).status_code == 401
        )
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "cli-token-123" not in out + err
    assert "cli-key-456" not in out + err
    assert out == ""  # nothing but the URL line is printed


def test_cli_options_reach_the_emulator() -> None:
    extra = ["--redirect-slashes", "--fault-errors", "503", "--fault-count", "1", "--processing-delay", "2"]
    proc, url = start(emulator_command(extra_args=extra))
    try:
        root = url.removesuffix("/api/v1")
        headers = {"authorization": "Bearer emulator-token"}
        config = httpx.get(root + "/_emulator/config", headers=headers).json()
        assert (config["redirect_slashes"], config["processing_delay"]) == ("spec", 2.0)
        assert httpx.get(url + "/sources", headers=headers).status_code == 503
        assert httpx.get(url + "/sources/", headers=headers).status_code == 307
    finally:
        assert stop_process(proc) == 0


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--processing-delay", "-1", "--token", "not-shown-token"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "processing_delay: Input should be greater than or equal to 0" in err
    assert "not-shown-token" not in err


def test_state_survives_a_restart_with_db(tmp_path: Path) -> None:
    db = str(tmp_path / "state.sqlite")
    sample = tmp_path / "notes.txt"
    sample.write_text("Notes\n\nKept across restarts.\n")
    with running_emulator(subprocess=True, db=db, processing_delay=30) as emu, emu.api_client() as api:
        assert emu.pid is not None
        source = api.post(
            "/sources", json={"name": "s", "type": "s3", "config": {"remote_url": "s3://b"}}
        ).json()
        flow = api.post("/workflows/", json={"name": "local", "workflow_type": "basic"}).json()
        files = [("input_files", (sample.name, sample.read_bytes(), "text/plain"))]
        job = api.post(f"/workflows/{flow['id']}/run", files=files).json()
        emu.advance_clock(60)
        assert api.get(f"/jobs/{job['id']}").json()["status"] == "in progress"
        first_pid = emu.pid
    with running_emulator(subprocess=True, db=db) as emu, emu.api_client() as api:
        assert emu.pid != first_pid
        assert api.get(f"/sources/{source['id']}").json()["name"] == "s"
        assert api.get(f"/workflows/{flow['id']}").json()["name"] == "local"
        assert api.get(f"/jobs/{job['id']}").json()["status"] == "in progress"  # clock offset kept too
        emu.advance_clock(60)
        record: dict[str, Any] = api.get(f"/jobs/{job['id']}").json()
        assert record["status"] == "completed"
        elements = api.get(f"/jobs/{job['id']}/download", params=record["output_node_files"][0]).json()
        # a basic workflow chunks its elements (#47): one chunk holding the title and the paragraph
        assert [e["text"] for e in elements] == ["Notes\n\nKept across restarts."]
        emu.reset()
    with running_emulator(db=db) as emu, emu.api_client() as api:  # in process, same file
        assert api.get("/workflows/").json() == []


def _run_status(url: str) -> tuple[int, str]:
    """The status code and job status of a run of a new local workflow."""
    headers = {"authorization": "Bearer emulator-token"}
    with httpx.Client(base_url=url, headers=headers) as api:
        flow = api.post("/workflows/", json={"name": "w", "workflow_type": "basic"}).json()
        run = api.post(
            f"/workflows/{flow['id']}/run", files=[("input_files[]", ("a.txt", b"Text.", "text/plain"))]
        )
        return run.status_code, run.json()["status"]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, (200, "scheduled")),
        (["--dialect", "platform"], {}, (202, "SCHEDULED")),
        ([], {"WORKFLOWSVC_EMULATOR_DIALECT": "platform"}, (202, "SCHEDULED")),
        (["--dialect", "spec"], {"WORKFLOWSVC_EMULATOR_DIALECT": "platform"}, (200, "scheduled")),
    ],
    ids=["default", "flag", "environment", "flag-over-environment"],
)
def test_the_dialect_comes_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], expected: tuple[int, str]
) -> None:
    monkeypatch.delenv("WORKFLOWSVC_EMULATOR_DIALECT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proc, url = start([*emulator_command(processing_delay=3600), *args])  # still scheduled when answered
    try:
        assert _run_status(url) == expected
    finally:
        stop_process(proc)


def test_an_unknown_dialect_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WORKFLOWSVC_EMULATOR_DIALECT", "legacy")
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "WORKFLOWSVC_EMULATOR_DIALECT must be one of: spec, platform" in capsys.readouterr().err
    with (
        pytest.raises(ValueError, match="unknown emulator dialect 'legacy'"),
        running_emulator(dialect="legacy"),
    ):  # type: ignore[arg-type]
        pass


# A sitecustomize that makes the [emulator] extra's modules look uninstalled (as after a plain
# `pip install airflow-provider-workflowsvc`), whatever the test virtualenv holds.
BLOCK_EXTRA = """
import importlib.abc
import sys

BLOCKED = {"fastapi", "starlette", "uvicorn"}


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def _run_without_extra(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_EXTRA)
    script = Path(sys.executable).with_name("workflowsvc-emulator")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=60)


def test_without_the_extra_the_command_names_it_in_one_line(tmp_path: Path) -> None:
    result = _run_without_extra(tmp_path, "--port", "0")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "pip install 'airflow-provider-workflowsvc[emulator]'" in result.stderr
    assert result.stderr.startswith("workflowsvc-emulator: ")


def test_without_the_extra_help_still_works(tmp_path: Path) -> None:
    result = _run_without_extra(tmp_path, "--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert "--dialect" in result.stdout


def test_a_missing_module_outside_the_extra_is_not_blamed_on_it() -> None:
    from airflow_provider_workflowsvc.emulator.__main__ import missing_extra_message

    assert missing_extra_message(ModuleNotFoundError("No module named 'pydantic'", name="pydantic")) is None
    message = missing_extra_message(ModuleNotFoundError("No module named 'uvicorn.x'", name="uvicorn.x"))
    assert message is not None
    assert "uvicorn is not installed" in message
