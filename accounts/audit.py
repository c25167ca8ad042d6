"""Writing the audit log (see :class:`accounts.models.AuditEntry`).

Every entry says who (user, role, principal), from where (the client's address) and through
which front end: ``rest`` (``/api/``), ``console`` (the console's pages), ``kafka`` (the Kafka
listener, through :func:`record_subject`), ``command`` (``manage.py``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, router
from django.utils import timezone

from accounts.models import AuditEntry
from accounts.roles import role_of
from mqcore.access.authorizer import Subject
from mqcore.access.model import ANONYMOUS


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON so the row holds plain JSON (int keys become strings)."""
    if value is None:
        return None
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def front_end_of(request: Any) -> str:
    """``rest`` for the REST API's paths, ``console`` for the console's pages."""
    path = getattr(request, "path", "") or ""
    return "rest" if path.startswith("/api/") else "console"


def address_of(request: Any) -> str:
    return (request.META.get("REMOTE_ADDR", "") or "")[:64]


def record_subject(
    subject: Subject,
    action: str,
    target_type: str,
    target: str,
    *,
    old: Any = None,
    new: Any = None,
) -> AuditEntry:
    """Write one entry for ``subject`` (a front end that is not a Django request, e.g. the
    Kafka listener, or the accounts service): the user is looked up by name."""
    from django.contrib.auth import get_user_model

    user = None
    if subject.user is not None:
        user = get_user_model()._default_manager.filter(username=subject.user).first()
    host = "" if subject.host == "*" else subject.host
    return AuditEntry.objects.create(
        user=user,
        username=subject.user or ANONYMOUS.lower(),
        role=subject.role or "",
        action=action,
        target_type=target_type,
        target=target[:300],
        old_value=_jsonable(old),
        new_value=_jsonable(new),
        remote_addr=host[:64],
        principal=str(subject.principal),
        front_end=subject.front_end[:16],
    )


def record(
    request: Any,
    action: str,
    target_type: str,
    target: str,
    *,
    old: Any = None,
    new: Any = None,
    user: Any = None,
    username: str | None = None,
) -> AuditEntry:
    """Write one entry. ``request`` may be None (management commands: pass ``username``).

    Args:
        action: dotted verb, e.g. ``topic.create``, ``group.offsets.reset``.
        target_type, target: what was changed (``topic`` + name, ``message`` + msg id, ...).
        old, new: JSON-able values before and after.
    """
    if request is not None:
        user = request.user if request.user.is_authenticated else None
        remote = address_of(request)
        front_end = front_end_of(request)
    else:
        remote = ""
        front_end = "command" if username and username.startswith("manage.py") else ""
    name = username or (user.get_username() if user is not None else "anonymous")
    if user is not None:
        principal = f"User:{user.get_username()}"
    elif front_end in ("rest", "console"):
        principal = f"User:{ANONYMOUS}"
    else:
        principal = ""
    return AuditEntry.objects.create(
        user=user,
        username=name,
        role=(role_of(user) or "") if user is not None else "",
        action=action,
        target_type=target_type,
        target=target[:300],
        old_value=_jsonable(old),
        new_value=_jsonable(new),
        remote_addr=remote[:64],
        principal=principal,
        front_end=front_end,
    )


def record_quickly(request: Any, action: str, target_type: str, target: str, *, new: Any) -> None:
    """:func:`record` for a request's hot path (a send): the same row, written with one
    INSERT of the model's own columns and values (``get_db_prep_save``), without building
    and saving a model instance, which cost as much as the rest of a single send. Nothing
    listens to the model's save signals. ``new`` must be plain JSON already."""
    user = request.user if request.user.is_authenticated else None
    alias = router.db_for_write(AuditEntry)
    connection = connections[alias]
    values = {
        "timestamp": timezone.now(),
        "user": user.pk if user is not None else None,
        "username": user.get_username() if user is not None else "anonymous",
        "role": (role_of(user) or "") if user is not None else "",
        "action": action,
        "target_type": target_type,
        "target": target[:300],
        "old_value": None,
        "new_value": new,
        "remote_addr": address_of(request),
        "principal": f"User:{user.get_username() if user is not None else ANONYMOUS}",
        "front_end": front_end_of(request),
    }
    sql, fields = _insert_sql(alias)
    params = [f.get_db_prep_save(values[f.name], connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


_INSERTS: dict[str, tuple[str, list[Any]]] = {}


def _insert_sql(alias: str) -> tuple[str, list[Any]]:
    """``INSERT INTO <audit table> (<columns>) VALUES (%s, ...)`` and its fields, in order."""
    found = _INSERTS.get(alias)
    if found is None:
        quote = connections[alias].ops.quote_name
        fields = [f for f in AuditEntry._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(quote(f.column) for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        sql = f"INSERT INTO {quote(AuditEntry._meta.db_table)} ({columns}) VALUES ({marks})"
        found = _INSERTS[alias] = (sql, fields)
    return found
