"""The Dockerfile stays consistent with the package: base image, user, volume, port, health path, entry point,
and its layers: dependencies installed before the source is copied, the base pinned or the reason why not.

No Docker engine runs here; the Dockerfile is parsed and each instruction is checked against
the code it refers to.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from app.cli import parser
from app.routes_status import HEALTH_PATH
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    logical: list[str] = []
    current = ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line.strip())
        current = ""
    out = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def only(name: str) -> str:
    found = [args for keyword, args in instructions() if keyword == name]
    assert len(found) == 1, f"expected one {name}, found {found}"
    return found[0]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, FROM first."""
    out: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            out.append([])
        out[-1].append((keyword, args))
    return out


def index_of(stage: list[tuple[str, str]], keyword: str, contains: str) -> int:
    found = [i for i, (k, args) in enumerate(stage) if k == keyword and contains in args]
    assert len(found) == 1, (keyword, contains, stage)
    return found[0]


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\b")


def test_base_image_matches_the_python_requirement() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    stages = [DIGEST.sub("", args) for keyword, args in instructions() if keyword == "FROM"]
    # A build stage compiles the C kernels; the runtime stage (the last) installs only its wheels.
    assert stages == ["python:3.11-slim AS build", "python:3.11-slim"]
    assert any(keyword == "COPY" and args.startswith("--from=build ") for keyword, args in instructions())
    assert pyproject["project"]["requires-python"] == ">=3.11"


def test_runs_as_a_non_root_user_with_the_store_on_a_volume() -> None:
    user = only("USER")
    assert user not in ("root", "0") and user
    assert exec_form(only("VOLUME")) == ["/data"]
    run = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert "useradd" in run and user in run and f"chown {user}" in run


def test_entry_point_port_and_health_path_match_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    cmd = exec_form(only("CMD"))
    assert cmd[0] in pyproject["project"]["scripts"] and pyproject["project"]["scripts"][cmd[0]] == "app.cli:main"
    args = parser().parse_args(cmd[1:])  # the CMD is a valid `tidemq` command line
    assert args.command == "serve" and args.host == "0.0.0.0" and args.store_dir == "/data"
    assert args.acl_file or args.insecure_open, "a broker on 0.0.0.0 needs --acl (or --insecure-open) to start"
    assert args.port is None, "the port comes from TIDEMQ_PORT, which the health check reads too"
    port = int(image_env()["TIDEMQ_PORT"])
    assert only("EXPOSE") == str(port)
    assert HEALTH_PATH in health_command()[-1]
    assert "--start-period" in only("HEALTHCHECK")


def image_env() -> dict[str, str]:
    """The runtime stage's ENV variables."""
    out: dict[str, str] = {}
    for keyword, args in stages()[-1]:
        if keyword == "ENV":
            out.update(cast("Iterator[tuple[str, str]]", (pair.split("=", 1) for pair in shlex.split(args))))
    return out


def health_command() -> list[str]:
    health = exec_form(re.sub(r"^(--\S+\s+)*CMD\s+", "", only("HEALTHCHECK")))
    assert health[0] == "python"
    return health


def test_the_health_check_follows_the_port_the_broker_serves(make_broker: MakeBroker) -> None:
    """The image's health command, run as the image runs it (this interpreter standing in for the image's
    python), against a broker on another port than 8080: healthy with that port in TIDEMQ_PORT, unhealthy
    without a broker there."""
    broker = make_broker(SMALL_STORE + SMALL_BROKER)
    command = [sys.executable, *health_command()[1:]]
    done = subprocess.run(command, env={"TIDEMQ_PORT": str(broker.port)}, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        unused = free.getsockname()[1]
    done = subprocess.run(command, env={"TIDEMQ_PORT": str(unused)}, capture_output=True, timeout=30)
    assert done.returncode != 0


def test_the_sources_the_package_needs_are_copied() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {args.split()[0] for keyword, args in instructions() if keyword == "COPY" and not args.startswith("--")}
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert package.rstrip("*") in copied, package
    assert "pyproject.toml" in copied
    assert "setup.py" in " ".join(args for keyword, args in instructions() if keyword == "COPY")
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "data" in ignored and not set(ignored) & {"store", "app", "pyproject.toml"}


def test_the_base_is_pinned_by_digest_or_the_file_says_why_not() -> None:
    bases = [args.split()[0] for keyword, args in instructions() if keyword == "FROM"]
    if all(DIGEST.search(base) for base in bases):
        return
    text = (ROOT / "Dockerfile").read_text()
    preamble = text[: text.index("\nFROM ")]
    comment = " ".join(line.lstrip("# ") for line in preamble.splitlines() if line.startswith("#"))
    # The reason is given above the first FROM, with how to pin it where the registry is reachable.
    assert "not pinned by digest" in comment and "@sha256:" in comment, comment


def test_dependencies_are_installed_in_layers_before_the_source_is_copied() -> None:
    build, runtime = stages()
    copies = [i for i, (k, args) in enumerate(build) if k == "COPY"]
    assert build[copies[0]] == ("COPY", "pyproject.toml ./"), "the first COPY of the build stage is pyproject.toml alone"
    deps = index_of(build, "RUN", "-r requirements.txt")
    assert copies[0] < deps < copies[1], "the dependencies are built before any source is copied"
    assert index_of(build, "RUN", "--no-deps") > copies[-1], "the package itself is built after the source is copied"
    installed_deps = index_of(runtime, "RUN", "/deps/*.whl")
    assert index_of(runtime, "COPY", "--from=build /deps") < installed_deps < index_of(runtime, "COPY", "--from=build /wheels")
    assert "--no-deps" in runtime[index_of(runtime, "RUN", "/wheels/*.whl")][1]


def test_the_requirements_line_lists_the_package_dependencies(tmp_path: Path) -> None:
    build = stages()[0]
    run = build[index_of(build, "RUN", "-r requirements.txt")][1]
    command = run.split(" > requirements.txt", 1)[0]
    assert command.startswith("python -c ")
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    # Run by the shell as the image's RUN would (this interpreter standing in for the image's python).
    shell_line = shlex.quote(sys.executable) + command[len("python") :]
    done = subprocess.run(["sh", "-c", shell_line], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert done.stdout.splitlines() == pyproject["project"]["dependencies"]


def test_the_runtime_stage_switches_to_its_user_after_the_last_run() -> None:
    runtime = stages()[-1]
    user = max(i for i, (k, _) in enumerate(runtime) if k == "USER")
    assert user > max(i for i, (k, _) in enumerate(runtime) if k == "RUN")
    assert user < index_of(runtime, "CMD", "serve") and any(k == "HEALTHCHECK" for k, _ in runtime)
