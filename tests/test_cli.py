"""``airflow workflowsvc``: the commands through Airflow's own command line, each command's output and errors.

* Airflow 3.2+ runs them from the provider info's ``cli`` (a real ``airflow`` process against the
  emulator); ``python -m airflow_provider_workflowsvc.cli`` runs the same declarations anywhere.
* Each command against the emulator (both dialects): lists filtered by workflow and status, a job in
  full with the user's own file names, a cancel asked for and confirmed, the formats Airflow's own
  commands print (``table``, ``json``, ``yaml``), and errors that say what was wrong, exit status 1.
* Declaring the commands costs the other ``airflow`` commands nothing: the module Airflow imports loads
  nothing but Airflow's CLI declarations, which the CLI has loaded already.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_workflowsvc.cli.__main__ import main
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


@pytest.fixture
def service(
    workflowsvc_conn: Any, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A workflow with a completed job (one file failed) and a running one; ``workflowsvc_default`` set."""
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "client")  # a command sets it: restored after the test
    (tmp_path / "report.txt").write_text("Title\n\nSome text.")
    (tmp_path / "empty.txt").write_text("")
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.01)
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow("nightly-docs", "basic")
        other = hook.create_workflow("other-docs", "basic")
        done = hook.run_workflow(str(workflow.id), files=[tmp_path / "report.txt", tmp_path / "empty.txt"])
        hook.run_workflow(str(other.id), files=[tmp_path / "report.txt"])
        emulator.advance_clock(60)  # both end
        emulator.configure(processing_delay=600)
        running = hook.run_workflow(str(workflow.id), files=[tmp_path / "report.txt"])
        emulator.advance_clock(601)  # out of "scheduled": in progress for hours
    assert done is not None
    assert running is not None
    return {"workflow": str(workflow.id), "done": done.id, "running": running.id, "emulator": emulator}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str, int]:
    """Run one command as ``python -m airflow_provider_workflowsvc.cli`` does: its output and exit status."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return out, err, code


def test_jobs_list_by_workflow_name_and_status(service: dict[str, Any], capsys: Any) -> None:
    out, _, code = run(capsys, "jobs", "list", "--workflow-name", "nightly-docs", "-o", "json")
    listed = json.loads(out)
    assert code == 0
    assert [job["id"] for job in listed] == [service["running"], service["done"]]  # newest first
    assert {job["workflow_id"] for job in listed} == {service["workflow"]}

    out, _, _ = run(
        capsys, "jobs", "list", "--workflow-id", service["workflow"], "--status", "in_progress", "-o", "yaml"
    )
    assert [job["id"] for job in yaml.safe_load(out)] == [service["running"]]

    out, _, _ = run(capsys, "jobs", "list", "--limit", "2")  # a table, every workflow's jobs
    assert out.splitlines()[0].split("|")[0].strip() == "id"
    assert len([line for line in out.splitlines() if "|" in line]) == 3  # the header and two jobs


def test_jobs_show_gives_the_record_the_progress_and_the_users_own_failed_file_names(
    service: dict[str, Any], capsys: Any
) -> None:
    out, _, code = run(capsys, "jobs", "show", service["done"], "-o", "json")
    (job,) = json.loads(out)
    assert code == 0
    assert job["id"] == service["done"]
    assert job["status"].lower() == "completed"
    assert [f["document"] for f in job["failed_files"]] == ["empty.txt"]
    assert [n["node"] for n in job["node_stats"]] == ["Partitioner", "Chunker", "Embedder"]

    out, _, _ = run(capsys, "jobs", "show", service["done"])  # the tables: the job, its nodes, its failures
    assert "empty.txt" in out
    assert "Partitioner" in out


def test_jobs_cancel_asks_first_and_says_what_it_did(
    service: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    _, err, code = run(capsys, "jobs", "cancel", service["running"])
    assert (code, err.strip()) == (1, "Not cancelled")
    monkeypatch.setattr("builtins.input", _no_terminal)  # a script: nobody to answer
    _, err, code = run(capsys, "jobs", "cancel", service["running"])
    assert (code, err.strip()) == (1, NO_ANSWER)

    out, _, code = run(capsys, "jobs", "cancel", service["running"], "--yes", "-o", "json")
    assert (code, json.loads(out)) == (
        0,
        [{"id": service["running"], "status_before": _running(service), "cancelled": "True"}],
    )
    out, _, _ = run(capsys, "jobs", "cancel", service["done"], "--yes", "-o", "json")
    assert json.loads(out)[0]["cancelled"] == "False"  # it had ended: nothing to cancel


NO_ANSWER = "Not cancelled: no answer on standard input (pass --yes to cancel without asking)"


def _no_terminal(prompt: str) -> str:
    raise EOFError  # what input() raises when standard input is at its end


def _running(service: dict[str, Any]) -> str:
    """The running job's status as the service spells it in a job record."""
    return "IN_PROGRESS" if service["emulator"].dialect == "platform" else "in progress"


