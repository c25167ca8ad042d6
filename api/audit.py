"""Writing the audit log (see :class:`api.models.AuditEntry`)."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from api.models import AuditEntry
from api.roles import role_of


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON so the row holds plain JSON (int keys become strings)."""
    if value is None:
        return None
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


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
        remote = request.META.get("REMOTE_ADDR", "") or ""
    else:
        remote = ""
    name = username or (user.get_username() if user is not None else "anonymous")
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
    )
