"""WebSocket authentication: the session cookie (browsers) or ``?token=`` (programs).

* :class:`QueryTokenAuthMiddleware` sets ``scope["user"]`` from a DRF authtoken given as
  ``?token=<key>``; a token that matches no active user makes the connection anonymous (it
  never falls back to the cookie).
* :class:`BrowserOriginValidator` refuses a handshake whose ``Origin`` is not one of
  ``ALLOWED_HOSTS`` (cross-site WebSocket hijacking with the session cookie), like Channels'
  ``AllowedHostsOriginValidator``, but lets through handshakes *without* an Origin header:
  browsers always send one, so those come from programs, which must then authenticate with
  a token (they have no session cookie).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

MAX_TOKEN_LENGTH = 64


@database_sync_to_async
def user_for_token(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    if not key or len(key) > MAX_TOKEN_LENGTH:
        return AnonymousUser()
    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class QueryTokenAuthMiddleware(BaseMiddleware):
    """``?token=`` wins over the session: see the module docstring."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query:
            scope = dict(scope, user=await user_for_token(query["token"][-1]))
        return await super().__call__(scope, receive, send)


class BrowserOriginValidator(OriginValidator):
    """See the module docstring."""

    def valid_origin(self, parsed_origin: Any) -> bool:
        if parsed_origin is None:
            return True
        return bool(super().valid_origin(parsed_origin))


def _allowed_origin_patterns() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = ["localhost", "127.0.0.1", "[::1]"]
    return hosts


def websocket_stack(inner: Any) -> Any:
    """Origin check, then session auth, then token auth, around ``inner``."""
    return BrowserOriginValidator(
        AuthMiddlewareStack(QueryTokenAuthMiddleware(inner)), _allowed_origin_patterns()
    )