def test_workflows_list_and_by_name(service: dict[str, Any], capsys: Any) -> None:
    out, _, _ = run(capsys, "workflows", "list", "-o", "json")
    assert [w["name"] for w in json.loads(out)] == ["nightly-docs", "other-docs"]
    out, _, _ = run(capsys, "workflows", "list", "--name", "other-docs", "-o", "json")
    assert [w["name"] for w in json.loads(out)] == ["other-docs"]


def test_templates_list_where_the_service_has_templates(service: dict[str, Any], capsys: Any) -> None:
    out, err, code = run(capsys, "templates", "list", "-o", "json")
    if service["emulator"].dialect == "platform":
        assert code == 0
        assert "hi_res_partition" in [t["id"] for t in json.loads(out)]
    else:  # the spec's service has no templates: said so, not a bare 404
        assert code == 1
        assert "This service has no workflow templates" in err


def test_errors_say_what_was_wrong_and_exit_1(service: dict[str, Any], capsys: Any) -> None:
    _, err, code = run(capsys, "jobs", "list", "--status", "bogus")
    assert (code, err.strip()) == (
        1,
        "Error: no job is listed in status 'bogus': expected one of scheduled, in_progress, completed, "
        "failed, stopped (either dialect's spelling)",
    )
    _, err, code = run(capsys, "jobs", "list", "--workflow-name", "nobody")
    assert (code, err.strip()) == (1, "Error: no workflow is named 'nobody' (check the name and --conn-id)")
    _, err, code = run(capsys, "jobs", "list", "--workflow-name", "x", "--workflow-id", service["workflow"])
    assert (code, err.strip()) == (1, "Error: give --workflow-id or --workflow-name, not both")
    _, err, code = run(capsys, "jobs", "show", "job/1")
    assert (code, err.strip()) == (1, "Error: job_id must be a non-empty job id, got 'job/1'")


