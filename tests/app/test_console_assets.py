"""The console's and Swagger UI's files: shipped as package data (so a wheel install serves
them), found through the installed packages, and never pointing at another host."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from app.console import console_dir, swagger_ui_dir
from tests.loopback import raw_get

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "app" / "console_static"
FOREIGN = re.compile(r"\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", re.I)
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # a name, never fetched


def source_files() -> list[str]:
    return sorted(str(p.relative_to(SOURCE)) for p in SOURCE.rglob("*") if p.is_file())


def test_a_built_package_carries_every_console_file(tmp_path: Path) -> None:
    """build_py lays out exactly what a wheel holds; the console is found there, not in the source tree."""
    build = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)], cwd=ROOT, check=True, capture_output=True)
    code = "import app.console as c, sys; sys.stdout.write(str(c.console_dir()))"
    found = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(build), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert Path(found) == build / "app" / "console_static"
    shipped = sorted(str(p.relative_to(found)) for p in Path(found).rglob("*") if p.is_file())
    assert shipped == source_files()
    assert {"index.html", "main.js", "console.css", "pages/topic.js"} <= set(shipped)


def test_the_console_is_located_through_the_package() -> None:
    assert console_dir().resolve() == SOURCE.resolve()  # here: the editable install points at this tree
    assert (swagger_ui_dir() / "swagger-ui-bundle.js").is_file()
    # From the installed package, not a copy in the source tree (the venv may sit inside the checkout).
    assert "site-packages" in swagger_ui_dir().resolve().parts
    assert not any(swagger_ui_dir().resolve().is_relative_to((ROOT / part).resolve()) for part in ("app", "store", "docs", "tests"))


def test_no_console_file_refers_to_another_host() -> None:
    for name in source_files():
        text = (SOURCE / name).read_text().replace(SVG_NAMESPACE, "")
        assert not FOREIGN.search(text), f"{name}: {FOREIGN.search(text)}"


def test_console_and_docs_are_served(client: httpx.Client) -> None:
    page = client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/console/").text == page.text
    assert client.get("/console/main.js").headers["content-type"].startswith(("text/javascript", "application/javascript"))
    missing = client.get("/console/nope.js")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
    assert raw_get(str(client.base_url), "/console/../v1/topics")[0] == 404  # a dot segment does not leave the console's files
    docs = client.get("/docs").text
    assert "/docs/assets/swagger-ui-bundle.js" in docs and "cdn" not in docs.lower()
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert client.get(f"/docs/assets/{asset}").status_code == 200, asset
    assert "/console" not in client.get("/openapi.json").json()["paths"]
