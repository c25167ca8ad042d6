"""WebSocket authentication: the session cookie (browsers) or ``?token=`` (programs).

* :class:`QueryTokenAuthMiddleware` sets ``scope["user"]`` from an API token given as
  ``?token=<token>`` (looked up by its digest: :mod:`accounts.tokens`); a token that is
  unknown, revoked, expired or of an inactive user makes the connection anonymous (it never
  falls back to the cookie).
* :func:`websocket_stack` puts the origin check (:mod:`webui.origin`: the broker's own origin
  and ``CAIRN_ALLOWED_ORIGINS`` only; handshakes without ``Origin`` come from programs, which
  must bring a token) before both.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.contrib.auth.models import AnonymousUser

from webui.origin import OwnOriginValidator

MAX_TOKEN_LENGTH = 64


@database_sync_to_async
def user_for_token(key: str) -> Any:
    from django.utils import timezone

    from accounts.models import ApiToken
    from accounts.tokens import digest

    if not key or len(key) > MAX_TOKEN_LENGTH:
        return AnonymousUser()
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest(key), revoked__isnull=True)
        .exclude(expires__lte=timezone.now())
        .first()
    )
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


def websocket_stack(inner: Any) -> Any:
    """Origin check, then session auth, then token auth, around ``inner``."""
    return OwnOriginValidator(AuthMiddlewareStack(QueryTokenAuthMiddleware(inner)))
