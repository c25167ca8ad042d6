"""``python manage.py runbroker``: one process serving HTTP, WebSocket and (soon) Kafka.

Daphne serves the ASGI application on Twisted's asyncio reactor, so every listener of the
broker shares one asyncio event loop. SIGINT and SIGTERM stop the reactor; the runtime is
then stopped so the store is closed cleanly.
"""

from __future__ import annotations

import secrets
import sys
from typing import Any

# Daphne installs Twisted's asyncio reactor at import; it must come before anything that
# imports twisted.internet.reactor.
import daphne.server  # noqa: I001  (import order matters, see above)
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cairn import runtime
from mqcore.errors import MQError


class _Server(daphne.server.Server):  # type: ignore[misc]
    """Daphne's server, remembering why a listen failed so the command can say it."""

    listen_failure: str | None = None

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
        "that it prints once. Stop it with Ctrl-C or SIGTERM."
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

        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_admin(host, port)

        rt = runtime.current()
        try:
            rt.start()
        except MQError as exc:
            raise CommandError(str(exc)) from None
        from cairn.asgi import application

        url_host = f"[{host}]" if ":" in host else host

        def ready() -> None:
            self.stdout.write(
                f"Cairn broker: http://{url_host}:{port}/ (store {rt.store_dir}, "
                f"services {rt.services_mode}). Ctrl-C to stop."
            )
            self.stdout.flush()

        server = _Server(application, endpoints=[_endpoint(host, port)], ready_callable=ready)
        try:
            server.run()
        finally:
            rt.stop()
        if server.listen_failure:
            raise CommandError(f"cannot listen on {url_host}:{port}: {server.listen_failure}")
        self.stdout.write("Cairn broker stopped.")

    def _ensure_admin(self, host: str, port: int) -> None:
        """Create the first admin with a random password, printed once (never a fixed one)."""
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser("admin", email="", password=password)
        url_host = f"[{host}]" if ":" in host else host
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "First start: created the administrator account.",
                    f"  log in at http://{url_host}:{port}/admin/",
                    "  user:     admin",
                    f"  password: {password}",
                    "It is shown only now. Change it with: python manage.py changepassword admin",
                    "",
                ]
            )
        )
        sys.stdout.flush()
