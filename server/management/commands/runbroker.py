"""``python manage.py runbroker``: one process serving HTTP, WebSocket and Kafka.

Daphne serves the ASGI application on Twisted's asyncio reactor, so every listener of the
broker shares one asyncio event loop: the Kafka listener (``kafka_listener.server``) is
started on that loop once the reactor runs, on ``CAIRN_KAFKA_HOST`` (default 127.0.0.1,
whatever the HTTP host) and ``CAIRN_KAFKA_PORT`` (0 turns it off; a port that cannot be bound
is reported and HTTP keeps serving), advertised to clients (Metadata, FindCoordinator) as
``CAIRN_KAFKA_ADVERTISED_HOST``:``CAIRN_KAFKA_ADVERTISED_PORT`` (default: the listen
address), and closed by a "before shutdown" trigger. SIGINT
and SIGTERM stop the reactor; the runtime is then stopped so the store is closed cleanly.

With ``CAIRN_TLS_CERT`` and ``CAIRN_TLS_KEY`` the HTTP port speaks HTTPS and WSS only: the
files are checked before anything starts (:mod:`cairn.tls`; a bad pair is one line and exit
status 1) and daphne's connections are wrapped in Twisted's TLS (see :class:`_Server`).
The Kafka listener speaks TLS with the same pair (SSL and SASL_SSL; client certificates
from ``CAIRN_TLS_CA``) and authenticates under ``CAIRN_KAFKA_AUTH`` (``cairn.env.kafka_auth``:
a non-loopback Kafka host with ``optional`` is refused before anything starts, one line, exit
status 1). It checks logins and authorizes against the runtime's accounts store
(``BrokerRuntime.access``).
On a WebSocket message above ``webui.routing.MAX_MESSAGE_BYTES`` daphne drops the connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import ssl
import sys
from pathlib import Path
from typing import Any

# Daphne installs Twisted's asyncio reactor at import; it must come before anything that
# imports twisted.internet.reactor.
import daphne.server  # noqa: I001  (import order matters, see above)
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cairn import env, runtime, tls
from kafka_listener.flow import DEFAULT_IDLE_MS, DEFAULT_MAX_BUFFERED_BYTES
from kafka_listener.handlers import ListenerConfig
from kafka_listener.server import KafkaListener
from mqcore.errors import MQError
from server.metrics.requests import watch_kafka
from webui.routing import MAX_MESSAGE_BYTES


class _Server(daphne.server.Server):  # type: ignore[misc]
    """Daphne's server, remembering why a listen failed so the command can say it."""

    listen_failure: str | None = None
    kafka_failure: str | None = None
    #: Twisted TLS options (``cairn.tls.twisted_options``): the HTTP port speaks TLS.
    tls_options: Any = None

    # Daphne makes its HTTP factory in run() and listens with it on every endpoint. With TLS
    # on, the factory it listens with is wrapped in Twisted's TLS layer, which is what
    # Twisted's own ssl: endpoints do, so HTTP and WebSocket requests see a secure transport
    # (https/wss scopes) and the whole certificate chain is sent.
    @property
    def http_factory(self) -> Any:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory: Any) -> None:
        if self.tls_options is not None:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            factory = TLSMemoryBIOFactory(self.tls_options, False, factory)
        self._http_factory = factory

    def listen_error(self, failure: Any) -> None:
        self.listen_failure = failure.getErrorMessage()
        self.stop()


def _endpoint(host: str, port: int) -> str:
    # Twisted endpoint strings use ':' as a separator, so IPv6 colons are escaped.
    return f"tcp:port={port}:interface={host.strip('[]').replace(':', chr(92) + ':')}"


