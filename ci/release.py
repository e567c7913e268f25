"""
The release's own checks and the dry run's package index (``./dev package``, ``./dev release --dry-run``,
the release workflow).

    python ci/release.py tag TAG     exit 1 unless TAG is ``v`` + the package's ``__version__``
    python ci/release.py sbom DIST   the CycloneDX SBOM of DIST's wheel and its runtime dependencies
                                     (DIST/<wheel name>.cdx.json), checked: every distribution installed
                                     with the wheel, each runtime Requires-Dist included, with its version

``sbom`` runs with the Python of ``./dev``'s virtualenv (uv and cyclonedx-bom come from its ``dev``
group): a fresh virtualenv holds the wheel and what it requires, nothing else (no extra, no tool), with
the newest Airflow release of ``ci/airflow-pins.txt`` and its users' pins (the release CI tested).
``loopback_index`` serves a folder of distributions on a free loopback port (pypiserver, started and
stopped by its PID) and uploads them with twine, as the release workflow uploads to the package index.
"""

from __future__ import annotations

import email.parser
import json
import re
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import airflow_pins
from check_dist import PACKAGE, source_version

ROOT = Path(__file__).resolve().parent.parent
SBOM_SUFFIX = ".cdx.json"


def canonical(name: str) -> str:
    """Return a distribution name as indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def tag_problem(tag: str, version: str) -> str | None:
    """Return why a release tag does not name this version, or None when it is ``v<version>``."""
    if tag != f"v{version}":
        return f"the tag {tag!r} is not the package's version: tag v{version}, or change __version__"
    return None


def runtime_requirements(metadata: str) -> list[str]:
    """Return the names of a wheel's ``Requires-Dist`` outside any extra (what ``pip install`` brings)."""
    fields = email.parser.Parser().parsestr(metadata)
    names = []
    for requirement in fields.get_all("Requires-Dist") or []:
        _, _, marker = requirement.partition(";")
        if "extra" not in marker:
            names.append(canonical(re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0]))
    return names


def sbom_problems(sbom: dict, required: Sequence[str], installed: dict[str, str]) -> list[str]:
    """
    Return what the SBOM misses: each of ``installed`` (name → version, the virtualenv the SBOM was made
    of, the wheel's own distribution left out) as a component of that version, each of ``required``
    (the wheel's runtime Requires-Dist) among them.
    """
    listed = {canonical(c.get("name", "")): c.get("version") for c in sbom.get("components", [])}
    problems = [
        f"the runtime requirement {name} was not installed with the wheel"
        for name in required
        if name not in installed
    ]
    for name, version in sorted(installed.items()):
        if name not in listed:
            problems.append(f"{name} {version} is not a component")
        elif listed[name] != version:
            problems.append(f"{name} is listed as {listed[name]}, installed as {version}")
    return problems


def wheel_of(dist: Path) -> Path:
    (wheel,) = dist.glob(f"{PACKAGE}-*.whl")
    return wheel


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def write_sbom(dist: Path) -> tuple[Path, int]:
    """Write and check the SBOM of DIST's wheel; return its path and its number of components."""
    wheel = wheel_of(dist)
    uv = [sys.executable, "-m", "uv"]
    with tempfile.TemporaryDirectory() as scratch:
        python = Path(scratch) / "bin" / "python"
        subprocess.run([*uv, "venv", "--quiet", "--python", sys.executable, scratch], check=True)
        pins = airflow_pins.read()
        tested = airflow_pins.requirements(pins, airflow_pins.minors(pins)[0], ("users",))
        install = [*uv, "pip", "install", "--quiet", "--python", str(python), str(wheel), *tested]
        subprocess.run(install, check=True)
        listed = subprocess.run(
            [*uv, "pip", "list", "--format", "json", "--python", str(python)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        sbom_path = dist / (wheel.name.removesuffix(".whl") + SBOM_SUFFIX)
        subprocess.run(
            [sys.executable, "-m", "cyclonedx_py", "environment", "--output-reproducible", "--no-validate",
             "--output-format", "JSON", "--output-file", str(sbom_path), str(python)],
            check=True,
        )  # fmt: skip
    installed = {canonical(d["name"]): d["version"] for d in json.loads(listed)}
    installed.pop(canonical(PACKAGE), None)
    sbom = json.loads(sbom_path.read_text())
    problems = sbom_problems(sbom, runtime_requirements(wheel_metadata(wheel)), installed)
    if problems:
        raise SystemExit(f"{sbom_path.name}: " + "; ".join(problems))
    return sbom_path, len(sbom["components"])


# --------------------------------------------------------------------------------------------------
# A package index on loopback: the dry run's stand-in for the public one


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def loopback_index(files: Sequence[Path], root: Path) -> Iterator[tuple[str, Path]]:
    """
    Serve an empty index from ``root`` on a free loopback port, upload ``files`` to it with twine, and
    yield its simple URL and the server's log (each download is a line of it). The server is started
    and stopped by its PID; it redirects no unknown name elsewhere (``--disable-fallback``).
    """
    packages, log = root / "packages", root / "pypiserver.log"
    packages.mkdir(parents=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "pypiserver", "run", "-v", "--host", "127.0.0.1", "--port", str(port),
             "--authenticate", ".", "--passwords", ".", "--disable-fallback", str(packages)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until_serving(f"{url}/simple/", server)
        subprocess.run(
            [sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
             "--repository-url", f"{url}/", "--username", "dry-run", "--password", "dry-run",
             *map(str, files)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        yield f"{url}/simple/", log
    finally:
        server.terminate()
        server.wait()


def wait_until_serving(url: str, server: subprocess.Popen[bytes]) -> None:
    """Return once ``url`` answers; raise when the server exited first."""
    while server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            try:
                server.wait(timeout=0.2)  # a pause that ends at once when the server exits
            except subprocess.TimeoutExpired:
                continue
    raise RuntimeError(f"the package index exited with status {server.returncode} before serving {url}")


def main(argv: Sequence[str]) -> int:
    match list(argv):
        case ["tag", tag]:
            version = source_version((ROOT / PACKAGE / "__init__.py").read_text())
            problem = tag_problem(tag, version or "")
            print(problem or f"the tag {tag} is the package's version {version}", file=sys.stderr)
            return 1 if problem else 0
        case ["sbom", dist]:
            path, components = write_sbom(Path(dist))
            print(f"SBOM {path.name}: {components} components, every runtime dependency with its version")
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
