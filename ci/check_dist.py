"""
Check what a built wheel and sdist hold before they could be published (``./dev package``).

    python ci/check_dist.py dist/airflow_provider_workflowsvc-*.whl dist/airflow_provider_workflowsvc-*.tar.gz

The wheel must hold the package data (``py.typed``, the connector table ``connectors.json``), the
LICENSE in its ``.dist-info``, the provider entry point and the console script, and nothing but the
package and its ``.dist-info`` (no tests, benchmarks or caches); its version is the package's
``__version__``. The sdist must hold the LICENSE, the CHANGELOG and the package data. Every problem is
printed on a line of its own; the exit status is 1 when there is any.
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import PurePosixPath

PACKAGE = "airflow_provider_workflowsvc"
PROVIDER_ENTRY_POINT = f"{PACKAGE}.get_provider_info:get_provider_info"
CONSOLE_SCRIPT = ("workflowsvc-emulator", f"{PACKAGE}.emulator.__main__:main")
LICENSE_EXPRESSION = "Apache-2.0"
DATA_FILES = (f"{PACKAGE}/py.typed", f"{PACKAGE}/connectors.json")  # not Python: a build may leave them out


def source_version(source: str) -> str | None:
    """Return the ``__version__`` string assigned in a module's source, or None."""
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
            continue
        named = any(isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets)
        if named and isinstance(node.value.value, str):
            return node.value.value
    return None


def wheel_problems(names: Sequence[str], read: dict[str, str]) -> list[str]:
    """
    Return what is wrong with a wheel of these member ``names``.

    ``read`` maps the members this check reads (``*.dist-info/METADATA``, ``*.dist-info/entry_points.txt``,
    the package's ``__init__.py``) to their text.
    """
    problems = []
    dist_infos = {PurePosixPath(name).parts[0] for name in names if name.split("/")[0].endswith(".dist-info")}
    if len(dist_infos) != 1:
        return [f"expected one .dist-info directory, found {sorted(dist_infos) or 'none'}"]
    [dist_info] = dist_infos
    for required in (*DATA_FILES, f"{dist_info}/licenses/LICENSE", f"{PACKAGE}/__init__.py"):
        if required not in names:
            problems.append(f"missing {required}")
    strays = sorted({name.split("/")[0] for name in names} - {PACKAGE, dist_info})
    if strays:
        problems.append(f"unexpected top-level entries: {', '.join(strays)}")
    caches = [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    if caches:
        problems.append(f"compiled files: {', '.join(caches[:3])}")
    problems += entry_point_problems(read.get(f"{dist_info}/entry_points.txt"))
    problems += metadata_problems(read.get(f"{dist_info}/METADATA"), read.get(f"{PACKAGE}/__init__.py"))
    return problems


def entry_point_problems(text: str | None) -> list[str]:
    if text is None:
        return ["missing entry_points.txt"]
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    problems = []
    if parser.get("apache_airflow_provider", "provider_info", fallback=None) != PROVIDER_ENTRY_POINT:
        problems.append(
            f"the apache_airflow_provider entry point is not provider_info = {PROVIDER_ENTRY_POINT}"
        )
    script, target = CONSOLE_SCRIPT
    if parser.get("console_scripts", script, fallback=None) != target:
        problems.append(f"the console script is not {script} = {target}")
    return problems


def metadata_problems(metadata: str | None, init_source: str | None) -> list[str]:
    if metadata is None:
        return ["missing METADATA"]
    fields = email.parser.Parser().parsestr(metadata)
    problems = []
    version = source_version(init_source or "")
    if fields["Version"] != version:
        problems.append(f"METADATA Version {fields['Version']} is not the package's __version__ {version}")
    if fields["License-Expression"] != LICENSE_EXPRESSION:
        problems.append(
            f"METADATA License-Expression is {fields['License-Expression']}, not {LICENSE_EXPRESSION}"
        )
    if "LICENSE" not in (fields.get_all("License-File") or []):
        problems.append("METADATA names no License-File LICENSE")
    return problems


def sdist_problems(names: Sequence[str]) -> list[str]:
    """Return what is wrong with an sdist of these member ``names``."""
    roots = {name.split("/")[0] for name in names}
    if len(roots) != 1:
        return [f"expected one top-level directory, found {sorted(roots)}"]
    [root] = roots
    return [
        f"missing {root}/{file}"
        for file in ("LICENSE", "CHANGELOG.md", "PKG-INFO", *DATA_FILES)
        if f"{root}/{file}" not in names
    ]


def check_wheel(path: str) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        wanted = [n for n in names if n.endswith((".dist-info/METADATA", ".dist-info/entry_points.txt"))]
        wanted.append(f"{PACKAGE}/__init__.py")
        read = {name: wheel.read(name).decode() for name in wanted if name in names}
    return wheel_problems(names, read)


def check_sdist(path: str) -> list[str]:
    with tarfile.open(path) as sdist:
        return sdist_problems(sdist.getnames())


def main(paths: Sequence[str]) -> int:
    problems = []
    for path in paths:
        check = check_wheel if path.endswith(".whl") else check_sdist
        problems += [f"{PurePosixPath(path).name}: {problem}" for problem in check(path)]
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"dist contents OK: {', '.join(PurePosixPath(p).name for p in paths)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
