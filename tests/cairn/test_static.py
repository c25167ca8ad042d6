"""cairn.static in process: files by name from the finders' index; every other path under
/static/ a plain 404 (the real server over HTTPS: tests/cairn/test_https.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cairn.static import StaticFiles, static_index


async def _downstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"django"})


def call(
    app: StaticFiles, path: str, method: str = "GET", headers: tuple[tuple[bytes, bytes], ...] = ()
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


@pytest.fixture(scope="module")
def app() -> StaticFiles:
    return StaticFiles(_downstream)


def test_the_index_holds_the_consoles_files_by_url_name() -> None:
    index = static_index()
    assert {"webui/console.css", "webui/console.js", "webui/favicon.svg", "api/docs.css"} <= set(
        index
    )
    assert index["webui/console.js"].content_type == "text/javascript; charset=utf-8"
    assert index["webui/favicon.svg"].content_type == "image/svg+xml"
    assert all(not name.startswith("/") and ".." not in name.split("/") for name in index)


def test_a_file_is_served_with_its_type_and_validators(app: StaticFiles) -> None:
    status, headers, body = call(app, "/static/webui/console.css")
    assert status == 200 and b".mt-gap" in body
    assert headers[b"content-type"] == b"text/css; charset=utf-8"
    assert headers[b"content-length"] == str(len(body)).encode()
    assert headers[b"cache-control"] == b"no-cache"
    assert headers[b"x-content-type-options"] == b"nosniff"
    status, head_headers, head_body = call(app, "/static/webui/console.css", "HEAD")
    assert (status, head_body, head_headers[b"content-length"]) == (
        200,
        b"",
        str(len(body)).encode(),
    )
    since = ((b"if-modified-since", headers[b"last-modified"]),)
    assert call(app, "/static/webui/console.css", headers=since)[0] == 304
    old = ((b"if-modified-since", b"Thu, 01 Jan 1970 00:00:00 GMT"),)
    assert call(app, "/static/webui/console.css", headers=old)[0] == 200
    assert (
        call(app, "/static/webui/console.css", headers=((b"if-modified-since", b"junk"),))[0] == 200
    )
    status, headers, _ = call(app, "/static/webui/console.css", "POST")
    assert status == 405 and headers[b"allow"] == b"GET, HEAD"


@pytest.mark.parametrize(
    "path",
    [
        # Daphne hands the application the percent-decoded path: these are what arrive.
        "/static/webui/../../../etc/passwd",
        "/static/../cairn/settings.py",
        "/static/webui/..\\..\\cairn\\settings.py",
        "/static/..\\..\\etc\\passwd",
        "/static//etc/passwd",
        "/static/webui/%2e%2e/%2e%2e/etc/passwd",  # double-encoded: stays literal
        "/static/webui/./console.css",
        "/static/webui/console.css\x00.js",
        "/static/webui/console.css/",
        "/static/webui/",
        "/static/webui",
        "/static/",
        "/static/webui/nope.js",
        "/static/C:\\Windows\\win.ini",
    ],
)
def test_anything_but_an_indexed_name_is_404(app: StaticFiles, path: str) -> None:
    status, headers, body = call(app, path)
    assert (status, body) == (404, b"Not Found")
    assert headers[b"content-type"] == b"text/plain; charset=utf-8"


def test_other_paths_go_to_django(app: StaticFiles) -> None:
    assert call(app, "/healthz")[0] == 299
    assert call(app, "/staticky")[0] == 299


def test_favicon_ico_is_the_committed_icon(app: StaticFiles) -> None:
    """Browsers ask every origin for /favicon.ico; it was a logged 404 on each page."""
    status, headers, body = call(app, "/favicon.ico")
    assert status == 200 and headers[b"content-type"].startswith(b"image/")
    assert body[:4] == b"\x00\x00\x01\x00" and len(body) < 10 * 1024  # an ICO, small
    assert call(app, "/favicon.ico", "POST")[0] == 405
    assert call(app, "/favicon.png")[0] == 299  # not an alias: Django's
