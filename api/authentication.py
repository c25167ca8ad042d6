"""Token authentication in one small SQL query per request, checked afresh every time.

DRF's ``TokenAuthentication`` loads the token and its user through the ORM, and the role
check (:func:`api.roles.role_of`) then queries the user's groups: two ORM queries per
request, about a third of a single send's time in the view. :class:`QuickTokenAuthentication`
reads what decides access (the token exists, its user is active, is a superuser, and its
role groups) in one parametrised query against the same tables, on every request: a deleted
or rotated token, a deactivated user and a role change count from the next request, from
whatever process made them. Only the user *object* is reused (per user id, for
:data:`USER_TTL_S`, dropped when this process saves or deletes the user, reloaded when its
superuser bit no longer matches), so its descriptive fields (username, email) may lag a
change made by another process by up to that long. Each request gets its own copy.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections, router
from django.db.models.signals import post_delete, post_save
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from api.roles import ROLES

#: How long a loaded user object is reused (its access is checked on every request).
USER_TTL_S = 60.0
_RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}


class QuickTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, as DRF's, with the same errors; see the module."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        found = _access(key)
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        user_id, active, superuser, role = found
        if not active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        user = _users.get(user_id, active, superuser)
        if user is None:  # deleted since the query
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        user._cairn_role = role  # what role_of() would query (api.roles)
        token = Token(key=key, user=user)
        return user, token


def _access(key: str) -> tuple[Any, bool, bool, str | None] | None:
    """(user id, is_active, is_superuser, highest role) of the token's user, or None."""
    alias = router.db_for_read(Token)
    with connections[alias].cursor() as cursor:
        cursor.execute(_sql(alias), [*ROLES, key])
        rows = cursor.fetchall()
    if not rows:
        return None
    user_id, active, superuser, _ = rows[0]
    names = [name for *_, name in rows if name is not None]
    role = max(names, key=_RANK.__getitem__) if names else None
    return user_id, bool(active), bool(superuser), role


_SQL: dict[str, str] = {}


def _sql(alias: str) -> str:
    """The query, built once per database from the models' own table and column names."""
    sql = _SQL.get(alias)
    if sql is None:
        q = connections[alias].ops.quote_name
        user_model = get_user_model()
        member = user_model.groups.through._meta
        user = user_model._meta
        roles = ", ".join(["%s"] * len(ROLES))
        sql = _SQL[alias] = (
            f"SELECT t.{q(Token._meta.get_field('user').column)}, "
            f"u.{q(user.get_field('is_active').column)}, "
            f"u.{q(user.get_field('is_superuser').column)}, g.{q('name')} "
            f"FROM {q(Token._meta.db_table)} t "
            f"JOIN {q(user.db_table)} u ON u.{q(user.pk.column)} = "
            f"t.{q(Token._meta.get_field('user').column)} "
            f"LEFT JOIN {q(member.db_table)} m ON m.{q(member.get_field('user').column)} = "
            f"u.{q(user.pk.column)} "
            f"LEFT JOIN {q(Group._meta.db_table)} g ON g.{q(Group._meta.pk.column)} = "
            f"m.{q(member.get_field('group').column)} AND g.{q('name')} IN ({roles}) "
            f"WHERE t.{q(Token._meta.pk.column)} = %s"
        )
    return sql


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
