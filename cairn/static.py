"""Static files (the console's CSS, JavaScript and icons), served by the broker under
``STATIC_URL`` in front of Django, and ``/favicon.ico`` (:data:`ALIASES`).

Only files that the static finders list when the broker starts are served. The URL path after
``/static/`` is looked up in that index, never joined to a directory, so no path can reach a
file outside it: ``..`` segments (plain or percent-encoded), backslashes, absolute paths and
NUL bytes are names the index does not hold, answered with a plain 404 like any other unknown
name, with no log line and no traceback. GET and HEAD only (405 otherwise).

Responses carry ``Last-Modified`` (an ``If-Modified-Since`` at or after it gets 304),
``Cache-Control: no-cache`` (browsers revalidate, so an upgrade's files are used at once) and
``X-Content-Type-Options: nosniff``. Files are read when asked for (they are small), in a
worker thread, so a slow disk does not hold the event loop.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.contrib.staticfiles import finders
from django.utils.http import http_date, parse_http_date_safe

_METHODS = ("GET", "HEAD")
#: Paths outside ``STATIC_URL`` that browsers ask for by convention, and the indexed file
#: that answers them: every tab, JSON page and API document asks for ``/favicon.ico``, which
#: was a logged 404 each time.
ALIASES = {"/favicon.ico": "webui/favicon.ico"}


@dataclass(frozen=True, slots=True)
class StaticFile:
    path: Path
    content_type: str


def static_index() -> dict[str, StaticFile]:
    """Every file the finders list, by its name under ``STATIC_URL`` (``webui/console.css``).

    The first finder listing a name wins, as in ``finders.find`` and ``collectstatic``."""
    index: dict[str, StaticFile] = {}
    for finder in finders.get_finders():
        for name, storage in finder.list([]):
            prefix = getattr(storage, "prefix", None)
            url_name = (os.path.join(prefix, name) if prefix else name).replace(os.sep, "/")
            if url_name in index:
                continue
            content_type = mimetypes.guess_type(url_name)[0] or "application/octet-stream"
            if content_type.startswith("text/"):
                content_type += "; charset=utf-8"
            index[url_name] = StaticFile(Path(storage.path(name)), content_type)
    return index


class StaticFiles:
    """ASGI: ``STATIC_URL`` paths from :func:`static_index`, everything else to ``app``."""

    def __init__(self, app: Any, index: dict[str, StaticFile] | None = None) -> None:
        self.app = app
        prefix = urlparse(settings.STATIC_URL).path
        self.prefix = prefix if prefix.startswith("/") else "/" + prefix
        self.index = static_index() if index is None else index

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if path in ALIASES:
            name = ALIASES[path]
        elif path.startswith(self.prefix):
            name = path[len(self.prefix) :]
        else:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if method not in _METHODS:
            await _respond(send, 405, b"Method Not Allowed", [(b"allow", b"GET, HEAD")])
            return
        found = self.index.get(name)
        if found is None:
            await _respond(send, 404, b"Not Found")
            return
        try:
            body, mtime = await asyncio.to_thread(_read, found.path)
        except OSError:  # removed or unreadable since the broker started
            await _respond(send, 404, b"Not Found")
            return
        headers = [
            (b"content-type", found.content_type.encode()),
            (b"last-modified", http_date(mtime).encode()),
            (b"cache-control", b"no-cache"),
        ]
        since = _header(scope, b"if-modified-since")
        if since is not None:
            when = parse_http_date_safe(since)
            if when is not None and int(mtime) <= when:
                await _respond(send, 304, b"", headers, len(body))
                return
        await _respond(send, 200, b"" if method == "HEAD" else body, headers, len(body))


def _read(path: Path) -> tuple[bytes, float]:
    with path.open("rb") as f:
        return f.read(), os.fstat(f.fileno()).st_mtime


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _respond(
    send: Any,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
    length: int | None = None,
) -> None:
    """``length``: the Content-Length when ``body`` is not what it counts (HEAD, 304)."""
    all_headers = list(headers or ())
    if not any(name == b"content-type" for name, _ in all_headers):
        all_headers.append((b"content-type", b"text/plain; charset=utf-8"))
    all_headers += [
        (b"content-length", str(len(body) if length is None else length).encode()),
        (b"x-content-type-options", b"nosniff"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})
