"""
A real Airflow deployment on this machine, for the demo and the end-to-end test.

``LocalAirflow`` creates an Airflow home, runs ``airflow db migrate`` and starts the four components
(api-server, scheduler, dag-processor, triggerer) as background processes, each in its own process
group with its log under ``<home>/components/``. It waits for the health endpoint, then offers small
helpers over the REST API (``/api/v2``): wait for a DAG to be parsed, trigger a run, poll run and task
instance states, read task logs (trigger logs included), mark a task instance failed. ``stop()`` sends
SIGTERM to every process group it created, waits, then SIGKILLs stragglers. Use it as a context manager.

``local_stack()`` also starts the Workflow Service emulator (a subprocess) and points the
``workflowsvc_default`` connection at it::

    with local_stack(Path("example_dags")) as (airflow, emulator):
        run_id = airflow.trigger_dag("workflowsvc_example_local_files")
        run = airflow.wait_for_run("workflowsvc_example_local_files", run_id)

Settings (SQLite, LocalExecutor, the simple auth manager with every user an admin) are explained in
docs/decisions/project.md and docs/architecture.md. A throwaway box: never expose it.

Two shapes share this harness. ``LocalAirflow`` above is the local one; ``DistributedAirflow`` (or
``local_stack(..., distributed=True)``) is a multi-machine deployment on this machine: PostgreSQL and
Redis on loopback ports (their Debian packages installed with ``apt-get`` when missing), the
CeleryExecutor with a Celery worker, two triggerers, and failover thresholds of seconds. It can kill a
triggerer or the worker (SIGKILL to the process group) and start another worker, and reads the
metadata database (which triggerer holds which trigger). Each component reports its name as its
hostname, so task instances and triggerer jobs say where they ran.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from scripts.component_path.local_airflow_host import HOST_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPONENT_PATH = Path(__file__).resolve().parent / "component_path"
"""The one folder on the components' ``PYTHONPATH`` (the hostname callable): see its module."""
HOSTNAME_CALLABLE = "local_airflow_host.component_hostname"
CONN_ENV = "AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"

COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("api-server", ("api-server",)),
    ("scheduler", ("scheduler", "--skip-serve-logs")),
    ("dag-processor", ("dag-processor",)),
    ("triggerer", ("triggerer", "--skip-serve-logs")),
)
# The key of each component in the health endpoint's answer.
HEALTH_KEYS = {"scheduler": "scheduler", "dag-processor": "dag_processor", "triggerer": "triggerer"}

# Keys of a structured log line not worth repeating on every line of task_log().
_ROUTINE_LOG_KEYS = frozenset(
    {"event", "timestamp", "level", "logger", "task_id", "dag_id", "run_id", "map_index", "try_number"}
    | {"ti_id", "filename", "lineno"}
)

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
TERMINAL_TI_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


class LocalAirflowError(RuntimeError):
    """Something in the local deployment did not come up or did not behave in time."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """
    Return ``predicate()``'s first truthy value; fail after ``timeout`` seconds of falsy ones (a bound
    on a wait for an event, not a claim about time).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def tail(path: Path, lines: int = 40) -> str:
    """Return the last ``lines`` lines of a text file ("" when it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def connection_json(base_url: str, token: str | None, api_key: str | None, **extra: Any) -> str:
    """Return ``workflowsvc_default`` as the JSON form of ``AIRFLOW_CONN_WORKFLOWSVC_DEFAULT``."""
    extras: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if api_key:
        extras["api_key"] = api_key
    conn: dict[str, Any] = {"conn_type": "workflowsvc", "host": base_url, "extra": extras}
    if token:
        conn["password"] = token
    return json.dumps(conn)


@dataclass
class Component:
    """A background process this harness started (the leader of its own process group)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


