"""Django's ASGI handler, made cheap per request: one thread hop, on a reused thread.

Django's own :class:`~django.core.handlers.asgi.ASGIHandler` spends most of a small
request's time moving between the event loop and threads (bench/rest.py's ``GET /healthz``
ceiling measured about 4 ms on a busy 2-core machine, for a view that does nothing):

* Under ASGI it builds an async middleware chain. Our middleware are sync
  ``MiddlewareMixin`` classes, so each ``process_request``, ``process_view`` and
  ``process_response`` then runs through a ``sync_to_async`` hop of its own: about 13
  round trips per request for 7 middleware and a sync view.
* Each request's sync code runs on a thread of its own (asgiref's
  ``ThreadSensitiveContext``), started for the request and joined after it: the event
  loop waits for both.

:class:`OneHopASGIHandler` builds the chain in sync mode, so the middleware and the view run
together in one hop, as under WSGI. Each request still gets a thread to itself for all its
sync work (signals, middleware, view, ``close``), so thread-local database connections and
long polls behave as before; the thread comes from :class:`WorkerThreads`, which keeps idle
ones for the next request instead of starting and joining one per request.

Django's ``handle`` also makes three hops of its own per request: the ``request_started``
signal (its receivers are sync), the response, and ``response.close()`` (which sends
``request_finished``). :meth:`OneHopASGIHandler.handle` makes them one: the signal, building
the request, the middleware and view, and, for a response whose content is already in
memory, its ``close()`` run in one call on the request's thread; the loop then only writes
the bytes out. A streaming response is closed after it is sent, as Django does.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import IO, Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import FileResponse, HttpRequest, HttpResponseBase
from django.urls import set_script_prefix

#: Idle request threads kept for reuse. More may run at once (long polls each hold one for
#: up to ``CAIRN_API["MAX_WAIT_MS"]``); the extra ones end when their request does.
IDLE_THREADS = 16

# asgiref 3.13 lets a ThreadSensitiveContext use an executor the caller owns; before that
# every request starts a thread of its own (still with the one-hop chain).
_CONTEXT_TAKES_EXECUTOR = "executor" in inspect.signature(ThreadSensitiveContext).parameters


class _RequestThread(ThreadPoolExecutor):
    """One thread running one request's sync calls in order (what asgiref's thread-sensitive
    mode requires), counting calls not yet finished so the pool knows when it is free."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="cairn-http")
        self._lock = threading.Lock()
        self._unfinished = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self._unfinished += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _: Future[Any]) -> None:
        with self._lock:
            self._unfinished -= 1

    @property
    def idle(self) -> bool:
        with self._lock:
            return self._unfinished == 0


class WorkerThreads:
    """Request threads: an idle one if there is one, else a new one. Thread-safe."""

    def __init__(self, keep_idle: int = IDLE_THREADS) -> None:
        self.keep_idle = keep_idle
        self._lock = threading.Lock()
        self._idle: list[_RequestThread] = []

    def take(self) -> _RequestThread:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _RequestThread()

    def give_back(self, worker: _RequestThread) -> None:
        """Keep ``worker`` for another request, unless it is still busy (a request whose
        client went away leaves its view running) or enough threads are idle already."""
        if worker.idle:
            with self._lock:
                if len(self._idle) < self.keep_idle:
                    self._idle.append(worker)
                    return
        worker.shutdown(wait=False)  # the thread ends once its current call returns

    @property
    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)


class _RequestProcessed(Exception):
    """Raised once the response is sent, to end the wait for a disconnect (Django defines
    one such class per request; one for all spares creating and collecting a class each
    time)."""


class OneHopASGIHandler(ASGIHandler):
    """See the module docstring."""

    def __init__(self, threads: WorkerThreads | None = None) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.threads = threads or WorkerThreads()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        if not _CONTEXT_TAKES_EXECUTOR:
            async with ThreadSensitiveContext():
                await self.handle(scope, receive, send)
            return
        worker = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=worker):  # type: ignore[call-arg,unused-ignore]
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(worker)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's ``ASGIHandler.handle`` with one thread hop (see the module docstring);
        a client that goes away still aborts the wait for the response, as in Django."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            serve = sync_to_async(self._serve, thread_sensitive=True)
            response: HttpResponseBase | None = None
            closed = False
            try:
                try:
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(self.listen_for_disconnect(receive))
                        response, closed = await serve(scope, body_file)
                        await self.send_response(response, send)
                        raise _RequestProcessed
                except* (_RequestProcessed, RequestAborted):
                    pass
            except BaseExceptionGroup as exception_group:
                if len(exception_group.exceptions) == 1:
                    raise exception_group.exceptions[0] from None
                raise
            if response is None:
                await signals.request_finished.asend(sender=self.__class__)
            elif not closed:
                await sync_to_async(response.close, thread_sensitive=True)()

    def _serve(self, scope: dict[str, Any], body_file: IO[bytes]) -> tuple[HttpResponseBase, bool]:
        """On the request's thread: everything Django does between reading the body and
        sending the response. Returns the response and whether it is closed already."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            response: HttpResponseBase = error_response
        else:
            response = self.get_response(request)
            response._handler_class = self.__class__  # type: ignore[attr-defined]
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if response.streaming:
            return response, False
        response.close()  # its content is in memory: request_finished now, not after a hop
        return response, True

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self.get_response, thread_sensitive=True)(
            request
        )
        return response
