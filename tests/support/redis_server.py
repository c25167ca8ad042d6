"""A private redis-server on a free loopback port, for tests and benchmarks.

Used by the test session's ``redis_url`` fixture and by bench/services.py and bench/kafka.py,
so that nothing ever shares state with the machine's own Redis.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    port: int, timeout_s: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once something accepts connections on ``port``; fail if ``proc`` dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open within {timeout_s} s")


@contextmanager
def private_redis(workdir: Path, timeout_s: float = 15.0) -> Iterator[str]:
    """Run redis-server (no persistence) with its files in ``workdir``; yield its URL.

    Raises:
        RuntimeError: redis-server is not installed (``make test`` installs it).
    """
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError(
            "redis-server is not installed; `make test` installs it (apt-get install redis-server)"
        )
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, timeout_s, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
