"""What the smoke tests of the benchmarks' --quick runs share: running a bench script as the
command line does, and finding processes it may have left behind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout_s: float = 170) -> subprocess.CompletedProcess[str]:
    """`python bench/<script> <args>` from the repository root, its output captured as text."""
    command = [sys.executable, str(REPO_ROOT / "bench" / script), *args]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)


def processes_with(needles: Iterable[str]) -> list[str]:
    """The command lines of running processes that contain any of `needles`."""
    wanted = list(needles)
    lines = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout.splitlines()
    return [line for line in lines if any(needle in line for needle in wanted)]
