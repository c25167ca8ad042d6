"""Which pages may open the live-trace WebSocket: the broker's own origin and
``CAIRN_ALLOWED_ORIGINS``, nothing else.

A browser sends the session cookie with every WebSocket handshake to the broker's host,
whatever page opened the socket: cookies are kept per host, not per port or scheme, so a page
served by another program on the same machine (``http://localhost:3000``) could follow keys
as the logged-in user. What the browser cannot forge is ``Origin``, the opening page's
``scheme://host:port``. A handshake is accepted when:

* it has no ``Origin`` header: not a browser, so it holds no session cookie and must bring
  ``?token=`` (:mod:`webui.auth`);
* its ``Origin`` is the broker's own: the scheme the broker serves (``https`` with
  ``CAIRN_TLS_CERT``, else ``http``), and the host and port of the request's ``Host`` header,
  whose host must be one of ``ALLOWED_HOSTS`` (``CAIRN_ALLOWED_HOSTS``); default ports count
  as written (``https://h`` is ``https://h:443``);
* or its ``Origin`` is one of ``CAIRN_ALLOWED_ORIGINS`` (scheme, host and port exactly), e.g.
  a reverse proxy's public address.

Anything else, ``Origin: null`` and unparsable values included, is refused at the handshake
(HTTP 403), before authentication runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from cairn.env import parse_origin

Origin = tuple[str, str, int]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            try:
                return bytes(value).decode("ascii")
            except UnicodeDecodeError:
                return ""
    return None


def own_origin(host_header: str, scheme: str, allowed_hosts: Iterable[str]) -> Origin | None:
    """The origin a page served by the broker has, from the request's ``Host`` header and the
    scheme the broker serves; None when the host is not one the broker answers to."""
    domain, port = split_domain_port(host_header)
    if not domain or not validate_host(domain, list(allowed_hosts)):
        return None
    try:
        return parse_origin(f"{scheme}://{domain}" + (f":{port}" if port else ""))
    except ValueError:
        return None


def origin_allowed(
    origin_header: str | None,
    host_header: str | None,
    scheme: str,
    allowed_hosts: Iterable[str],
    allowed_origins: Iterable[Origin],
) -> bool:
    """The decision of the module docstring, on the raw header values."""
    if origin_header is None:
        return True
    try:
        origin = parse_origin(origin_header)
    except ValueError:
        return False  # "null", garbage, or not http(s)
    if origin in set(allowed_origins):
        return True
    return host_header is not None and origin == own_origin(host_header, scheme, allowed_hosts)


class OwnOriginValidator:
    """ASGI middleware for WebSocket handshakes: :func:`origin_allowed`, else refused."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        # Daphne's WebSocket scope has no "scheme": the broker serves one, known from settings.
        served = scope.get("scheme") or ("wss" if settings.CAIRN_HTTPS else "ws")
        allowed = origin_allowed(
            _header(scope, b"origin"),
            _header(scope, b"host"),
            "https" if served == "wss" else "http",
            settings.ALLOWED_HOSTS,
            settings.CAIRN_ALLOWED_ORIGINS,
        )
        if not allowed:
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
