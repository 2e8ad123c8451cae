"""Smoke test of the side-by-side benchmark: `bench/compare.py --quick` runs end to end.

It checks that the harness starts every available system, runs every workload, writes the
report with all its sections and both charts, and stops every server it started. It asserts
nothing about speed. A peer whose binary is missing is skipped by the harness (--no-install:
the test never installs packages) and must then be reported as skipped, with its reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from bench.compare_peers import SYSTEM_BIN_DIRS  # noqa: E402
from bench.compare_report import SECTIONS  # noqa: E402

pytest.importorskip("matplotlib", reason="the bench extra is not installed (pip install -e '.[test,bench]')")
pytest.importorskip("nats", reason="the bench extra is not installed (pip install -e '.[test,bench]')")
pytest.importorskip("redis", reason="the bench extra is not installed (pip install -e '.[test,bench]')")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _installed(binary: str) -> bool:
    return shutil.which(binary) is not None or any((Path(d) / binary).is_file() for d in SYSTEM_BIN_DIRS)


def _processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("compare-out")
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "bench" / "compare.py"), "--quick", "--no-install", "--out", str(out)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log, _ = proc.communicate(timeout=170)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, log[-4000:]
    return out, log


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_quick_run_writes_every_section_and_chart(quick_run: tuple[Path, str]) -> None:
    out, log = quick_run
    reports = list(out.glob("*-quick.md"))
    assert len(reports) == 1, (sorted(p.name for p in out.iterdir()), log[-2000:])
    text = reports[0].read_text()
    for section in SECTIONS:
        assert section in text, f"{section} missing from the report"
    charts = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert len(charts) == 2, charts
    for chart in charts:
        data = (out / chart).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, chart
    assert "Disk (the run's temporary directory):" in text and "MiB/s sequential write" in text


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_quick_run_measures_tidemq_or_skips_peers_with_a_reason(quick_run: tuple[Path, str]) -> None:
    out, log = quick_run
    text = next(out.glob("*-quick.md")).read_text()
    assert "- no workload failed" in text, text[text.index("## Skipped and failed") :] + log[-3000:]
    produce = text[text.index("## Produce throughput") : text.index("## Catch-up consume")]
    row = next(line for line in produce.splitlines() if line.startswith("| single 128 B |"))
    tidemq_cell = row.split("|")[2].strip()
    assert tidemq_cell != "n/a" and float(tidemq_cell.replace(",", "")) > 0, (row, log[-3000:])
    for binary, label in (("nats-server", "nats (JetStream file)"), ("redis-server", "redis (appendfsync everysec)")):
        if _installed(binary):
            assert f"- {label}: skipped" not in text, f"{label} skipped although {binary} is installed"
        else:
            assert f"- {label}: skipped: {binary} not found" in text
            assert f"SKIPPED {label}" in log


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_quick_run_leaves_no_server_behind(quick_run: tuple[Path, str]) -> None:
    _out, log = quick_run
    started = re.findall(r"started .+ on port (\d+)", log)
    assert started, log[-2000:]
    listening = [f"-p {p} " for p in started] + [f"--port {p} " for p in started]
    leftovers = [line for line in _processes() if any(arg in line + " " for arg in listening)]
    assert leftovers == [], leftovers
