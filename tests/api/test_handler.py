"""cairn.handler: Django's ASGI handler with the whole request in one thread hop, on reused
request threads. Driven here as an ASGI server would drive it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.signals import request_finished, request_started

from cairn.handler import OneHopASGIHandler, WorkerThreads, _RequestThread


async def get(app: Any, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "http.request", "body": b"", "more_body": False})
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, inbox.get, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def test_requests_run_their_sync_work_on_one_reused_thread(broker_runtime: Any) -> None:
    handler = OneHopASGIHandler()
    assert not iscoroutinefunction(handler._middleware_chain)  # built in sync mode
    threads: list[tuple[str, int]] = []

    def started(**kwargs: Any) -> None:
        threads.append(("started", threading.get_ident()))

    def finished(**kwargs: Any) -> None:
        threads.append(("finished", threading.get_ident()))

    request_started.connect(started)
    request_finished.connect(finished)
    try:

        async def run() -> list[tuple[int, dict[bytes, bytes], bytes]]:
            return [await get(handler, "/healthz") for _ in range(5)]

        responses = asyncio.run(run())
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    for status, headers, body in responses:
        assert status == 200 and b'"status":"ok"' in body.replace(b" ", b"")
        # The middleware still ran (SecurityMiddleware, XFrameOptionsMiddleware).
        assert headers[b"X-Content-Type-Options"] == b"nosniff"
        assert headers[b"X-Frame-Options"] == b"DENY"
    # Every request's signals ran on the same request thread (so its database connection
    # is opened and closed where it is used), not the event loop's, and the thread is kept.
    assert [kind for kind, _ in threads] == ["started", "finished"] * 5
    assert len({ident for _, ident in threads}) == 1
    assert threads[0][1] != threading.get_ident()
    assert handler.threads.idle_count == 1


def test_a_busy_thread_is_not_reused_and_idle_ones_are_capped() -> None:
    threads = WorkerThreads(keep_idle=2)
    release = threading.Event()
    busy = threads.take()
    busy.submit(release.wait, 10)  # a view still running after its client went away
    threads.give_back(busy)
    assert threads.idle_count == 0
    assert threads.take() is not busy
    release.set()
    workers = [threads.take() for _ in range(3)]
    for worker in workers:
        assert worker.submit(lambda: 1).result(5) == 1
        threads.give_back(worker)
    assert threads.idle_count == 2
    assert threads.take() in workers


def test_a_request_is_one_hop_to_its_thread(broker_runtime: Any) -> None:
    """The signal, the view and the close of an in-memory response: one call on the request's
    thread (cairn.handler.OneHopASGIHandler.handle), not Django's three."""
    submitted: list[str] = []

    class CountingThread(_RequestThread):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(getattr(fn, "__name__", repr(fn)))
            return super().submit(fn, *args, **kwargs)

    threads = WorkerThreads()
    threads.give_back(CountingThread())
    handler = OneHopASGIHandler(threads)
    events: list[str] = []

    def finished(**kwargs: Any) -> None:
        events.append("finished")

    request_finished.connect(finished)
    try:
        status, _, body = asyncio.run(get(handler, "/healthz"))
        assert status == 200 and b"ok" in body
        status, _, _ = asyncio.run(get(handler, "/no-such-page"))
        assert status == 404
    finally:
        request_finished.disconnect(finished)
    assert len(submitted) == 2  # one per request
    assert events == ["finished", "finished"]  # each request's close ran, in that one call
    assert threads.idle_count == 1
