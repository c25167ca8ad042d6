"""The asyncio transport: accept TCP connections and run each through the sans-I/O codec.

Per connection (httpcore ``_async/http11.py`` style)::

    read ≤ 64 KiB ─▶ conn.receive_data ─▶ RequestReceived … ─▶ await handlers.dispatch
         ▲                                                        │
         └── writer.drain ◀── writer.write(conn.data_to_send()) ◀─ send_response / no_response

Requests of one connection are handled one after the other, in arrival order, as Kafka
does (so one producer's pipelined batches are stored in order); responses leave in
request order. A request that waits (a Fetch long poll, JoinGroup, SyncGroup) awaits
without blocking the event loop, so other connections are served meanwhile. A Produce
answers with a ``Later`` (it waits for its records to become readable): that wait runs
as its own task while the connection's next requests are handled, and the connection
puts the answer in its place in the response order. A
``RemoteProtocolError`` (malformed frame, unknown API or version, oversized request)
closes that connection only, after logging; so does an unexpected handler error (logged
with its traceback). Nothing is stored for a request that failed to decode.

Flow control (``flow.py``): every connection's request bytes (its incomplete frame and
the requests of its last read not yet handled) count towards the listener's
``max_buffered_bytes``; over it, a connection adding to the total stops being read
(``transport.pause_reading``) until the total falls, and is never closed for it. A
connection with no request in flight and no request or response for ``idle_ms`` is
closed (logged at INFO).

Authentication (``sasl.py``, ``login.py``): each connection has a :class:`SaslSession`
under the listener policy (``ListenerConfig.auth``) and a :class:`CachedDecisions` for the
subject it acts as (anonymous, a TLS client certificate's user, or its SASL login), which
every :class:`Call` of the connection carries. SASL requests and bare v0 tokens go to the
session; other requests are checked by it only while it is ``gated`` (before
authentication, during an exchange, or with a session lifetime); a refused request closes
the connection (logged at INFO). With an ``ssl_context`` the port speaks TLS only (SSL and
SASL_SSL); a verified client certificate's CN is looked up once per connection.

Instrumentation: :attr:`KafkaListener.observe_request`, when set (``runbroker`` sets it to
``server.metrics``' histogram), is called with the API key and the seconds from the
request's dispatch to its answer being queued (a Produce's ``Later``: until it resolves)
for every request the handlers answer (not SASL's, nor an unsupported version the
connection refuses itself). :attr:`KafkaListener.connection_count` is the open connections.

A timer task calls the group coordinator's ``tick`` every ``tick_interval_s``; another
looks for idle connections every ``idle_check_s`` (a quarter of ``idle_ms``, at most a
second).

Thread-safety: a listener lives on one event loop; :meth:`KafkaListener.start` and
:meth:`close` must be awaited on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import ssl
import time
from collections.abc import Callable

from mqcore.access.authorizer import CachedDecisions, Subject
from mqcore.access.backend import AccessBackend
from mqcore.access.model import WILDCARD
from mqcore.access.scram import DEFAULT_ITERATIONS
from mqcore.broker.broker import Broker
from mqcore.clock import Clock, SystemClock
from mqcore.errors import RemoteProtocolError
from mqcore.format.msgid import HostAddress

from . import login
from .connection import (
    ConnectionClosed,
    Event,
    KafkaServerConnection,
    RequestReceived,
    SaslTokenReceived,
)
from .flow import BufferBudget, Flow
from .handlers import Call, KafkaContext, Later, ListenerConfig, dispatch, supported_versions
from .mapping import born_host
from .sasl import SASL_KEYS, Reply, SaslSession
from .schemas import API_VERSIONS_TABLE, SCHEMAS, ApiKey

log = logging.getLogger(__name__)
# A produce request is up to a megabyte (librdkafka's batch.size default): read it in a few
# reads, and let the stream buffer hold it without pausing the socket every 128 KiB (the
# default limit of 64 KiB made ~16 reads and a pause/resume of the transport per request).
READ_BYTES = 1 << 20
STREAM_LIMIT = 1 << 20  # the transport pauses above twice this, per connection
MAX_IDLE_CHECK_S = 1.0
#: ``observe(api_key, seconds)``: one answered request (see the module docstring).
RequestObserver = Callable[[int, float], None]


class _Client:
    """The server's side of one connection: its codec state, its share of the buffer
    budget, and whether its socket is being read.

    Pausing stops the transport reading at once (``pause_reading``) unless the stream
    reader already stopped it (its buffer is full: it resumes it itself when read), and
    resuming undoes only what pausing did, so the two never fight over the transport."""

    __slots__ = (
        "conn",
        "flow",
        "transport",
        "peer",
        "readable",
        "_stopped_transport",
        "session",
        "decisions",
    )

    def __init__(
        self,
        conn: KafkaServerConnection,
        flow: Flow,
        transport: asyncio.BaseTransport,
        peer: HostAddress | None,
        session: SaslSession,
    ) -> None:
        self.conn = conn
        self.flow = flow
        self.transport = transport
        self.peer = peer
        self.session = session
        # Who the connection acts as, and its decisions; replaced when that changes.
        self.decisions = CachedDecisions(session.subject)
        self.readable = asyncio.Event()
        self.readable.set()
        self._stopped_transport = False

    def pause(self) -> None:
        if not self.readable.is_set():
            return
        self.readable.clear()
        transport = self.transport
        if isinstance(transport, asyncio.ReadTransport) and transport.is_reading():
            transport.pause_reading()
            self._stopped_transport = True

    def resume(self) -> None:
        if self.readable.is_set():
            return
        self.readable.set()
        transport = self.transport
        if self._stopped_transport and isinstance(transport, asyncio.ReadTransport):
            self._stopped_transport = False
            if not transport.is_closing():
                transport.resume_reading()


class KafkaListener:
    """The Kafka wire-protocol listener over one started :class:`Broker`.

    Args:
        access: the accounts store (users, secrets, ACL entries, audit): the runtime's;
            None keeps the context's in-memory :class:`~mqcore.access.backend.StaticAccess`
            (no users: only anonymous connections and client certificates of no one).
        ssl_context: a server context (``cairn.tls.kafka_ssl_context``): the port speaks
            TLS only. None: plaintext.
        scram_fake_key: the secret unknown users' fake SCRAM salts are made from; give a
            persistent one (runbroker derives it from the secret key) so an unknown name
            gets the same salt across restarts, as a real user does. None: random.
        scram_fake_iterations: the iteration count those fake exchanges announce: the one
            the accounts store derives real users' credentials with.
    """

    def __init__(
        self,
        broker: Broker,
        config: ListenerConfig,
        clock: Clock | None = None,
        *,
        access: AccessBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
        scram_fake_key: bytes | None = None,
        scram_fake_iterations: int = DEFAULT_ITERATIONS,
    ):
        self.config = config
        versions = supported_versions()
        if config.auth != "none":  # SASL is offered (kafka-protocol.md 2.1, issue 18)
            for key in SASL_KEYS:
                versions[key] = API_VERSIONS_TABLE[key]
        self.ctx = KafkaContext(broker, config, clock or SystemClock(), versions=versions)
        if access is not None:
            self.ctx.access = access
        self.ssl_context = ssl_context
        # Salts of unknown users' fake SCRAM exchanges (sasl.py).
        self._fake_key = scram_fake_key or secrets.token_bytes(32)
        self._fake_iterations = scram_fake_iterations
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._idle_checker: asyncio.Task[None] | None = None
        self.budget = BufferBudget(config.max_buffered_bytes)
        self._clients: dict[Flow, _Client] = {}
        #: Called once per answered request (module docstring); None: nothing measured.
        self.observe_request: RequestObserver | None = None

    @property
    def connection_count(self) -> int:
        """Open client connections (authenticated or not)."""
        return len(self._clients)

    def anonymous_subject(self, peer: HostAddress | None) -> Subject:
        """Who an unauthenticated connection from ``peer`` is: ``User:ANONYMOUS`` with
        ``ListenerConfig.anonymous_role`` (empty: no role, ACL entries only)."""
        host = peer.ip if peer is not None else WILDCARD
        return Subject(None, self.config.anonymous_role or None, host, "kafka")

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    def subjects(self) -> list[Subject]:
        """Who each open connection acts as now (anonymous, certificate or SASL login)."""
        return [client.decisions.subject for client in self._clients.values()]

    async def start(self) -> None:
        """Bind and start accepting. Raises OSError when the address is taken."""
        self._server = await asyncio.start_server(
            self._serve,
            self.config.host,
            self.config.port,
            limit=STREAM_LIMIT,
            ssl=self.ssl_context,
        )
        host = self.config.advertised_host or self.config.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        self.ctx.advertised = (host, self.config.advertised_port or self.port)
        self._ticker = asyncio.create_task(self._tick())
        if self.config.idle_ms > 0:
            self._idle_checker = asyncio.create_task(self._close_idle())
        log.info(
            "Kafka listener on %s:%d (advertised %s:%d, %s, authentication %s)",
            self.config.host,
            self.port,
            *self.ctx.advertised,
            "TLS" if self.ssl_context is not None else "plaintext",
            self.config.auth,
        )

    async def close(self) -> None:
        """Stop accepting, answer parked group requests, close every connection."""
        if self._server is not None:
            self._server.close()
        timers = [t for t in (self._ticker, self._idle_checker) if t is not None]
        for timer in timers:
            timer.cancel()
        self.ctx.coordinator.close()
        self.ctx.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, *timers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_interval_s)
            try:
                self.ctx.coordinator.tick()
            except Exception:  # a coordinator bug must not stop group timers for good
                log.exception("group coordinator tick failed")

    async def _close_idle(self) -> None:
        idle_s = self.config.idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle_s / 4, MAX_IDLE_CHECK_S))
            for flow in self.budget.idle(loop.time(), idle_s):
                client = self._clients.get(flow)
                if client is not None and not client.transport.is_closing():
                    log.info(
                        "closing idle Kafka connection from %s: no request for %d ms",
                        client.peer,
                        self.config.idle_ms,
                    )
                    client.transport.close()  # the read loop sees EOF and ends

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = born_host(writer.get_extra_info("peername"))
        conn = KafkaServerConnection(self.config.max_frame_bytes, self.ctx.versions)
        now = asyncio.get_running_loop().time()
        flow = self.budget.register(now, lambda: conn.in_flight)
        client: _Client | None = None
        try:
            session = await self._session(writer, peer)
            client = self._clients[flow] = _Client(conn, flow, writer.transport, peer, session)
            await self._run(client, reader, writer)
        except RemoteProtocolError as exc:
            log.info("closing Kafka connection from %s: %s (error %d)", peer, exc, exc.error_code)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing Kafka connection from %s after a handler error", peer)
        finally:
            self._tasks.discard(task)
            self._clients.pop(flow, None)
            self._wake(self.budget.close(flow, asyncio.get_running_loop().time()))
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _session(self, writer: asyncio.StreamWriter, peer: HostAddress | None) -> SaslSession:
        """A new connection's session: anonymous, or a verified client certificate's user."""
        host = peer.ip if peer is not None else WILDCARD
        config = self.config
        anonymous = self.anonymous_subject(peer)
        certified = None
        if self.ssl_context is not None:
            name = login.common_name(writer.get_extra_info("peercert"))
            if name is not None:
                certified = await login.certificate_subject(self.ctx.access, name, host)
        return SaslSession(
            config.auth,
            anonymous,
            config.reauth_ms,
            self._fake_key,
            certified,
            self._fake_iterations,
        )

    def _account(self, client: _Client, in_hand: int) -> None:
        """Tell the budget what ``client`` holds now; pause or resume connections."""
        conn = client.conn
        partial = conn.buffered_bytes
        now = asyncio.get_running_loop().time()
        pause, resume = self.budget.update(client.flow, partial + in_hand, partial > 0, now)
        if pause:
            client.pause()
        self._wake(resume)

    def _wake(self, flows: list[Flow]) -> None:
        for flow in flows:
            client = self._clients.get(flow)
            if client is not None:
                client.resume()

    async def _run(
        self, client: _Client, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pending: set[asyncio.Future[None]] = set()
        try:
            await self._read_loop(client, reader, writer, pending)
        finally:
            for task in pending:
                task.cancel()

    async def _answer_later(
        self,
        conn: KafkaServerConnection,
        flow: Flow,
        writer: asyncio.StreamWriter,
        correlation_id: int,
        later: Later,
        api_key: int,
        started: float,
    ) -> None:
        try:
            response = await later.response
            conn.send_response(correlation_id, response)
            self._observe(api_key, started)
            self._flush(conn, writer)
            flow.touch(asyncio.get_running_loop().time())
        except Exception:  # the connection is unusable now: its answers would be out of order
            log.exception("closing a Kafka connection: a deferred response failed")
            writer.transport.abort()

    async def _read_loop(
        self,
        client: _Client,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: set[asyncio.Future[None]],
    ) -> None:
        conn = client.conn
        while True:
            await client.readable.wait()  # paused while over the buffer budget
            events = conn.receive_data(await reader.read(READ_BYTES))
            if not await self._handle(client, events, writer, pending):
                return
            self._flush(conn, writer)  # replies the connection made itself (ApiVersions)
            await writer.drain()

    async def _handle(
        self,
        client: _Client,
        events: list[Event],
        writer: asyncio.StreamWriter,
        pending: set[asyncio.Future[None]],
    ) -> bool:
        """Handle the events of one read, in order; False once the peer closed. Each
        request leaves the budget (and memory: ``events`` is consumed) once handled."""
        conn, flow = client.conn, client.flow
        loop = asyncio.get_running_loop()
        in_hand = sum(e.frame_bytes for e in events if not isinstance(e, ConnectionClosed))
        self._account(client, in_hand)
        events.reverse()
        while events:
            event = events.pop()
            if isinstance(event, ConnectionClosed):  # finish what was accepted, then close
                await asyncio.gather(*pending, return_exceptions=True)
                self._flush(conn, writer)
                await writer.drain()
                return False
            flow.touch(loop.time())
            # Authentication: only while the session is gated, or for SASL itself (sasl.py).
            if (
                client.session.gated
                or not isinstance(event, RequestReceived)
                or (event.api_key in SASL_KEYS)
            ):
                verdict = await self._authentication(client, event)
                if verdict is False:
                    self._flush(conn, writer)
                    return False
                if verdict is True:  # answered
                    self._flush(conn, writer)
                    in_hand -= event.frame_bytes
                    self._account(client, in_hand)
                    continue
            assert isinstance(event, RequestReceived)
            call = Call(
                event.api_key,
                event.api_version,
                event.correlation_id,
                event.client_id,
                event.request,
                client.peer,
                client.decisions,
            )
            started = time.perf_counter()
            response = await dispatch(self.ctx, call)
            if isinstance(response, Later):
                later = self._answer_later(
                    conn, flow, writer, event.correlation_id, response, event.api_key, started
                )
                task = asyncio.ensure_future(later)
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                if event.expects_response:
                    assert response is not None
                    conn.send_response(event.correlation_id, response)
                else:
                    conn.no_response(event.correlation_id)
                self._observe(event.api_key, started)
            self._flush(conn, writer)
            in_hand -= event.frame_bytes
            self._account(client, in_hand)
        return True

    async def _authentication(
        self, client: _Client, event: RequestReceived | SaslTokenReceived
    ) -> bool | None:
        """A SASL request or token answered (True), the connection to close (False), or an
        ordinary request the session admits (None: dispatch it)."""
        session, conn = client.session, client.conn
        host = client.peer.ip if client.peer is not None else ""
        if isinstance(event, SaslTokenReceived):
            reply = await login.authenticate(
                self.ctx.access, session, event.token, 0, host, self.ctx.clock.now_ms
            )
            if reply.close:  # a bare exchange has no way to say why (Kafka closes too)
                return False
            conn.send_token(reply.auth_bytes)
            if not session.bare_tokens:
                conn.end_tokens()
            self._adopt(client)
            return True
        if event.api_key == ApiKey.SASL_HANDSHAKE:
            reply, offered = session.handshake(event.api_version, event.request["mechanism"])
            conn.send_response(
                event.correlation_id, {"error_code": reply.error_code, "mechanisms": offered}
            )
            if reply.close:
                log.info("closing Kafka connection from %s: %s", client.peer, reply.detail)
            return not reply.close
        if event.api_key == ApiKey.SASL_AUTHENTICATE:
            reply = await login.authenticate(
                self.ctx.access,
                session,
                event.request["auth_bytes"],
                event.api_version,
                host,
                self.ctx.clock.now_ms,
            )
            conn.send_response(event.correlation_id, _authenticate_response(reply))
            self._adopt(client)
            return not reply.close
        refusal = session.admit(event.api_key, self.ctx.clock.now_ms())
        if refusal is not None:
            log.info(
                "closing Kafka connection from %s: %s refused: %s",
                client.peer,
                SCHEMAS[event.api_key].name,
                refusal,
            )
            return False
        self._adopt(client)
        return None

    def _observe(self, api_key: int, started: float) -> None:
        observe = self.observe_request
        if observe is not None:
            observe(api_key, time.perf_counter() - started)

    @staticmethod
    def _adopt(client: _Client) -> None:
        """Give the connection's calls the session's subject, if it changed."""
        subject = client.session.subject
        if client.decisions.subject != subject:
            client.decisions = CachedDecisions(subject)

    @staticmethod
    def _flush(conn: KafkaServerConnection, writer: asyncio.StreamWriter) -> None:
        out = conn.data_to_send()
        if out:
            writer.write(out)


def _authenticate_response(reply: Reply) -> dict[str, object]:
    return {
        "error_code": reply.error_code,
        "error_message": reply.error_message,
        "auth_bytes": reply.auth_bytes,
        "session_lifetime_ms": reply.session_lifetime_ms,
    }
