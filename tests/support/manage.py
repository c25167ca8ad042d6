"""Driving a broker's ``manage.py`` and REST API from end-to-end tests, over real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


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
