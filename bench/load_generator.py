"""The benchmarks' C helpers (bench/loadgen.c, bench/baseline_copy.c), built on first use, and the
CPU accounting every figure reports beside its rate.

`loadgen` drives HTTP and Redis servers alike (one thread, epoll, closed loop: bench/loadgen.c says
how), so a comparison of tidemq with Redis gives both the same client. `Measured` is one
measurement: the rate, the server's CPU per request (/proc/PID/stat utime + stime around it), the
generator's own CPU and the load average at its end.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# Built helpers are cached per source hash here (never in the repository).
BUILD_DIR = os.path.join(tempfile.gettempdir(), "tidemq-bench-build")


class Unbuildable(Exception):
    """Raised when a C helper cannot be built here (no C compiler)."""


def build(source: str, shared: bool = False) -> str:
    """The path of bench/`source` compiled with -O2 (a shared library when `shared`), built once per source text."""
    path = os.path.join(BENCH_DIR, source)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    os.makedirs(BUILD_DIR, exist_ok=True)
    out = os.path.join(BUILD_DIR, f"{os.path.splitext(source)[0]}-{digest}{'.so' if shared else ''}")
    if os.path.exists(out):
        return out
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise Unbuildable("no C compiler (cc) to build " + source)
    flags = ["-O2", "-Wall", "-fPIC", "-shared"] if shared else ["-O2", "-Wall"]
    tmp = out + f".{os.getpid()}"
    subprocess.run([compiler, *flags, "-o", tmp, path], check=True, capture_output=True)
    os.replace(tmp, out)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (all its threads, ended ones included) has used so far: its CPU clock,
    counted in nanoseconds (/proc's utime and stime count 10 ms ticks: a short measurement of an idle-ish server,
    such as Redis serving 60 messages, would read 0); /proc's ticks where the clock cannot be read."""
    try:
        return time.clock_gettime_ns(process_cpu_clock(pid)) / 1e9
    except OSError:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU time on Linux, as clock_getcpuclockid(3) makes it (MAKE_PROCESS_CPUCLOCK with
    CPUCLOCK_SCHED: the scheduler's runtime of the whole thread group)."""
    return ((~pid) << 3) | 2


def load_average() -> float:
    return os.getloadavg()[0]


@dataclass
class Measured:
    """One measurement of a server under load."""

    requests: int
    messages_per_request: int
    seconds: float
    server_cpu_s: float
    client_cpu_s: float
    errors: int
    load: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def messages_per_s(self) -> float:
        return self.requests_per_s * self.messages_per_request

    @property
    def server_us_per_request(self) -> float:
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")

    @property
    def server_us_per_message(self) -> float:
        return self.server_us_per_request / self.messages_per_request

    @property
    def server_cores(self) -> float:
        return self.server_cpu_s / self.seconds if self.seconds else float("nan")

    @property
    def client_cores(self) -> float:
        return self.client_cpu_s / self.seconds if self.seconds else float("nan")


def median_of(runs: list[Measured]) -> Measured:
    """The run with the median server CPU per request (its own rate and load with it): one real run, not a blend."""
    ordered = sorted(runs, key=lambda m: m.server_us_per_request)
    return ordered[(len(ordered) - 1) // 2]


def loadgen(
    port: int,
    request: bytes,
    protocol: str,
    server_pid: int,
    connections: int,
    seconds: float,
    replies: int = 1,
    messages_per_request: int = 1,
    warmup_s: float = 0.5,
) -> Measured:
    """One closed-loop run of bench/loadgen.c against 127.0.0.1:`port`, the server's CPU read around it.

    The warm-up is a run of its own before the measured one, so the server's CPU counted is the
    measured run's (with its connections' set-up and close, a few hundred microseconds)."""
    binary = build("loadgen.c")
    with tempfile.NamedTemporaryFile(prefix="loadgen-", suffix=".req", delete=False) as f:
        f.write(request)
        path = f.name
    try:
        argv = [binary, str(port), str(connections)]
        if warmup_s > 0:
            subprocess.run([*argv, str(warmup_s), path, protocol, str(replies)], check=True, capture_output=True, timeout=warmup_s + 60)
        before = cpu_seconds(server_pid)
        done = subprocess.run([*argv, str(seconds), path, protocol, str(replies)], capture_output=True, text=True, timeout=seconds + 60)
        after = cpu_seconds(server_pid)
    finally:
        os.unlink(path)
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    values = dict(item.split("=") for item in done.stdout.split())
    return Measured(
        requests=int(values["requests"]),
        messages_per_request=messages_per_request,
        seconds=float(values["seconds"]),
        server_cpu_s=after - before,
        client_cpu_s=float(values["cpu_s"]),
        errors=int(values["errors"]),
        load=load_average(),
    )


def http_request(method: str, path: str, body: bytes = b"", content_type: str | None = None) -> bytes:
    """One HTTP/1.1 keep-alive request, byte for byte as loadgen sends it."""
    head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    if content_type is not None:
        head += f"content-type: {content_type}\r\n"
    if body or method in ("POST", "PUT"):
        head += f"content-length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def resp_command(*parts: bytes) -> bytes:
    """One Redis command in RESP (an array of bulk strings)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class CopyBaseline:
    """bench/baseline_copy.c through ctypes: memcpy of many messages in one call, over prefaulted memory."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(build("baseline_copy.c", shared=True))
        self._copy = lib.copy_messages
        self._copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t]
        self._copy.restype = ctypes.c_size_t

    def copy(self, dst: ctypes.c_void_p | int, src: ctypes.c_void_p | int, sizes: ctypes.Array[ctypes.c_uint32]) -> int:
        """Copy len(sizes) consecutive messages of the given sizes from `src` to `dst`; the bytes copied."""
        return int(self._copy(dst, src, sizes, len(sizes)))
