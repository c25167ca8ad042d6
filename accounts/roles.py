"""User roles: ``viewer`` < ``operator`` < ``admin``, kept as Django groups of the same names.

* viewer: reads everything except the audit log and users.
* operator: also sends, commits and resets offsets, retries and resends messages, creates,
  changes and deletes topics and groups; reads the audit log.
* admin: also imports RocketMQ config documents and manages users.

Superusers are admins whatever their groups. A user in several role groups has the highest.
A user in none has no role and is refused everything but ``GET /api/v1/auth/me``.

A role is what a *user* may do; what a role's defaults allow on topics, groups and the cluster
is ``mqcore.access.authorizer.ROLE_DEFAULTS``, which ACL entries refine. Every front end asks
here for a user's role: REST (:mod:`api.permissions`), the console (``webui.access``) and the
Kafka listener (through :class:`accounts.access.DjangoAccess`).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group

from mqcore.access.authorizer import Subject
from mqcore.access.model import WILDCARD

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
#: A role's rank: a higher rank may do everything a lower one may.
RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}


def role_of(user: AbstractBaseUser | AnonymousUser | None) -> str | None:
    """The user's effective role, or None (anonymous, inactive, or in no role group)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if getattr(user, "is_superuser", False):
        return ADMIN
    cached = getattr(user, "_cairn_role", False)
    if cached is not False:
        return cached  # type: ignore[no-any-return]
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))  # type: ignore[union-attr]
    role = max(names, key=RANK.__getitem__) if names else None
    user._cairn_role = role  # type: ignore[union-attr]
    return role


def has_role(user: Any, required: str) -> bool:
    role = role_of(user)
    return role is not None and RANK[role] >= RANK[required]


def set_role(user: Any, role: str) -> None:
    """Put the user in exactly one role group (created on first use)."""
    if role not in RANK:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name=role))
    user.groups.add(group)
    if hasattr(user, "_cairn_role"):
        del user._cairn_role


def subject_of(request: Any) -> Subject:
    """Who asks, for the authorizer and the audit log: user, role, address, front end
    (``rest`` under ``/api/``, ``console`` elsewhere)."""
    user = request.user
    path = getattr(request, "path", "") or ""
    return Subject(
        user.get_username() if user.is_authenticated else None,
        role_of(user),
        request.META.get("REMOTE_ADDR") or WILDCARD,
        "rest" if path.startswith("/api/") else "console",
    )
