"""The account operations, one function each, every change audited.

Front ends (the REST API, the console's pages, management commands, Kafka's
CreateAcls/DeleteAcls through :class:`accounts.access.DjangoAccess`) call these and nothing
else, so each change is made and audited the same way wherever it comes from. ``actor`` is
who does it (:class:`mqcore.access.authorizer.Subject`: user, role, address, front end); the
caller has checked that the actor may (admin, or a user managing its own tokens).

Errors are mqcore's (``ValidationError`` naming the field, ``NotFoundError``,
``ConflictError``), which the REST API answers as problem+json 4xx.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts import acls, audit, logins, scram_keys, tokens
from accounts.models import ApiToken
from accounts.roles import ROLES, role_of
from accounts.roles import set_role as put_in_role_group
from mqcore.access.authorizer import Subject
from mqcore.access.model import AclEntry, AclFilter
from mqcore.errors import ConflictError, NotFoundError, ValidationError

TOKEN_NAME_MAX = 100


def get_user(username: str) -> Any:
    """The user of that name.

    Raises:
        NotFoundError: none.
    """
    found = get_user_model()._default_manager.filter(username=username).first()
    if found is None:
        raise NotFoundError("username", "not_found", f"no user {username!r}")
    return found


def _settings(user: Any) -> dict[str, Any]:
    return {"role": role_of(user), "is_active": user.is_active}


def _apply_role(user: Any, role: str | None) -> None:
    from django.contrib.auth.models import Group

    if role is None:
        user.groups.remove(*Group.objects.filter(name__in=ROLES))
        if hasattr(user, "_cairn_role"):
            del user._cairn_role
        return
    if role not in ROLES:
        raise ValidationError("role", "choice", f"role must be one of {', '.join(ROLES)}")
    put_in_role_group(user, role)


def create_user(
    actor: Subject,
    username: str,
    role: str | None,
    password: str | None = None,
    active: bool = True,
) -> Any:
    """A new user with ``role`` (None: no role; ACL entries may still allow it things).
    Without a password it can use only API tokens.

    Raises:
        ValidationError: a bad name or role. ConflictError: the name is taken.
    """
    if not username or len(username) > 150:
        raise ValidationError("username", "length", "username must be 1 to 150 characters")
    if role is not None and role not in ROLES:
        raise ValidationError("role", "choice", f"role must be one of {', '.join(ROLES)}")
    model = get_user_model()
    with transaction.atomic():
        if model._default_manager.filter(username=username).exists():
            raise ConflictError(f"user {username!r} exists")
        user = model._default_manager.create_user(username, password=password)
        scram_keys.account_of(user)
        if not active:
            user.is_active = False
            user.save(update_fields=["is_active"])
        _apply_role(user, role)
        audit.record_subject(actor, "user.create", "user", username, new=_settings(user))
    return user


def set_role(actor: Subject, username: str, role: str | None) -> Any:
    with transaction.atomic():
        user = get_user(username)
        old = _settings(user)
        _apply_role(user, role)
        audit.record_subject(actor, "user.role", "user", username, old=old, new=_settings(user))
    return user


def set_active(actor: Subject, username: str, active: bool) -> Any:
    """Disable (``active`` False: no login, no token, no Kafka connection) or enable."""
    with transaction.atomic():
        user = get_user(username)
        if not active and actor.user == username:
            raise ValidationError("is_active", "self", "you cannot disable your own account")
        old = _settings(user)
        user.is_active = active
        user.save(update_fields=["is_active"])
        action = "user.enable" if active else "user.disable"
        audit.record_subject(actor, action, "user", username, old=old, new=_settings(user))
    return user


def reset_password(actor: Subject, username: str, password: str) -> Any:
    """A new password (its SCRAM keys derived again: ``accounts.passwords``)."""
    if len(password) < 8:
        raise ValidationError("password", "min_length", "a password has at least 8 characters")
    with transaction.atomic():
        user = get_user(username)
        user.set_password(password)
        user.save()
        audit.record_subject(actor, "user.password", "user", username, new={"password": "changed"})
    return user


def delete_user(actor: Subject, username: str) -> None:
    with transaction.atomic():
        user = get_user(username)
        if actor.user == username:
            raise ValidationError("username", "self", "you cannot delete your own account")
        old = _settings(user)
        user.delete()
        audit.record_subject(actor, "user.delete", "user", username, old=old)


@dataclass(frozen=True)
class IssuedToken:
    """A token just issued: ``text`` is shown once and never stored."""

    token: ApiToken
    text: str


def issue_token(
    actor: Subject, username: str, name: str, expires: datetime | None = None
) -> IssuedToken:
    """A new API token for the user (its other tokens keep working).

    Raises:
        ValidationError: no name, a name too long, an expiry in the past.
    """
    name = name.strip()
    if not name or len(name) > TOKEN_NAME_MAX:
        raise ValidationError(
            "name", "length", f"a token name has 1 to {TOKEN_NAME_MAX} characters"
        )
    if expires is not None and expires <= timezone.now():
        raise ValidationError("expires", "past", "expires must be in the future")
    text = tokens.new_token_text()
    with transaction.atomic():
        user = get_user(username)
        token = ApiToken.objects.create(
            user=user, name=name, digest=tokens.digest(text), expires=expires
        )
        scram_keys.derive_token(user, token, text)
        audit.record_subject(actor, "token.issue", "user", username, new=token_dict(token))
    return IssuedToken(token, text)


def token_dict(token: ApiToken) -> dict[str, Any]:
    return {
        "id": token.pk,
        "name": token.name,
        "username": token.user.get_username(),
        "created": token.created,
        "expires": token.expires,
        "last_used": token.last_used,
        "revoked": token.revoked,
    }


def list_tokens(username: str | None = None) -> list[ApiToken]:
    """Every token (of one user, or of everyone), revoked ones included, oldest first."""
    found = ApiToken.objects.select_related("user")
    if username is not None:
        found = found.filter(user=get_user(username))
    return list(found.order_by("id"))


def get_token(token_id: int) -> ApiToken:
    found = ApiToken.objects.select_related("user").filter(pk=token_id).first()
    if found is None:
        raise NotFoundError("token_id", "not_found", f"no token {token_id}")
    return found


def revoke_token(actor: Subject, token_id: int) -> ApiToken:
    """Revoke a token now (and drop its SCRAM keys). Revoking twice is harmless."""
    with transaction.atomic():
        token = get_token(token_id)
        if token.revoked is None:
            old = token_dict(token)
            token.revoked = timezone.now()
            token.save(update_fields=["revoked"])
            token.scramkey_set.all().delete()
            audit.record_subject(
                actor, "token.revoke", "user", token.user.get_username(), old=old,
                new=token_dict(token),
            )  # fmt: skip
    return token


def list_acls(selected: AclFilter) -> list[tuple[int, AclEntry]]:
    return acls.records(selected)


def add_acls(actor: Subject, entries: list[AclEntry]) -> list[bool]:
    """Store entries (an equal stored one is kept); per entry whether it is new. Each new
    entry is audited."""
    with transaction.atomic():
        created = acls.create(entries)
        for entry, new in zip(entries, created, strict=True):
            if new:
                audit.record_subject(
                    actor, "acl.create", "acl", str(entry.principal), new=entry.as_dict()
                )
    return created


def delete_acls(
    actor: Subject, selected: AclFilter, ids: list[int] | None = None
) -> list[tuple[int, AclEntry]]:
    with transaction.atomic():
        gone = acls.delete(selected, ids)
        for pk, entry in gone:
            audit.record_subject(
                actor, "acl.delete", "acl", str(entry.principal), old={"id": pk, **entry.as_dict()}
            )
    return gone


def lift_lockout(
    actor: Subject, username: str | None = None, address: str | None = None
) -> dict[str, Any]:
    """Clear a user's failed logins and lockout, and/or an address's.

    Raises:
        ValidationError: neither given. NotFoundError: no such user.
    """
    if not username and not address:
        raise ValidationError("username", "required", "give a username or an address")
    with transaction.atomic():
        if username:
            get_user(username)
        found = logins.lift(username, address)
        audit.record_subject(
            actor,
            "login.unlock",
            "user" if username else "address",
            username or address or "",
            old=found or None,
            new={"address": address} if address and username else None,
        )
    return found
