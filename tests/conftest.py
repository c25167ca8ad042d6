"""Session-wide fixtures: a private Redis server, free ports, subprocess helpers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    port: int, timeout_s: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
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


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis only this test session uses (or ``CAIRN_TEST_REDIS_URL`` when set).

    ``make test`` installs Debian's redis-server when the binary is missing.
    """
    configured = os.environ.get("CAIRN_TEST_REDIS_URL", "").strip()
    if configured:
        yield configured
        return
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail(
            "redis-server is not installed; `make test` installs it (apt-get install redis-server)"
        )
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, 15, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession of the test run (2 cores, UI off), shared by every
    ``spark`` test (starting one takes ~10 s)."""
    from pipeline.session import get_session, stop_session

    with warnings.catch_warnings():
        # Py4J and PySpark start-up emit ResourceWarnings about sockets they keep on purpose.
        warnings.simplefilter("ignore", ResourceWarning)
        session = get_session(
            "local[2]", app_name="cairn-tests", conf={"spark.ui.enabled": "false"}
        )
    yield session
    stop_session()
