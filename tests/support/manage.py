"""Driving a broker's ``manage.py`` and REST API from end-to-end tests, over real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]


#: Settings a developer's shell may carry that would point a test broker at shared state
#: (another store, a shared Redis or database, Celery workers).
SHARED_SETTINGS = ("CAIRN_STORE_DIR", "CAIRN_REDIS_URL", "CAIRN_SERVICES", "DATABASE_URL")


def broker_env(
    data_dir: Path,
    http_port: int,
    kafka_port: int | None = None,
    *,
    drop: Sequence[str] = ("CAIRN_STORE_DIR",),
    **settings: str,
) -> dict[str, str]:
    """The environment of a test broker keeping its files in ``data_dir``: this process's,
    with ``drop`` removed and ``settings`` added (``kafka_port`` None: the default)."""
    ports = {"CAIRN_HTTP_PORT": str(http_port)}
    if kafka_port is not None:
        ports["CAIRN_KAFKA_PORT"] = str(kafka_port)
    env = dict(os.environ, CAIRN_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1", **ports)
    env.update(settings)
    for name in drop:
        env.pop(name, None)
    return env


def start_runbroker(
    env: dict[str, str], output: int | IO[Any] = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    """``manage.py runbroker`` in ``env``, stdout and stderr both to ``output``."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "runbroker"],
        cwd=REPO,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py`` with ``args`` in ``env``; its stdout (the test fails if it fails)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def create_token(env: dict[str, str], username: str, role: str) -> str:
    """A new API token for ``username`` with ``role`` (``manage.py createtoken``)."""
    return manage(env, "createtoken", username, "--role", role).strip().splitlines()[-1]


class ApiClient:
    """JSON calls to ``<base>/api/v1`` with a token."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        timeout: float = 20,
    ) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(
            f"{self.base}/api/v1{path}{query}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)