def _group_members(pgid: int) -> list[int]:
    """Return the live (non-zombie) processes of a process group; Linux /proc, else a best-effort probe."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait until no live process is left in group ``pgid``; return whether none is."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class LocalAirflow:
    """
    Airflow (api-server, scheduler, dag-processor, triggerer) on this machine; see the module doc.

    ``env`` is added to the components' environment (e.g. ``AIRFLOW_CONN_WORKFLOWSVC_DEFAULT``); the
    caller's own ``AIRFLOW*`` variables are not inherited. ``home`` defaults to a new temp directory
    (removed on stop unless ``keep_home``); a given ``home`` is emptied first and kept. The components
    (and so the tasks) run in ``workdir``, by default the home.
    """

    dags_folder: Path
    env: Mapping[str, str] = field(default_factory=dict)
    home: Path | None = None
    keep_home: bool = False
    parallelism: int = 2
    db_template: Path | None = None
    port: int = 0
    progress: Callable[[str], None] | None = None
    python: str = sys.executable
    workdir: Path | None = None

    components: list[Component] = field(default_factory=list, init=False)
    _owns_home: bool = field(default=False, init=False)
    _client: httpx.Client | None = field(default=None, init=False)
    # Every component must sign and check the same JWTs (workers call the execution API).
    _secrets: dict[str, str] = field(
        default_factory=lambda: {
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # HS512 wants >= 64 bytes
            # Trigger kwargs and connections are stored encrypted, as in production.
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        },
        init=False,
        repr=False,
    )

    # ---------------------------------------------------------------------------------------------
    # Lifecycle

    def __post_init__(self) -> None:
        self.dags_folder = Path(self.dags_folder).resolve()
        if self.home is None:
            self.home = Path(tempfile.mkdtemp(prefix="wfsvc-local-airflow-"))
            self._owns_home = True
        else:
            self.home = Path(self.home).resolve()
            if self.home.exists():
                shutil.rmtree(self.home)
            self.home.mkdir(parents=True)
        if not self.port:
            self.port = free_port()

    @property
    def airflow_home(self) -> Path:
        assert self.home is not None
        return self.home

    @property
    def base_url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def cwd(self) -> Path:
        """Where the components run: ``workdir``, else the Airflow home."""
        return self.workdir or self.airflow_home

    @property
    def logs_dir(self) -> Path:
        return self.airflow_home / "logs"

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def component_env(self) -> dict[str, str]:
        """Return the environment every component (and ``airflow`` CLI call) runs with."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        pythonpath = [str(COMPONENT_PATH), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(pythonpath),
                "PYTHONUNBUFFERED": "1",
                "PYTHONSAFEPATH": "1",  # `python -m airflow` never puts the working directory on the path
                "AIRFLOW_HOME": str(self.airflow_home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.airflow_home / 'airflow.db'}",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs_dir),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": HOSTNAME_CALLABLE,
            }
        )
        env.update(self._secrets)
        env.update(self.env)
        return env

    def airflow_cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run ``airflow ARGS`` with the deployment's environment; raises with its output on failure."""
        result = subprocess.run(
            [self.python, "-m", "airflow", *args],
            env=self.component_env(),
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
            raise LocalAirflowError(f"`airflow {' '.join(args)}` exited {result.returncode}:\n{output}")
        return result

    def start(self, timeout: float = 180) -> float:
        """Migrate the DB, start the components, wait until healthy; returns the seconds it took."""
        started = time.monotonic()
        try:
            self._migrate(timeout)
            for name, args in self.component_specs():
                self.start_component(name, args)
            atexit.register(self.stop, 10)  # a safety net should the caller never call stop()
            self.wait_healthy(deadline=started + timeout)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - started

    def component_specs(self) -> Sequence[tuple[str, Sequence[str]]]:
        """Return the components ``start()`` runs: (name, ``airflow`` arguments) each."""
        return COMPONENTS

    def start_component(self, name: str, args: Sequence[str]) -> Component:
        """
        Start ``airflow ARGS`` in the background as component ``name`` (own process group, log
        ``components/<name>.log``); its hostname in Airflow is ``name`` (see ``component_hostname``).
        """
        (self.airflow_home / "components").mkdir(exist_ok=True)
        log_path = self.airflow_home / "components" / f"{name}.log"
        env = {**self.component_env(), HOST_ENV: name}
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                [self.python, "-m", "airflow", *args],
                env=env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() signals the whole group
            )
        component = Component(name, process, log_path)
        self.components.append(component)
        return component

    def component(self, name: str) -> Component:
        """Return the running component called ``name``."""
        found = next((c for c in self.components if c.name == name), None)
        if found is None:
            raise LocalAirflowError(f"no component {name!r}; running: {[c.name for c in self.components]}")
        return found

    def kill_component(self, name: str) -> Component:
        """SIGKILL component ``name``'s whole process group (a crash) and forget it; return it."""
        component = self.component(name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.pid, signal.SIGKILL)
        component.process.wait(timeout=30)
        _wait_group_gone(component.pid, timeout=30)
        self.components.remove(component)
        return component

    def signal_component(self, name: str, signum: int) -> Component:
        """Send ``signum`` to component ``name``'s whole process group (SIGSTOP: a pause; SIGCONT ends it)."""
        component = self.component(name)
        os.killpg(component.pid, signum)
        return component

    def _migrate(self, timeout: float) -> None:
        """
        ``airflow db migrate``; with ``db_template``, copy a DB migrated earlier instead (and keep a
        copy of a fresh one there): saves ~10 s. Only schema and default rows are copied.
        """
        database = self.airflow_home / "airflow.db"
        template = self.db_template
        if template is not None and template.is_file():
            shutil.copyfile(template, database)
            return
        self.airflow_cli("db", "migrate", timeout=timeout)
        if template is not None:
            template.parent.mkdir(parents=True, exist_ok=True)
            partial = template.with_name(f".{template.name}.{os.getpid()}.part")
            shutil.copyfile(database, partial)
            partial.replace(template)

    def stop(self, timeout: float = 60) -> None:
        """
        SIGTERM every component's process group, wait up to ``timeout`` s, SIGKILL what is left.

        A second Ctrl-C while stopping is ignored, so it cannot leave components behind.
        """
        atexit.unregister(self.stop)
        with _sigint_ignored():
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._stop_processes(self.components, timeout)
        self._remove_home()

    def _stop_processes(
        self, components: list[Component], timeout: float, sig: signal.Signals = signal.SIGTERM
    ) -> None:
        """Send ``sig`` to each component's process group, wait up to ``timeout`` s, SIGKILL the rest."""
        groups = [c.pid for c in components]
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for component in components:
                component.process.poll()  # reap the group leaders we started
            if not any(_group_members(pgid) for pgid in groups):
                break
            time.sleep(0.2)
        else:
            for pgid in groups:
                stragglers = _group_members(pgid)
                if stragglers:
                    self._say(f"SIGKILL to process group {pgid} ({len(stragglers)} process(es) left)")
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGKILL)
            for component in components:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    component.process.wait(timeout=5)
            # SIGKILL is delivered when each process next runs: on a busy machine a child (not ours to
            # reap) can still be alive for a moment; wait for the groups to be empty.
            settled = time.monotonic() + 10
            while any(_group_members(pgid) for pgid in groups) and time.monotonic() < settled:
                time.sleep(0.05)
        components.clear()

    def _remove_home(self) -> None:
        if self._owns_home and not self.keep_home and self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> LocalAirflow:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------------
    # Health

    def _dead_component(self) -> Component | None:
        return next((c for c in self.components if not c.alive()), None)

    def _failure(self, message: str, component: Component | None) -> LocalAirflowError:
        if component is None:
            return LocalAirflowError(message)
        return LocalAirflowError(
            f"{message}\n--- last lines of {component.log_path} ---\n{tail(component.log_path)}"
        )

    def health(self) -> dict[str, Any] | None:
        """Return the health endpoint's JSON, or None while the api-server does not answer."""
        try:
            response = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        body: dict[str, Any] = response.json()
        return body

    def _warm_up(self) -> None:
        """Build the execution API (which task processes call) now: its first request takes ~3 s."""
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{self.base_url}/execution/health", timeout=60)

    def _unhealthy(self, health: dict[str, Any] | None) -> list[str]:
        if health is None:
            return ["api-server"]
        bad = [
            name for name, key in HEALTH_KEYS.items() if (health.get(key) or {}).get("status") != "healthy"
        ]
        if (health.get("metadatabase") or {}).get("status") != "healthy":
            bad.append("metadatabase")
        return bad

    def wait_healthy(self, deadline: float) -> None:
        """Wait until all four components report healthy; fail fast when one of them exits."""
        unhealthy: list[str] = ["api-server"]
        while time.monotonic() < deadline:
            dead = self._dead_component()
            if dead is not None:
                raise self._failure(
                    f"Airflow {dead.name} exited with code {dead.process.returncode} while starting", dead
                )
            unhealthy = self._unhealthy(self.health())
            if not unhealthy:
                self._warm_up()
                return
            time.sleep(0.5)
        culprit = next((c for c in self.components if c.name == unhealthy[0]), None)
        raise self._failure(
            f"Airflow was not healthy in time; still unhealthy: {', '.join(unhealthy)}", culprit
        )

    # ---------------------------------------------------------------------------------------------
    # REST API

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.base_url, timeout=30, headers=self._auth_headers())
        return self._client

    def _auth_headers(self) -> dict[str, str]:
        token = self.token()
        return {"authorization": f"Bearer {token}"} if token else {}

    def token(self) -> str | None:
        """
        Return a JWT for the REST API. With ``simple_auth_manager_all_admins`` the api-server adds one to
        every request itself; ``GET /auth/token`` hands one out without credentials all the same.
        """
        response = httpx.get(f"{self.base_url}/auth/token", timeout=10)
        if response.status_code in (200, 201):
            token = response.json().get("access_token")
            return str(token) if token else None
        return None

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """
        Call ``/api/v2`` + path; return the JSON body, raise LocalAirflowError on a non-2xx.

        A GET answered 5xx is asked again (three more times, 1-3 s apart): on SQLite the api-server
        sometimes meets a locked database while the scheduler writes (a busy machine makes it likelier).
        """
        response = self.client.request(method, f"/api/v2{path}", **kwargs)
        for pause in (1, 2, 3):
            if method != "GET" or response.status_code < 500:
                break
            time.sleep(pause)
            response = self.client.request(method, f"/api/v2{path}", **kwargs)
        if not response.is_success:
            raise LocalAirflowError(
                f"{method} /api/v2{path} -> {response.status_code}: {response.text[:500]}"
            )
        return response.json() if response.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 90) -> dict[str, Any]:
        """Wait until the dag-processor has parsed ``dag_id``; fails early on an import error."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.client.get(f"/api/v2/dags/{dag_id}")
            if response.status_code == 200:
                body: dict[str, Any] = response.json()
                return body
            errors = self.import_errors()
            if errors:
                raise LocalAirflowError(
                    f"DAG {dag_id!r} is not parsed; import errors:\n"
                    + "\n".join(f"{e.get('filename')}: {e.get('stack_trace')}" for e in errors)
                )
            if time.monotonic() > deadline:
                processor = next((c for c in self.components if c.name == "dag-processor"), None)
                raise self._failure(f"DAG {dag_id!r} was not parsed within {timeout:.0f} s", processor)
            time.sleep(1)

    def import_errors(self) -> list[dict[str, Any]]:
        body = self.api("GET", "/importErrors")
        errors: list[dict[str, Any]] = body.get("import_errors", [])
        return errors

    def trigger_dag(self, dag_id: str, run_id: str | None = None, conf: dict[str, Any] | None = None) -> str:
        """Create a manual DAG run now; returns its run id."""
        run_id = run_id or f"manual__{uuid.uuid4().hex[:12]}"
        body: dict[str, Any] = {"dag_run_id": run_id, "logical_date": None}
        if conf:
            body["conf"] = conf
        self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)
        return run_id

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        return body

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        return body

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        body = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        tis: list[dict[str, Any]] = body.get("task_instances", [])
        return tis

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """Return a task instance's XCom value (JSON), or None when it has none."""
        response = self.client.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        )
        if response.status_code == 404:
            return None
        if not response.is_success:
            raise LocalAirflowError(f"reading XCom {key!r} of {task_id} -> {response.status_code}")
        value = response.json().get("value")
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value

    def wait_for_run(
        self,
        dag_id: str,
        run_id: str,
        timeout: float = 120,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
        interval: float = 1.0,
    ) -> dict[str, Any]:
        """
        Poll until the run is success/failed; ``on_poll`` sees each run JSON. Fails on timeout or when
        a component dies meanwhile.
        """
        deadline = time.monotonic() + timeout
        while True:
            run = self.dag_run(dag_id, run_id)
            if on_poll is not None:
                on_poll(run)
            if run.get("state") in TERMINAL_RUN_STATES:
                return run
            dead = self._dead_component()
            if dead is not None:
                raise self._failure(f"Airflow {dead.name} exited while {dag_id}/{run_id} ran", dead)
            if time.monotonic() > deadline:
                states = {ti["task_id"]: ti.get("state") for ti in self.task_instances(dag_id, run_id)}
                raise LocalAirflowError(
                    f"run {dag_id}/{run_id} still {run.get('state')!r} after {timeout:.0f} s; tasks: {states}"
                )
            time.sleep(interval)

    def wait_for_task_state(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: Sequence[str],
        timeout: float = 90,
        interval: float = 0.5,
    ) -> dict[str, Any]:
        """Poll a task instance until its state is one of ``states`` (fails if it ends elsewhere)."""
        deadline = time.monotonic() + timeout
        while True:
            ti = self.task_instance(dag_id, run_id, task_id)
            state = ti.get("state")
            if state in states:
                return ti
            if state in TERMINAL_TI_STATES:
                raise LocalAirflowError(f"{dag_id}/{run_id}/{task_id} ended {state!r}, wanted {list(states)}")
            if time.monotonic() > deadline:
                raise LocalAirflowError(
                    f"{dag_id}/{run_id}/{task_id} still {state!r} after {timeout:.0f} s, "
                    f"wanted {list(states)}"
                )
            time.sleep(interval)

    def mark_task_instance(self, dag_id: str, run_id: str, task_id: str, state: str = "failed") -> Any:
        """Set a task instance's state as a user would in the UI (fires trigger ``on_kill`` if deferred)."""
        return self.api(
            "PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}", json={"new_state": state}
        )

    def mark_task_failed(self, dag_id: str, run_id: str, task_id: str) -> Any:
        return self.mark_task_instance(dag_id, run_id, task_id, "failed")

    # ---------------------------------------------------------------------------------------------
    # Logs

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int | None = None) -> str:
        """Return a task instance's log as text, through the REST logs endpoint (it merges trigger logs)."""
        if try_number is None:
            try_number = max(int(self.task_instance(dag_id, run_id, task_id).get("try_number") or 1), 1)
        body = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"accept": "application/json"},
        )
        lines = []
        for item in body.get("content", []):
            if isinstance(item, dict):
                extras = {k: v for k, v in item.items() if k not in _ROUTINE_LOG_KEYS}
                text = f"[{item.get('level', '')}] {item.get('logger', '')}: {item.get('event', '')}"
                lines.append(text + (f" {extras}" if extras else ""))
            else:
                lines.append(str(item))
        return "\n".join(lines)

    def task_log_dir(self, dag_id: str, run_id: str, task_id: str) -> Path:
        return self.logs_dir / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"

    def trigger_log_files(self, dag_id: str, run_id: str, task_id: str) -> list[Path]:
        """Return the triggerer's log files for a task instance (``attempt=N.log.trigger.<id>.log``)."""
        return sorted(self.task_log_dir(dag_id, run_id, task_id).glob("**/attempt=*.log.trigger.*.log"))

    def component_log(self, name: str, lines: int = 60) -> str:
        return tail(self.airflow_home / "components" / f"{name}.log", lines)


