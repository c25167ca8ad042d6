"""runbroker as a user runs it: a real process, real HTTP, real signals."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.manage import broker_env, create_token, start_runbroker

pytestmark = pytest.mark.slow


def start_broker(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    return start_runbroker(broker_env(data_dir, port))


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out.decode()


def test_serves_healthz_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    # A data dir left open by an older version (755) is closed (700) at start.
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    proc = start_broker(data, port)
    try:
        wait_for_port(port, 60, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            health = json.load(r)
    finally:
        code, out = stop(proc)
    assert health == {"status": "ok", "problems": 0, "conditions": 0}  # public: counts only
    assert f"Cairn broker: http://127.0.0.1:{port}/ (store {data / 'store'}," in out
    assert (data / "store").is_dir()
    assert code == 0, out
    assert "Cairn broker stopped." in out
    # First start: an admin account with a random password, in a file only the broker's
    # user may read; the console URL is printed, never the password.
    secret = data / "first-admin-password"
    password = secret.read_text().strip()
    assert len(password) >= 16 and password not in out
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert f"its password is in {secret}" in out
    assert f"log in at http://127.0.0.1:{port}/login/" in out
    # The data dir and the database are the broker user's alone.
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "cairn.sqlite3").stat().st_mode) == 0o600
    for extra in ("cairn.sqlite3-wal", "cairn.sqlite3-shm"):
        if (data / extra).exists():
            assert stat.S_IMODE((data / extra).stat().st_mode) == 0o600, extra
    # The password logs in (REST), and /admin/ is gone.
    login = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/auth/login",
        data=json.dumps({"username": "admin", "password": password}).encode(),
        headers={"Content-Type": "application/json"},
    )

    # Second start: the account exists, no new password; Ctrl-C also stops it.
    proc = start_broker(data, port)
    try:
        wait_for_port(port, 60, proc)
        with urllib.request.urlopen(login, timeout=10) as r:
            assert json.load(r)["role"] == "admin"
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/", timeout=10)
        assert gone.value.code == 404
        gone.value.close()
    finally:
        code, out = stop(proc, signal.SIGINT)
    assert code == 0, out
    assert "First start" not in out and password not in out


def test_busy_port_is_a_readable_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_broker(tmp_path, port)
        out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in text
    assert "Traceback" not in text


def test_second_broker_on_the_same_store_is_refused(tmp_path: Path) -> None:
    first_port, second_port = free_port(), free_port()
    first = start_broker(tmp_path, first_port)
    try:
        wait_for_port(first_port, 60, first)
        token = create_token(broker_env(tmp_path, first_port), "probe", "viewer")
        detail = urllib.request.Request(
            f"http://127.0.0.1:{first_port}/healthz?detail=1",
            headers={"Authorization": f"Token {token}"},
        )
        with urllib.request.urlopen(detail, timeout=10) as r:
            health = json.load(r)
        assert health["store"]["dispatch_behind_bytes"] == 0
        # The store's services (inline mode) and the broker's own loops.
        assert set(health["service_state"]) == {
            "reput",
            "flush",
            "cleanup",
            "index",
            "disk_guard",
            "snapshot",
            "delay_delivery",
            "offsets_persist",
            "deletion_journal",
        }
        second = start_broker(tmp_path, second_port)
        out, _ = second.communicate(timeout=60)
        text = out.decode()
        assert second.returncode != 0
        assert "is locked by another process" in text
        assert "Traceback" not in text
    finally:
        code, out = stop(first)
    assert code == 0, out
    assert not (tmp_path / "store" / "abort").exists()  # clean shutdown
