"""Browser tests: a real ``manage.py runbroker`` on free ports with its own data dir, serving
HTTPS and WSS with a certificate made at test time, driven by Playwright through Debian's
chromium (never a downloaded browser). Browser contexts come from :func:`new_context`: they
accept the test certificate and turn every Content-Security-Policy violation into a console
error, which the tests' ``page`` fixture fails on."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, free_port, wait_for_port
from tests.support.certificates import TestCA
from tests.support.manage import (
    SHARED_SETTINGS,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"]
SCREENSHOTS = REPO / "test-output" / "screenshots"
PASSWORD = "e2e-console-password"


#: Runs in every page before its own scripts (outside the page's CSP): a violation becomes
#: a console error naming the directive and what was blocked.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (e) {
  console.error("CSP violation: " + e.violatedDirective + " blocked " + (e.blockedURI || "inline")
    + " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


@dataclass
class Server:
    base: str
    admin_token: str
    operator_token: str
    data_dir: Path
    tls: ssl.SSLContext

    def get(self, path: str, token: str | None = None) -> Any:
        """``GET`` ``path`` (JSON), over HTTPS trusting the test CA only."""
        headers = {"Authorization": f"Token {token}"} if token else {}
        request = urllib.request.Request(f"{self.base}{path}", headers=headers)
        with urllib.request.urlopen(request, timeout=10, context=self.tls) as response:
            return json.loads(response.read())

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.base}/api/v1{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Token {token or self.operator_token}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=10, context=self.tls) as response:
            raw = response.read()
        return json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("cairn-e2e")
    ca = TestCA(data_dir / "tls")
    files = ca.server("127.0.0.1", "localhost")
    port = free_port()
    env = broker_env(
        data_dir,
        port,
        0,
        drop=SHARED_SETTINGS,
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        CAIRN_TLS_CERT=str(files.cert),
        CAIRN_TLS_KEY=str(files.key),
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")
    admin_token = create_token(env, "root-bot", "admin")
    operator_token = create_token(env, "bot", "operator")
    log = (data_dir / "broker.log").open("wb")
    proc = start_runbroker(env, log)
    try:
        wait_for_port(port, 60, proc)
        yield Server(
            f"https://127.0.0.1:{port}", admin_token, operator_token, data_dir, ca.ssl_context()
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (tools/system-deps.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def new_context(browser: Any, **options: Any) -> Any:
    """A browser context for the test broker: its certificate accepted (the test CA is not in
    chromium's store), CSP violations reported as console errors."""
    context = browser.new_context(ignore_https_errors=True, **options)
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    return context


def shot(page: Any, name: str, full_page: bool = True) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def log_in(page: Any, base: str, username: str = "ops", password: str = PASSWORD) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