def test_connection_check_says_whether_the_connection_works(
    service: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = service["emulator"]
    out, _, code = run(capsys, "connection", "check")
    assert (code, out.strip()) == (0, f"Connection successful: {emulator.base_url} accepted the credentials.")

    wrong = {"conn_type": "workflowsvc", "host": emulator.base_url, "password": "tok-wrong-000000"}
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_WRONG", json.dumps(wrong))
    _, err, code = run(capsys, "connection", "check", "--conn-id", "workflowsvc_wrong")
    assert code == 1
    assert err.startswith("Connection failed: 401")
    assert "tok-wrong-000000" not in err


# --------------------------------------------------------------------------------------------------
# Through Airflow's own command line


@pytest.mark.airflow_min("3.2", reason="Airflow adds a provider's commands to its command line from 3.2")
@pytest.mark.dialect("platform", reason="Airflow's wiring of the commands is the same in both dialects")
def test_airflow_runs_the_commands_from_the_provider_info(service: dict[str, Any]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "_AIRFLOW_PROCESS_CONTEXT"}
    listed = subprocess.run(
        [AIRFLOW, "workflowsvc", "jobs", "list", "--workflow-name", "nightly-docs", "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    # the last line: Airflow says on stdout first that it loaded the tests' configuration (unit_tests.cfg)
    printed = json.loads(listed.stdout.strip().splitlines()[-1])
    assert [job["id"] for job in printed] == [service["running"], service["done"]]
    missing = subprocess.run(
        [AIRFLOW, "workflowsvc", "connection", "check", "--conn-id", "workflowsvc_missing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert missing.returncode == 1
    assert "Connection failed: AirflowNotFoundException: The conn_id `workflowsvc_missing` isn't defined" in (
        missing.stderr
    )


def test_declaring_the_commands_loads_nothing_but_airflows_cli_declarations() -> None:
    """What Airflow imports at the start of every ``airflow`` command, to list the provider's commands."""
    probe = (
        "import sys, airflow.cli.cli_config\n"
        "before = set(sys.modules)\n"
        "from airflow_provider_workflowsvc.cli.definition import get_cli_commands\n"
        "get_cli_commands()\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    ours = {"airflow_provider_workflowsvc.cli", "airflow_provider_workflowsvc.cli.definition"}
    assert ours <= loaded <= {*ours, "airflow_provider_workflowsvc"}  # the package root imports nothing


def test_the_services_text_is_shown_by_the_operators_rules() -> None:
    """
    A marker comes out only where the job record shows the run was marked (an unmarked name keeps a
    look-alike), and what a URL carries as credentials is masked, as in a task's summary and log.
    """
    from helpers import job_json

    from airflow_provider_workflowsvc.cli.commands import _service_text
    from airflow_provider_workflowsvc.models import Job

    marker = "__wfsvc-0123456789abcdef"
    marked = Job.model_validate({**job_json("j1", "completed"), "input_file_ids": [f"a{marker}.txt"]})
    unmarked = Job.model_validate(job_json("j2", "completed"))
    assert _service_text(f"a{marker}.txt failed", marked) == "a.txt failed"
    assert _service_text(f"a{marker}.txt failed", unmarked) == f"a{marker}.txt failed"
    masked = _service_text("cannot reach mongodb://admin:hunter2@db.example/x", unmarked)
    assert "hunter2" not in masked
    assert "***" in masked


# --------------------------------------------------------------------------------------------------
# Issue #43, item 6: the service's text is shown as text


ESCAPES = "\x1b]0;owned\x07\x1b[31mred\x1b[0m\x9b2J"
"""An OSC (the terminal's title), CSI colour codes and a C1 CSI (clear the screen), as a name may hold."""


@pytest.fixture
def odd_names(service: dict[str, Any], settings: Any, tmp_path: Path) -> dict[str, Any]:
    """Workflows named ``in [/data] out``, ``[prod] nightly`` and with terminal escapes; a failed file too."""
    emulator = service["emulator"]
    emulator.configure(processing_delay=0.01)
    names = {"crash": "in [/data] out", "markup": "[prod] nightly", "escapes": f"wf{ESCAPES}"}
    document = tmp_path / "doc\x1b[31mred\x1b[0m\x9b2J.txt"  # (an upload's name keeps ESC, not BEL)
    document.write_text("")  # empty: it fails, and its name is a failed file's document
    with WorkflowServiceHook(settings=settings) as hook:
        ids = {key: str(hook.create_workflow(name, "basic").id) for key, name in names.items()}
        job = hook.run_workflow(ids["crash"], files=[document, tmp_path / "report.txt"])
        emulator.advance_clock(60)
    assert job is not None
    return {"names": names, "ids": ids, "job": job.id, "document": document.name}


@pytest.mark.parametrize("output", ["table", "plain"])
def test_the_services_text_is_printed_as_text_never_as_markup_or_terminal_codes(
    odd_names: dict[str, Any], capsys: Any, output: str
) -> None:
    printed = {
        "workflows list": run(capsys, "workflows", "list", "-o", output),
        "jobs list": run(capsys, "jobs", "list", "--workflow-id", odd_names["ids"]["crash"], "-o", output),
        "jobs show": run(capsys, "jobs", "show", odd_names["job"], "-o", output),
    }
    failed = {command: err[-300:] for command, (_, err, code) in printed.items() if code != 0}
    assert not failed, failed  # a name holding "[/" crashed rich's markup parser
    listed, jobs, shown = (out for out, _, _ in printed.values())
    assert "[prod] nightly" in listed  # not "nightly": "[prod]" was taken as a style
    assert "in [/data] out" in listed
    assert "in [/data] out" in jobs
    assert "doc" in shown
    for command, (out, _, _) in printed.items():
        codes = [c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0]
        assert not codes, (command, codes)  # no escape sequence reaches the terminal
    assert "wf\\x1b]0;owned\\x07\\x1b[31mred" in listed  # shown, escaped, not dropped


def test_json_and_yaml_keep_the_services_text_exact(odd_names: dict[str, Any], capsys: Any) -> None:
    out, _, code = run(capsys, "workflows", "list", "-o", "json")
    assert code == 0
    assert sorted(w["name"] for w in json.loads(out)) == sorted(
        [*odd_names["names"].values(), "nightly-docs", "other-docs"]
    )
    out, _, code = run(capsys, "jobs", "show", odd_names["job"], "-o", "yaml")
    assert code == 0
    (job,) = yaml.safe_load(out)
    assert [f["document"] for f in job["failed_files"]] == [odd_names["document"]]
    assert "\x1b" not in out  # YAML writes it as an escape, JSON too


def test_status_offers_only_the_statuses_the_service_lists(service: dict[str, Any], capsys: Any) -> None:
    """``completed_with_errors`` is a platform details status, never a job's: the service refused it (422)."""
    from airflow_provider_workflowsvc.cli.definition import ARG_STATUS

    offered = ARG_STATUS.kwargs["help"].split(": ")[1].split(" (")[0].split(", ")
    assert offered == ["scheduled", "in_progress", "completed", "failed", "stopped"]
    for status in offered:
        _, err, code = run(capsys, "jobs", "list", "--status", status, "-o", "json")
        assert code == 0, err
    before = len(service["emulator"].requests())
    _, err, code = run(capsys, "jobs", "list", "--status", "completed_with_errors")
    assert code == 1
    assert err.strip() == (
        "Error: no job is listed in status 'completed_with_errors': expected one of scheduled, in_progress, "
        "completed, failed, stopped (either dialect's spelling)"
    )
    assert len(service["emulator"].requests()) == before  # refused before any request
