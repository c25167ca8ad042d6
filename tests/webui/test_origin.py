"""webui.origin: a WebSocket handshake is accepted from the broker's own origin and
CAIRN_ALLOWED_ORIGINS only (decision on raw headers, then through the real middleware stack)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from tests.webui.conftest import make_user
from webui.origin import origin_allowed
from webui.routing import websocket_application

HOSTS = ["localhost", "127.0.0.1", "[::1]", ".example.com"]
PROXY = ("https", "console.example.net", 443)


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        # The broker's own origin, as the Host header names it.
        ("http://127.0.0.1:8080", "127.0.0.1:8080", "http", True),
        ("http://localhost:8080", "localhost:8080", "http", True),
        ("http://LOCALHOST:8080", "localhost:8080", "http", True),
        ("http://[::1]:8080", "[::1]:8080", "http", True),
        ("https://broker.example.com", "broker.example.com", "https", True),
        ("https://broker.example.com:443", "broker.example.com", "https", True),
        ("https://broker.example.com", "broker.example.com:443", "https", True),
        ("http://localhost", "localhost", "http", True),
        # Another port on the same host: another local web app riding the session cookie.
        ("http://127.0.0.1:3000", "127.0.0.1:8080", "http", False),
        ("http://localhost:3000", "localhost:8080", "http", False),
        ("http://localhost", "localhost:8080", "http", False),
        # Another host, or the same machine under another name than the one asked for.
        ("http://evil.example:8080", "127.0.0.1:8080", "http", False),
        ("http://localhost:8080", "127.0.0.1:8080", "http", False),
        ("http://127.0.0.1.evil.example:8080", "127.0.0.1:8080", "http", False),
        # The scheme the broker does not serve.
        ("https://127.0.0.1:8080", "127.0.0.1:8080", "http", False),
        ("http://broker.example.com", "broker.example.com", "https", False),
        # A Host the broker does not answer to (DNS rebinding), or none.
        ("http://rebound.test:8080", "rebound.test:8080", "http", False),
        ("http://127.0.0.1:8080", None, "http", False),
        ("http://127.0.0.1:8080", "127.0.0.1:notaport", "http", False),
        # Not an origin at all.
        ("null", "127.0.0.1:8080", "http", False),
        ("", "127.0.0.1:8080", "http", False),
        ("file://", "127.0.0.1:8080", "http", False),
        ("http://127.0.0.1:8080/path", "127.0.0.1:8080", "http", False),
        ("http://127.0.0.1:99999", "127.0.0.1:8080", "http", False),
        # CAIRN_ALLOWED_ORIGINS: exactly, whatever the Host.
        ("https://console.example.net", "127.0.0.1:8080", "http", True),
        ("https://console.example.net:443", "10.0.0.5:8080", "http", True),
        ("https://console.example.net:8443", "127.0.0.1:8080", "http", False),
        ("http://console.example.net", "127.0.0.1:8080", "http", False),
        # No Origin: not a browser (it must bring a token; checked by authentication).
        (None, "127.0.0.1:8080", "http", True),
    ],
)
def test_origin_decision(origin: str | None, host: str | None, scheme: str, allowed: bool) -> None:
    assert origin_allowed(origin, host, scheme, HOSTS, [PROXY]) is allowed


def _cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def _handshake(headers: list[tuple[bytes, bytes]]) -> tuple[bool, Any]:
    async def run() -> tuple[bool, Any]:
        comm = WebsocketCommunicator(websocket_application(), "/ws/trace/", headers=headers)
        result = await comm.connect()
        if result[0]:
            await comm.disconnect()
        return result

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
def test_handshakes_through_the_stack(settings: Any) -> None:
    settings.CAIRN_ALLOWED_ORIGINS = (PROXY,)
    cookie = _cookie(make_user("vera", "viewer"))

    def attempt(origin: bytes, host: bytes) -> bool:
        return _handshake([(b"origin", origin), (b"host", host), (b"cookie", cookie)])[0]

    assert attempt(b"http://127.0.0.1:8080", b"127.0.0.1:8080")
    assert not attempt(b"http://127.0.0.1:3000", b"127.0.0.1:8080")
    assert not attempt(b"http://localhost:8080", b"127.0.0.1:8080")
    assert not attempt(b"https://127.0.0.1:8080", b"127.0.0.1:8080")
    assert not attempt(b"null", b"127.0.0.1:8080")
    assert attempt(b"https://console.example.net", b"127.0.0.1:8080")

    # With TLS on, the broker's origin is https and http pages are strangers.
    settings.CAIRN_HTTPS = True
    assert attempt(b"https://127.0.0.1:8443", b"127.0.0.1:8443")
    assert not attempt(b"http://127.0.0.1:8443", b"127.0.0.1:8443")

    # No Origin: not a browser's handshake (browsers always send one). The origin check lets
    # it through and authentication decides: a valid credential passes, none is 4401.
    assert _handshake([(b"host", b"127.0.0.1:8080"), (b"cookie", cookie)])[0]
    assert _handshake([(b"host", b"127.0.0.1:8080")]) == (False, 4401)