class Command(BaseCommand):
    help = (
        "Start the Cairn broker: the REST API, the console and the live-trace WebSocket over "
        "HTTP, and the in-process background services, from one process. Applies pending "
        "migrations and, on first start, creates an 'admin' account with a random password "
        "written to first-admin-password in the data dir (mode 600). Stop it with Ctrl-C or "
        "SIGTERM."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host", default=None, help="listen address (default: CAIRN_HTTP_HOST or 127.0.0.1)"
        )
        parser.add_argument(
            "--port", type=int, default=None, help="HTTP port (default: CAIRN_HTTP_PORT or 8080)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cfg = settings.CAIRN
        host = options["host"] or cfg["HTTP_HOST"]
        port = options["port"] if options["port"] is not None else cfg["HTTP_PORT"]
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be between 0 and 65535, got {port}")
        credentials = self._tls_credentials()
        scheme = "https" if credentials is not None else "http"
        kafka_port = cfg["KAFKA_PORT"]
        kafka_config = self._kafka_config(kafka_port) if kafka_port else None
        kafka_tls = self._kafka_tls(credentials) if kafka_config is not None else None

        _protect_data_dir()
        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_admin(scheme, host, port)

        rt = runtime.current()
        rt.warm_access()
        try:
            rt.start()
        except MQError as exc:
            raise CommandError(str(exc)) from None
        from server.asgi import application

        url_host = f"[{host}]" if ":" in host else host

        def ready() -> None:
            self.stdout.write(
                f"Cairn broker: {scheme}://{url_host}:{port}/ (store {rt.store_dir}, "
                f"services {rt.services_mode}). Ctrl-C to stop."
            )
            self.stdout.flush()

        server = _Server(
            application,
            endpoints=[_endpoint(host, port)],
            ready_callable=ready,
            websocket_max_message_size=MAX_MESSAGE_BYTES,
            websocket_max_frame_size=MAX_MESSAGE_BYTES,
        )
        if credentials is not None:
            server.tls_options = tls.twisted_options(credentials)
        try:
            if kafka_config is not None:
                self._schedule_kafka(rt, server, kafka_config, kafka_tls)
            server.run()
        finally:
            rt.stop()
        if server.listen_failure:
            raise CommandError(f"cannot listen on {url_host}:{port}: {server.listen_failure}")
        self.stdout.write("Cairn broker stopped.")

    def _tls_credentials(self) -> tls.ServerCredentials | None:
        """The HTTP listener's certificate and key, checked; None without TLS settings."""
        files = settings.CAIRN_TLS_FILES
        if files is None:
            return None
        try:
            credentials = tls.load(*files)
        except tls.TLSConfigError as exc:
            raise CommandError(str(exc)) from None
        warning = tls.validity_warning(credentials)
        if warning:
            self._say(f"WARNING: {warning}")
        return credentials

    def _kafka_config(self, port: int) -> ListenerConfig:
        """The Kafka listener's settings; the policy is checked here, before anything starts
        (``env.kafka_auth`` exits with one line for a public listener without auth)."""
        host = env.get("CAIRN_KAFKA_HOST", "127.0.0.1")
        auth = env.kafka_auth(host)
        if not env.is_loopback(host) and auth == "none":
            self._say(
                f"WARNING: CAIRN_KAFKA_AUTH=none on {host}: anyone who reaches the Kafka port "
                f"acts as {env.kafka_anonymous_role() or 'no role'}"
            )
        return ListenerConfig(
            host=host,
            port=port,
            auth=auth,
            anonymous_role=env.kafka_anonymous_role(),
            reauth_ms=env.get_int("CAIRN_KAFKA_REAUTH_MS", 0),
            # What clients are told to connect to (behind NAT, in a container):
            # unset = the listen host (a wildcard one advertises 127.0.0.1) and port.
            advertised_host=env.get("CAIRN_KAFKA_ADVERTISED_HOST", "") or None,
            advertised_port=env.get_port("CAIRN_KAFKA_ADVERTISED_PORT", 0) or None,
            auto_create_topics=bool(settings.CAIRN["AUTO_CREATE_TOPICS"]),
            # Caps on what connections may cost (kafka_listener/flow.py).
            max_buffered_bytes=env.get_int(
                "CAIRN_KAFKA_MAX_BUFFERED_BYTES", DEFAULT_MAX_BUFFERED_BYTES
            ),
            idle_ms=env.get_int("CAIRN_KAFKA_IDLE_MS", DEFAULT_IDLE_MS),
        )

    def _kafka_tls(self, credentials: tls.ServerCredentials | None) -> ssl.SSLContext | None:
        client_ca = env.tls_ca()
        if credentials is None:
            return None
        try:
            return tls.kafka_ssl_context(credentials, client_ca)
        except (tls.TLSConfigError, ssl.SSLError) as exc:
            raise CommandError(str(exc)) from None

    def _schedule_kafka(
        self,
        rt: Any,
        server: _Server,
        config: ListenerConfig,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        """Start the Kafka listener on the reactor's asyncio loop once it runs; close it
        before the reactor shuts down (while the loop still runs)."""
        from twisted.internet import defer, reactor

        host, port = config.host, config.port
        # Unknown users' fake SCRAM salts must not change across restarts (a real user's do
        # not): made from the secret key, never equal to anything else derived from it.
        fake_key = hashlib.sha256(b"cairn.kafka.scram-fake-salt\0" + settings.SECRET_KEY.encode())
        listener = KafkaListener(
            rt.broker,
            config,
            # Users, SCRAM credentials, ACL entries, lockouts and the audit log: the accounts
            # store every front end shares (cairn.runtime; warmed before serving).
            access=rt.access,
            ssl_context=ssl_context,
            scram_fake_key=fake_key.digest(),
            scram_fake_iterations=int(settings.CAIRN_ACCOUNTS["SCRAM_ITERATIONS"]),
        )
        watch_kafka(listener)  # request latencies and connections for GET /metrics

        def failed(failure: Any) -> None:
            # Not fatal: HTTP keeps serving (the Kafka port is an extra, on by default, and
            # may be taken by a real Kafka); say so loudly instead.
            server.kafka_failure = failure.getErrorMessage()
            self._say(
                f"Kafka listener NOT started: cannot listen on {host}:{port}: "
                f"{server.kafka_failure} (set CAIRN_KAFKA_PORT, or 0 to turn it off)"
            )

        def kafka_line() -> str:
            security = "TLS" if ssl_context is not None else "plaintext"
            line = f"Kafka clients: {host}:{listener.port} ({security}, auth {config.auth})"
            advertised = "{}:{}".format(*listener.ctx.advertised)
            return (
                line
                if advertised == f"{host}:{listener.port}"
                else f"{line}, advertised as {advertised}"
            )

        def start() -> None:
            started = defer.Deferred.fromFuture(asyncio.ensure_future(listener.start()))
            started.addCallback(lambda _: self._say(kafka_line()))
            started.addErrback(failed)

        def stop() -> Any:
            return defer.Deferred.fromFuture(asyncio.ensure_future(listener.close()))

        reactor.callWhenRunning(start)
        reactor.addSystemEventTrigger("before", "shutdown", stop)

    def _say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def _ensure_admin(self, scheme: str, host: str, port: int) -> None:
        """Create the first admin with a random password, written to a file only the
        broker's user may read (never printed: stdout ends up in logs)."""
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            return
        password = secrets.token_urlsafe(16)
        users.objects.create_superuser("admin", email="", password=password)
        path = write_private(settings.DATA_DIR / FIRST_PASSWORD_FILE, password + "\n")
        url_host = f"[{host}]" if ":" in host else host
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "First start: created the administrator account 'admin'.",
                    f"  its password is in {path} (readable only by this user)",
                    f"  log in at {scheme}://{url_host}:{port}/login/ and change it; then",
                    "  delete the file. Lost it? python manage.py changepassword admin",
                    "",
                ]
            )
        )
        sys.stdout.flush()


#: In the data dir: the first admin's password (mode 600).
FIRST_PASSWORD_FILE = "first-admin-password"


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to a new file that only this user may read or write (mode 600 from
    the start: never a moment with wider permissions). Replaces an older file."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


def _protect_data_dir() -> None:
    """The data dir holds the database (users, token hashes, SCRAM keys), the secret key
    and the first admin's password: mode 700, and an SQLite database file mode 600, made so
    before SQLite creates it (SQLite gives its -wal and -shm files the database's mode).
    Looser modes left by an older version are tightened."""
    data_dir = Path(settings.DATA_DIR)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.sqlite3":
        return
    name = Path(str(db["NAME"]))
    if not name.exists():
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600))
    for path in (name, Path(f"{name}-wal"), Path(f"{name}-shm")):
        if path.exists():
            os.chmod(path, 0o600)
