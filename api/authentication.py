"""Token authentication in one small SQL query per request, checked afresh every time.

Tokens are the accounts' (:class:`accounts.models.ApiToken`): kept as the SHA-256 of their
text, so a request's token is hashed (about a microsecond) and looked up by its digest.
:class:`QuickTokenAuthentication` reads what decides access (the token exists, is not revoked
or expired, its user is active, is a superuser, and its role groups) in one parametrised
query, on every request: a revoked token, a deactivated user and a role change count from the
next request, from whatever process made them. The token's "last used" time is written at
most once a minute per token (``CAIRN_ACCOUNTS["TOKEN_LAST_USE_SECONDS"]``; the query says
whether it is due), so a stream of sends does not pay a write each. Only the user *object* is
reused (per user id, for :data:`USER_TTL_S`, dropped when this process saves or deletes the
user, reloaded when its superuser bit no longer matches), so its descriptive fields
(username, email) may lag a change made by another process by up to that long. Each request
gets its own copy.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections, router
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from accounts.models import ApiToken
from accounts.roles import RANK, ROLES
from accounts.tokens import MAX_TOKEN_LENGTH, digest

#: How long a loaded user object is reused (its access is checked on every request).
USER_TTL_S = 60.0


@dataclass(frozen=True, slots=True)
class TokenUse:
    """``request.auth`` of a token request: which token (not a model instance: building one
    cost half of the authentication)."""

    token_id: int
    user_id: Any


class QuickTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <token>``, as DRF's, with the same errors; see the module."""

    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, TokenUse]:
        found = token_access(key) if len(key) <= MAX_TOKEN_LENGTH else None
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        token_id, user_id, active, superuser, role, expired = found
        if expired:
            raise exceptions.AuthenticationFailed("Token expired.")
        if not active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        user = _users.get(user_id, active, superuser)
        if user is None:  # deleted since the query
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        user._cairn_role = role  # what role_of() would query (accounts.roles)
        return user, TokenUse(token_id, user.pk)


def token_access(text: str) -> tuple[int, Any, bool, bool, str | None, bool] | None:
    """(token id, user id, is_active, is_superuser, highest role, expired) of a live
    (not revoked) token, or None. Marks the token used when its last use is stale."""
    alias = router.db_for_read(ApiToken)
    connection = connections[alias]
    now, stale_before = _times(alias)
    with connection.cursor() as cursor:
        cursor.execute(_sql(alias), [now, stale_before, *ROLES, digest(text)])
        rows = cursor.fetchall()
        if not rows:
            return None
        token_id, user_id, active, superuser, expired, stale, _ = rows[0]
        if stale and not expired:
            cursor.execute(_touch_sql(alias), [now, token_id])
    names = [name for *_, name in rows if name is not None]
    role = max(names, key=RANK.__getitem__) if names else None
    return token_id, user_id, bool(active), bool(superuser), role, bool(expired)


_SQL: dict[str, str] = {}
#: Per database: (tenth of a second, now, now - last-use interval), adapted for the query.
_TIMES: dict[str, tuple[int, Any, Any]] = {}


def _times(alias: str) -> tuple[Any, Any]:
    """Now and the oldest last use that is not stale, as query parameters, made once per
    tenth of a second (adapting them cost as much as the hash lookup): an expiry counts at
    most 0.1 s late."""
    tick = int(time.time() * 10)
    found = _TIMES.get(alias)
    if found is None or found[0] != tick:
        now = timezone.now()
        stale = now - timedelta(seconds=settings.CAIRN_ACCOUNTS["TOKEN_LAST_USE_SECONDS"])
        adapt = connections[alias].ops.adapt_datetimefield_value
        found = _TIMES[alias] = (tick, adapt(now), adapt(stale))
    return found[1], found[2]


def _sql(alias: str) -> str:
    """The query, built once per database from the models' own table and column names."""
    sql = _SQL.get(alias)
    if sql is None:
        q = connections[alias].ops.quote_name
        user_model = get_user_model()
        member = user_model.groups.through._meta
        user = user_model._meta
        token = ApiToken._meta
        roles = ", ".join(["%s"] * len(ROLES))
        expires, last_used = (
            q(token.get_field("expires").column),
            q(token.get_field("last_used").column),
        )
        sql = _SQL[alias] = (
            f"SELECT t.{q(token.pk.column)}, t.{q(token.get_field('user').column)}, "
            f"u.{q(user.get_field('is_active').column)}, "
            f"u.{q(user.get_field('is_superuser').column)}, "
            f"CASE WHEN t.{expires} IS NOT NULL AND t.{expires} <= %s THEN 1 ELSE 0 END, "
            f"CASE WHEN t.{last_used} IS NULL OR t.{last_used} < %s THEN 1 ELSE 0 END, "
            f"g.{q('name')} "
            f"FROM {q(token.db_table)} t "
            f"JOIN {q(user.db_table)} u ON u.{q(user.pk.column)} = "
            f"t.{q(token.get_field('user').column)} "
            f"LEFT JOIN {q(member.db_table)} m ON m.{q(member.get_field('user').column)} = "
            f"u.{q(user.pk.column)} "
            f"LEFT JOIN {q(Group._meta.db_table)} g ON g.{q(Group._meta.pk.column)} = "
            f"m.{q(member.get_field('group').column)} AND g.{q('name')} IN ({roles}) "
            f"WHERE t.{q(token.get_field('digest').column)} = %s "
            f"AND t.{q(token.get_field('revoked').column)} IS NULL"
        )
    return sql


def _touch_sql(alias: str) -> str:
    q = connections[alias].ops.quote_name
    token = ApiToken._meta
    return (
        f"UPDATE {q(token.db_table)} SET {q(token.get_field('last_used').column)} = %s "
        f"WHERE {q(token.pk.column)} = %s"
    )


class _UserObjects:
    """Loaded user objects by id (see the module docstring). Thread-safe."""

    def __init__(self, ttl_s: float = USER_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._users: dict[Any, tuple[Any, float]] = {}

    def get(self, user_id: Any, active: bool, superuser: bool) -> Any:
        """A copy of the user, or None if it no longer exists. ``active`` and ``superuser``
        are what the database says now: an object that disagrees is loaded again."""
        with self._lock:
            entry = self._users.get(user_id)
        now = time.monotonic()
        if (
            entry is None
            or entry[1] < now
            or entry[0].is_active != active
            or entry[0].is_superuser != superuser
        ):
            model = get_user_model()
            try:
                user = model._default_manager.get(pk=user_id)
            except model.DoesNotExist:
                self.forget(user_id)
                return None
            entry = (user, now + self.ttl_s)
            with self._lock:
                self._users[user_id] = entry
        return copy.copy(entry[0])

    def forget(self, user_id: Any) -> None:
        with self._lock:
            self._users.pop(user_id, None)

    def clear(self) -> None:
        with self._lock:
            self._users.clear()


_users = _UserObjects()


def _user_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    _users.forget(instance.pk)


post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="api.auth.user_saved")
post_delete.connect(_user_changed, sender=get_user_model(), dispatch_uid="api.auth.user_deleted")
