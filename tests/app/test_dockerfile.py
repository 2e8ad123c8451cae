"""The Dockerfile stays consistent with the package: base image, user, volume, port, health path, entry point.

No Docker engine runs here; the Dockerfile is parsed and each instruction is checked against
the code it refers to.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from app.cli import parser
from app.routes_status import HEALTH_PATH
from app.settings import BrokerSettings

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


def test_base_image_matches_the_python_requirement() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    stages = [args for keyword, args in instructions() if keyword == "FROM"]
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
    port = args.port if args.port is not None else BrokerSettings().port
    assert only("EXPOSE") == str(port)
    health = exec_form(re.sub(r"^(--\S+\s+)*CMD\s+", "", only("HEALTHCHECK")))
    assert health[0] == "python" and f"http://127.0.0.1:{port}{HEALTH_PATH}" in health[-1]
    assert "--start-period" in only("HEALTHCHECK")


def test_the_sources_the_package_needs_are_copied() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {args.split()[0] for keyword, args in instructions() if keyword == "COPY" and not args.startswith("--")}
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert package.rstrip("*") in copied, package
    assert "pyproject.toml" in copied
    assert "setup.py" in " ".join(args for keyword, args in instructions() if keyword == "COPY")
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "data" in ignored and not set(ignored) & {"store", "app", "pyproject.toml"}