# -------------------------------------------------------------------------------------------------
# The distributed shape

DEBIAN_PACKAGES = {"initdb": "postgresql", "redis-server": "redis-server"}
"""The program each Debian package brings that the distributed shape runs."""
PG_USER = "airflow"
CELERY_WORKER = "celery-worker"
WORKER_ARGS = ("celery", "worker", "--skip-serve-logs", "--without-mingle", "--without-gossip")


def postgres_bindir() -> Path | None:
    """Return the directory of PostgreSQL's server programs (newest installed major), or None."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if candidates:
        return candidates[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _has_program(program: str) -> bool:
    if program == "initdb":
        return postgres_bindir() is not None
    return shutil.which(program) is not None


def missing_debian_packages() -> list[str]:
    """Return the Debian packages of ``DEBIAN_PACKAGES`` whose program is not installed."""
    return [package for program, package in DEBIAN_PACKAGES.items() if not _has_program(program)]


def ensure_debian_packages(progress: Callable[[str], None] | None = None) -> list[str]:
    """
    Install the missing packages of ``DEBIAN_PACKAGES`` with ``apt-get install -y``; return them.

    Needs root and apt-get (else the error says what to install); ``apt-get update`` runs only when
    the first install fails (stale package lists).
    """
    missing = missing_debian_packages()
    if not missing:
        return []
    command = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise LocalAirflowError(
            f"the distributed shape needs {', '.join(missing)}: run `sudo {' '.join(command)}`"
        )
    if progress is not None:
        progress(f"installing {', '.join(missing)} (apt-get install -y)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in ("install", "update and install"):
        if attempt != "install":
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return missing
    output = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
    raise LocalAirflowError(f"`{' '.join(command)}` exited {result.returncode}:\n{output}")


@dataclass
class DistributedAirflow(LocalAirflow):
    """
    Airflow as a multi-machine deployment runs it, on this machine; see the module doc.

    PostgreSQL (metadata DB and Celery result backend) and Redis (Celery broker) on loopback ports
    with their data in temp directories, the CeleryExecutor with one Celery worker, and
    ``triggerers`` triggerers besides api-server, scheduler and dag-processor. Triggerer and task
    heartbeat thresholds are seconds, not minutes, so a killed triggerer's triggers and a killed
    worker's task are taken over quickly. PostgreSQL refuses to run as root: as root its processes
    run as the ``postgres`` user of the Debian package.
    """

    triggerers: int = 2
    worker_concurrency: int = 8
    triggerer_health_check_threshold: int = 5
    task_heartbeat_timeout: int = 15

    services: list[Component] = field(default_factory=list, init=False)
    pg_port: int = field(default=0, init=False)
    redis_port: int = field(default=0, init=False)
    _pg_dir: Path | None = field(default=None, init=False)
    _workers_started: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pg_port, self.redis_port = free_port(), free_port()
        self.parallelism = max(self.parallelism, 32)

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{self.pg_port}/airflow"

    def component_env(self) -> dict[str, str]:
        env = super().component_env()
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
                "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.database_url}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_concurrency),
                # A triggerer without a heartbeat for this long is dead: its triggers go to another.
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(
                    self.triggerer_health_check_threshold
                ),
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
                # A running task without a heartbeat for this long failed (its retry is then scheduled).
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.task_heartbeat_timeout),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            }
        )
        env.update(self.env)
        return env

    def component_specs(self) -> Sequence[tuple[str, Sequence[str]]]:
        specs: list[tuple[str, Sequence[str]]] = [
            ("api-server", ("api-server",)),
            ("scheduler", ("scheduler", "--skip-serve-logs")),
            ("dag-processor", ("dag-processor",)),
        ]
        specs += [
            (f"triggerer-{n}", ("triggerer", "--skip-serve-logs")) for n in range(1, self.triggerers + 1)
        ]
        return [*specs, (f"{CELERY_WORKER}-1", WORKER_ARGS)]

    def start(self, timeout: float = 240) -> float:
        """Install what is missing, start PostgreSQL, Redis, Airflow and a Celery worker; return seconds."""
        started = time.monotonic()
        try:
            ensure_debian_packages(self.progress)
            self._start_postgres(deadline=started + timeout)
            self._start_redis(deadline=started + timeout)
            super().start(timeout=max(timeout - (time.monotonic() - started), 30))
            self._workers_started = 1
            self._wait_worker_ready(self.component(f"{CELERY_WORKER}-1"), deadline=started + timeout)
            # the health endpoint is content with one triggerer: wait for every one's heartbeat
            triggerers = self.component(f"triggerer-{self.triggerers}")
            self._wait_for(
                lambda: len(self.alive_triggerers()) == self.triggerers,
                started + timeout,
                triggerers,
                f"{self.triggerers} triggerers",
            )
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - started

    def _migrate(self, timeout: float) -> None:
        started = time.monotonic()
        self.airflow_cli("db", "migrate", timeout=timeout)
        self._say(f"airflow db migrate (PostgreSQL) took {time.monotonic() - started:.0f} s")

    # -- Celery workers ----------------------------------------------------------------------------

    def start_worker(self, timeout: float = 90) -> Component:
        """Start a Celery worker (``celery-worker-N``) and wait until it takes tasks."""
        self._workers_started += 1
        worker = self.start_component(f"{CELERY_WORKER}-{self._workers_started}", WORKER_ARGS)
        self._wait_worker_ready(worker, deadline=time.monotonic() + timeout)
        return worker

    def _wait_worker_ready(self, worker: Component, deadline: float) -> None:
        """Wait for Celery's ``ready.`` line in the worker's log; fail when it exits first."""
        while " ready." not in tail(worker.log_path, 200):
            if not worker.alive():
                raise self._failure(
                    f"{worker.name} exited with code {worker.process.returncode} while starting", worker
                )
            if time.monotonic() > deadline:
                raise self._failure(f"{worker.name} was not ready in time", worker)
            time.sleep(0.3)

    def workers(self) -> list[Component]:
        return [c for c in self.components if c.name.startswith(CELERY_WORKER)]

    def kill_worker(self) -> Component:
        """SIGKILL the running Celery worker's process group (the worker and its task processes)."""
        (worker,) = self.workers()
        return self.kill_component(worker.name)

    # -- services --------------------------------------------------------------------------------

    def _start_service(self, name: str, command: Sequence[str], **popen: Any) -> Component:
        log_path = self.airflow_home / "components" / f"{name}.log"
        log_path.parent.mkdir(exist_ok=True)
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **popen,
            )
        service = Component(name, process, log_path)
        self.services.append(service)
        return service

    def _as_postgres_user(self) -> dict[str, Any]:
        """Return the Popen arguments that run PostgreSQL's programs as a non-root user."""
        if os.geteuid() != 0:
            return {}
        return {"user": "postgres", "group": "postgres", "cwd": "/"}

    def _start_postgres(self, deadline: float) -> None:
        bindir = postgres_bindir()
        assert bindir is not None  # ensure_debian_packages installed it
        self._pg_dir = Path(tempfile.mkdtemp(prefix="wfsvc-postgres-"))
        data = self._pg_dir / "data"
        as_user = self._as_postgres_user()
        if as_user:
            shutil.chown(self._pg_dir, user="postgres", group="postgres")
        self._say(f"starting PostgreSQL on 127.0.0.1:{self.pg_port} ({self._pg_dir})")
        initdb = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            check=False,
            **as_user,
        )
        if initdb.returncode != 0:
            raise LocalAirflowError(f"initdb exited {initdb.returncode}:\n{initdb.stdout}{initdb.stderr}")
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.pg_port),
            "unix_socket_directories": "",
            "fsync": "off",  # a throwaway database: durability on disk buys nothing
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        postgres = self._start_service(
            "postgres", [str(bindir / "postgres"), "-D", str(data), *options], **as_user
        )
        self._wait_for(lambda: self._create_database(postgres), deadline, postgres, "PostgreSQL")

    def _create_database(self, postgres: Component) -> bool:
        import psycopg2

        try:
            connection = psycopg2.connect(
                host="127.0.0.1", port=self.pg_port, user=PG_USER, dbname="postgres", connect_timeout=2
            )
        except psycopg2.OperationalError:
            return False
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("CREATE DATABASE airflow")
        finally:
            connection.close()
        return True

    def _start_redis(self, deadline: float) -> None:
        self._say(f"starting Redis on 127.0.0.1:{self.redis_port}")
        redis_dir = self.airflow_home / "redis"
        redis_dir.mkdir(exist_ok=True)
        command = [
            shutil.which("redis-server") or "redis-server",
            *("--bind", "127.0.0.1", "--port", str(self.redis_port), "--dir", str(redis_dir)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "yes"),
        ]
        redis = self._start_service("redis", command)

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.redis_port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    return sock.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        self._wait_for(answers, deadline, redis, "Redis")

    def _wait_for(self, ready: Callable[[], bool], deadline: float, service: Component, what: str) -> None:
        while not ready():
            if not service.alive():
                raise self._failure(f"{what} exited with code {service.process.returncode}", service)
            if time.monotonic() > deadline:
                raise self._failure(f"{what} did not answer in time", service)
            time.sleep(0.2)

    def _stop(self, timeout: float) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        try:
            self._stop_processes(self.components, timeout)
        finally:
            # after Airflow, which needs them to shut down; SIGINT is PostgreSQL's fast shutdown
            self._stop_processes(self.services, min(timeout, 30), sig=signal.SIGINT)
            if self._pg_dir is not None:
                shutil.rmtree(self._pg_dir, ignore_errors=True)
                self._pg_dir = None
            self._remove_home()

    # -- the metadata database -------------------------------------------------------------------

    def sql(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run a read-only query on the metadata database; return its rows."""
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.pg_port, user=PG_USER, dbname="airflow")
        try:
            with connection.cursor() as cursor:
                cursor.execute(query, params)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def deferred_tasks(
        self, dag_id: str | Sequence[str], run_id: str, kwargs: bool = True
    ) -> dict[str, dict[str, Any]]:
        """
        Return each deferred task's trigger: ``dag_id``, ``trigger_id``, ``triggerer`` (the holder's
        hostname, ``triggerer-N``; None while unassigned or held by a dead triggerer's row) and, unless
        ``kwargs`` is False (cheaper to poll), ``kwargs``. ``dag_id`` may name several DAGs (one run id).
        """
        rows = self.sql(
            "SELECT ti.task_id, ti.dag_id, t.id, t.kwargs, job.hostname FROM task_instance ti"
            " JOIN trigger t ON t.id = ti.trigger_id LEFT JOIN job ON job.id = t.triggerer_id"
            " WHERE ti.dag_id = ANY(%s) AND ti.run_id = %s AND ti.state = 'deferred'",
            ([dag_id] if isinstance(dag_id, str) else list(dag_id), run_id),
        )
        return {
            task_id: {
                "dag_id": dag,
                "trigger_id": trigger_id,
                "triggerer": host,
                **({"kwargs": self._trigger_kwargs(stored)} if kwargs else {}),
            }
            for task_id, dag, trigger_id, stored, host in rows
        }

    def alive_triggerers(self) -> dict[int, str]:
        """Return the triggerer jobs Airflow counts as alive (heartbeat within the threshold): id -> host."""
        rows = self.sql(
            "SELECT id, hostname FROM job WHERE job_type = 'TriggererJob' AND end_date IS NULL"
            " AND latest_heartbeat > now() - make_interval(secs => %s)",
            (self.triggerer_health_check_threshold,),
        )
        return dict(rows)

    def _trigger_kwargs(self, stored: str) -> dict[str, Any]:
        """Return a trigger's kwargs as the triggerer reads them (Fernet-decrypted, deserialized)."""
        from airflow.sdk.serde import deserialize
        from cryptography.fernet import Fernet

        if stored.startswith("{"):  # stored unencrypted, as Airflow's own reader allows
            plain = stored
        else:
            plain = Fernet(self._secrets["AIRFLOW__CORE__FERNET_KEY"].encode()).decrypt(stored).decode()
        kwargs: dict[str, Any] = deserialize(json.loads(plain))  # type: ignore[assignment]
        return kwargs


@contextlib.contextmanager
def local_stack(
    dags_folder: Path,
    *,
    emulator_options: Mapping[str, Any] | None = None,
    connection_extra: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    keep_home: bool = False,
    db_template: Path | None = None,
    progress: Callable[[str], None] | None = None,
    start_timeout: float = 180,
    stop_timeout: float = 60,
    distributed: bool = False,
    airflow_options: Mapping[str, Any] | None = None,
) -> Iterator[tuple[LocalAirflow, Any]]:
    """
    Run the emulator (subprocess) plus a LocalAirflow whose ``workflowsvc_default`` points at it.

    Yields ``(airflow, emulator)``; ``emulator`` is the handle of ``running_emulator`` (base_url,
    requests(), configure(), ...). Both are stopped on exit, also after an error or Ctrl-C.
    ``distributed`` selects the shape: a ``DistributedAirflow`` (``airflow_options`` are its
    fields, e.g. ``triggerers``) instead of the local one.
    """
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    say = progress or (lambda _msg: None)
    say("starting the Workflow Service emulator")
    with running_emulator(subprocess=True, **dict(emulator_options or {})) as emulator:
        say(f"emulator listening on {emulator.base_url}")
        conn = connection_json(
            emulator.base_url, emulator.token, emulator.api_key, **dict(connection_extra or {})
        )
        shape = DistributedAirflow if distributed else LocalAirflow
        airflow = shape(
            dags_folder=dags_folder,
            env={CONN_ENV: conn, **dict(env or {})},
            home=home,
            keep_home=keep_home,
            db_template=None if distributed else db_template,
            progress=progress,
            **dict(airflow_options or {}),
        )
        components = ", ".join(name for name, _ in airflow.component_specs())
        if distributed:
            components = f"PostgreSQL, Redis, {components}"
        say(f"starting Airflow ({components})…")
        try:
            seconds = airflow.start(timeout=start_timeout)
            say(f"Airflow healthy after {seconds:.0f} s at {airflow.base_url}")
            yield airflow, emulator
        finally:
            say("stopping Airflow and the emulator")
            stopping = time.monotonic()
            airflow.stop(timeout=stop_timeout)
            say(f"Airflow stopped in {time.monotonic() - stopping:.0f} s")
