"""Headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, for the console tests.

Playwright never downloads a browser here: it starts the system binary with the flags below.
Every page records its console errors, uncaught exceptions and any request to another host
(the console and /docs must work offline), and tests save screenshots as artifacts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"
# How long a page may take to show what a test waits for (ms); generous for a shared 2-core machine.
WAIT_MS = 20_000


@dataclass
class Watched:
    """What went wrong on a page: console errors, uncaught exceptions, requests leaving the broker."""

    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium); apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")


def browser_context(base_url: str) -> Iterator[Any]:
    """A persistent headless context (its own profile directory) whose pages start at base_url."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, base_url=base_url, accept_downloads=True
        )
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            context.close()


def watch(page: Any, base_url: str) -> Watched:
    watched = Watched()
    allowed = urlsplit(base_url).netloc

    def on_console(message: Any) -> None:
        if message.type == "error":
            watched.errors.append(message.text)

    def on_request(request: Any) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https") and parts.netloc != allowed:
            watched.foreign.append(request.url)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: watched.errors.append(f"uncaught: {exc}"))
    page.on("request", on_request)
    return watched


def screenshot(page: Any, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
