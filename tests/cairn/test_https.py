"""The HTTP listener over TLS, as an operator runs it: a real ``manage.py runbroker`` with a
certificate chain made at test time (server ← intermediate ← root; clients trust the root
only, so every handshake also proves the whole chain is sent). REST and /healthz over HTTPS,
a console login with Secure cookies, HSTS and the CSP, the live trace over WSS with its origin
rule and frame limits, static-file traversal, and a broken key pair refused at start."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.certificates import TestCA
from tests.support.manage import (
    REPO,
    SHARED_SETTINGS,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)
from tests.support.websocket import Closed, HandshakeRefused, WebSocket

pytestmark = pytest.mark.slow

PASSWORD = "https-test-password"
PROXY_ORIGIN = "https://console.example.com"


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def cookies(self) -> dict[str, str]:
        """Set-Cookie headers by cookie name (the whole header line)."""
        return {h.split("=", 1)[0]: h for h in self.headers.get_all("Set-Cookie") or []}


@dataclass
class HttpsBroker:
    port: int
    context: ssl.SSLContext
    token: str
    env: dict[str, str]
    log: Path

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=20)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            reply = conn.getresponse()
            return Response(reply.status, reply.msg, reply.read())
        finally:
            conn.close()

    def api(self, method: str, path: str, body: object = None) -> Response:
        return self.request(
            method,
            f"/api/v1{path}",
            None if body is None else json.dumps(body).encode(),
            {"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )

    def websocket(self, path: str = "/ws/trace/", **kwargs: object) -> WebSocket:
        return WebSocket.connect(
            f"wss://127.0.0.1:{self.port}{path}",
            context=self.context,
            **kwargs,  # type: ignore[arg-type]
        )

    def log_in(self) -> str:
        """The console's login form, as a browser posts it; the session cookie's value."""
        page = self.request("GET", "/login/")
        csrf_cookie = page.cookies()["csrftoken"].split(";")[0]
        form_token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body)
        assert form_token is not None
        form = urllib.parse.urlencode(
            {
                "csrfmiddlewaretoken": form_token.group(1).decode(),
                "username": "ops",
                "password": PASSWORD,
                "next": "/",
            }
        ).encode()
        done = self.request(
            "POST",
            "/login/",
            form,
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": csrf_cookie,
                "Origin": self.base,
                "Referer": f"{self.base}/login/",
            },
        )
        assert done.status == 302, done.body[:500]
        return done.cookies()["sessionid"].split(";")[0]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[HttpsBroker]:
    data_dir = tmp_path_factory.mktemp("cairn-https")
    files = ca.server("127.0.0.1", "localhost", via_intermediate=True)
    port = free_port()
    env = broker_env(
        data_dir,
        port,
        0,
        drop=SHARED_SETTINGS,
        CAIRN_TLS_CERT=str(files.cert),
        CAIRN_TLS_KEY=str(files.key),
        CAIRN_ALLOWED_ORIGINS=PROXY_ORIGIN,
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")
    token = create_token(env, "bot", "operator")
    log = data_dir / "broker.log"
    with log.open("wb") as out:
        proc = start_runbroker(env, out)
        try:
            wait_for_port(port, 60, proc)
            yield HttpsBroker(port, ca.ssl_context(), token, env, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "SuspiciousFileOperation" not in text, text


def test_rest_and_healthz_over_https(broker: HttpsBroker) -> None:
    assert f"Cairn broker: https://127.0.0.1:{broker.port}/" in broker.log.read_text()
    health = broker.request("GET", "/healthz")
    assert health.status == 200
    assert json.loads(health.body) == {"status": "ok", "problems": 0, "conditions": 0}
    assert health.headers["Strict-Transport-Security"] == "max-age=31536000"
    detail = broker.request(
        "GET", "/healthz?detail=1", headers={"Authorization": f"Token {broker.token}"}
    )
    assert detail.status == 200 and json.loads(detail.body)["store_dir"].endswith("store")

    created = broker.api(
        "POST", "/topics", {"name": "Secure", "read_queue_nums": 1, "write_queue_nums": 1}
    )
    assert created.status == 201, created.body
    sent = broker.api(
        "POST", "/topics/Secure/messages", {"messages": [{"body": "over tls", "keys": ["k1"]}]}
    )
    assert sent.status == 200, sent.body
    listed = broker.api("GET", "/topics")
    assert listed.status == 200
    assert "Secure" in listed.body.decode()


def test_tls_versions_and_suites(broker: HttpsBroker, ca: TestCA) -> None:
    """TLS 1.2 and 1.3; 1.2 with forward-secret AEAD suites only (a client offering only a
    CBC suite, which a permissive server accepts, is refused)."""
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        context = ca.ssl_context()
        context.minimum_version = context.maximum_version = version
        raw = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls_socket:
            assert tls_socket.version() == name
            suite = tls_socket.cipher()
            assert suite is not None and ("GCM" in suite[0] or "CHACHA20" in suite[0])
    cbc = ca.ssl_context()
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA")
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    with pytest.raises(ssl.SSLError), cbc.wrap_socket(raw, server_hostname="127.0.0.1"):
        pass
    raw.close()


def test_plain_http_gets_no_answer_on_the_tls_port(broker: HttpsBroker) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", broker.port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()


def test_console_login_over_https_has_secure_cookies_hsts_and_csp(broker: HttpsBroker) -> None:
    page = broker.request("GET", "/login/")
    assert page.status == 200
    csrf = page.cookies()["csrftoken"]
    assert "; Secure" in csrf
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
    policy = page.headers["Content-Security-Policy"]
    for directive in ("script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
        assert directive in policy
    assert "unsafe-inline" not in policy
    assert page.headers["X-Frame-Options"] == "DENY"

    session = broker.log_in()
    assert session.startswith("sessionid=")
    # Logged in: the session cookie itself is Secure and HttpOnly (checked on the raw header).
    again = broker.request("GET", "/login/")
    form_token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', again.body)
    assert form_token is not None
    form = urllib.parse.urlencode(
        {
            "csrfmiddlewaretoken": form_token.group(1).decode(),
            "username": "ops",
            "password": PASSWORD,
        }
    ).encode()
    csrf_cookie = again.cookies()["csrftoken"].split(";")[0]
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": csrf_cookie}
    done = broker.request("POST", "/login/", form, dict(headers, Origin=broker.base))
    assert done.status == 302
    set_session = done.cookies()["sessionid"]
    assert "; Secure" in set_session and "; HttpOnly" in set_session
    overview = broker.request("GET", "/", headers={"Cookie": set_session.split(";")[0]})
    assert overview.status == 200 and b"Overview" in overview.body
    assert "Content-Security-Policy" in overview.headers

    # CSRF: a page of another origin cannot post the form; CAIRN_ALLOWED_ORIGINS can.
    refused = broker.request("POST", "/login/", form, dict(headers, Origin="https://evil.example"))
    assert refused.status == 403
    proxied = broker.request("POST", "/login/", form, dict(headers, Origin=PROXY_ORIGIN))
    assert proxied.status == 302


def test_live_trace_over_wss(broker: HttpsBroker) -> None:
    broker.api("POST", "/topics", {"name": "Live", "read_queue_nums": 1, "write_queue_nums": 1})
    session = broker.log_in()
    # A browser on the broker's own origin, with its session cookie.
    with broker.websocket(origin=broker.base, cookie=session) as ws:
        ws.send_json({"topic": "Live", "key": "order-1", "begin": 0, "end": None})
        ws.until(type="progress", phase="live")
        sent = broker.api(
            "POST", "/topics/Live/messages", {"messages": [{"body": "hi", "keys": ["order-1"]}]}
        )
        msg_id = json.loads(sent.body)["results"][0]["msg_id"]
        frame = ws.until(type="message")
        assert (frame["source"], frame["message"]["msg_id"]) == ("live", msg_id)

    # A program with a token and no Origin.
    with broker.websocket(f"/ws/trace/?token={broker.token}") as ws:
        ws.send_json({"topic": "Live", "key": "order-1", "begin": 0, "end": None})
        assert ws.until(type="message")["source"] == "stored"

    # Pages of other origins are refused before authentication, session cookie or not.
    for origin in (
        f"https://127.0.0.1:{broker.port + 1}",  # another port on the same host
        f"http://127.0.0.1:{broker.port}",  # the same port, the wrong scheme
        f"https://localhost:{broker.port}",  # another host name than the one asked for
        "https://evil.example",
        "null",
    ):
        with pytest.raises(HandshakeRefused) as refused:
            broker.websocket(origin=origin, cookie=session)
        assert refused.value.status == 403, origin
    # CAIRN_ALLOWED_ORIGINS (a proxy's public origin) is accepted.
    broker.websocket(origin=PROXY_ORIGIN, cookie=session).close()


def test_frame_limits_on_the_real_server(broker: HttpsBroker) -> None:
    broker.api("POST", "/topics", {"name": "Frames", "read_queue_nums": 1, "write_queue_nums": 1})
    with broker.websocket(f"/ws/trace/?token={broker.token}") as ws:
        for frame, rule in (("[" * 100_000, "max_size"), ("[" * 5_000, "depth")):
            ws.send_text(frame)
            error = ws.recv_json()
            assert (error["type"], error["code"], error["rule"]) == ("error", "bad_request", rule)
        # Still open: a good frame subscribes.
        ws.send_json({"topic": "Frames", "key": "k", "begin": 0, "end": None})
        assert ws.until(type="progress", phase="live")["phase"] == "live"
        # Above the server's message limit (256 KiB) the server drops the connection unread
        # (no close frame: a browser reports 1006).
        with contextlib.suppress(OSError):  # dropped while the rest is still being sent
            ws.send_text("x" * 300_000)
        with pytest.raises(Closed) as closed:
            ws.until(type="never")
        assert closed.value.code is None


@pytest.mark.parametrize(
    "path",
    [
        "/static/webui/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/webui/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
        "/static/webui/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/static/%2e%2e%5c%2e%2e%5c%2e%2e%5cetc%5cpasswd",
        "/static/webui/..\\..\\..\\cairn\\settings.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/webui/%252e%252e/%252e%252e/etc/passwd",
        "/static/webui/console.css%00.js",
        "/static/webui/",
        "/static/",
    ],
)
def test_static_paths_outside_the_files_are_404(broker: HttpsBroker, path: str) -> None:
    reply = broker.request("GET", path)
    assert reply.status == 404, (path, reply.status)
    assert b"root:" not in reply.body and b"SECRET" not in reply.body


def test_static_files_are_served(broker: HttpsBroker) -> None:
    css = broker.request("GET", "/static/webui/console.css?v=1")
    assert css.status == 200
    assert css.headers["Content-Type"] == "text/css; charset=utf-8"
    assert css.headers["X-Content-Type-Options"] == "nosniff"
    assert b".mt-gap" in css.body
    cached = broker.request(
        "GET",
        "/static/webui/console.css",
        headers={"If-Modified-Since": css.headers["Last-Modified"]},
    )
    assert cached.status == 304 and cached.body == b""
    assert broker.request("POST", "/static/webui/console.css").status == 405


def test_a_key_that_is_not_the_certificates_stops_the_broker(tmp_path: Path, ca: TestCA) -> None:
    one, other = ca.server("127.0.0.1", name="one"), ca.server("127.0.0.1", name="other")
    port = free_port()
    env = broker_env(
        tmp_path,
        port,
        0,
        drop=SHARED_SETTINGS,
        CAIRN_TLS_CERT=str(one.cert),
        CAIRN_TLS_KEY=str(other.key),
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "runbroker"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"CAIRN_TLS_KEY {other.key} is not the private key of the certificate" in text
    assert "Traceback" not in text
    assert not (tmp_path / "store").exists()  # refused before anything started
