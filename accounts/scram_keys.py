"""Users' SCRAM credentials (RFC 5802), derived whenever a password or a token is set.

Every secret of a user is derived with the user's one salt and iteration count
(:class:`accounts.models.Account`), so a SCRAM exchange can start before the server knows
which secret the client holds (``mqcore.access.backend.ScramUser``). A password's keys record
the Django password hash they were derived with: a password hash replaced without the
password (an unusable password, a hasher upgrade) leaves them ignored until the password is
next used or set.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings

from accounts.models import Account, ApiToken, ScramKey
from mqcore.access.scram import MECHANISMS, SALT_BYTES, ScramSecret, ScramUser, derive_secret


def account_of(user: Any) -> Account:
    """The user's :class:`Account`, made (with a fresh salt) on first use."""
    account, _ = Account.objects.get_or_create(
        user=user,
        defaults={
            "scram_salt": secrets.token_bytes(SALT_BYTES),
            "scram_iterations": int(settings.CAIRN_ACCOUNTS["SCRAM_ITERATIONS"]),
        },
    )
    return account


def _store(user: Any, token: ApiToken | None, secret: str) -> None:
    account = account_of(user)
    salt = bytes(account.scram_salt)
    for mechanism in MECHANISMS:
        derived = derive_secret(mechanism, secret, salt, account.scram_iterations)
        ScramKey.objects.update_or_create(
            user=user,
            mechanism=mechanism,
            token=token,
            defaults={
                "password_hash": user.password if token is None else "",
                "stored_key": derived.stored_key,
                "server_key": derived.server_key,
            },
        )


def derive_password(user: Any, password: str) -> None:
    """(Re)derive the keys of the user's password (the user is saved, ``user.password``
    holds the new hash)."""
    _store(user, None, password)


def derive_token(user: Any, token: ApiToken, text: str) -> None:
    """Derive the keys of one newly issued token."""
    _store(user, token, text)


def password_keys_current(user: Any) -> bool:
    """Whether the password's keys were derived from the password the user has now."""
    return ScramKey.objects.filter(
        user=user, token__isnull=True, password_hash=user.password
    ).count() == len(MECHANISMS)


def scram_user(user: Any, mechanism: str, now: Any) -> ScramUser | None:
    """The user's credentials for ``mechanism``: its password's (if current) and its live
    tokens'. None if it has none."""
    from django.db.models import Q

    if mechanism not in MECHANISMS:
        return None
    account = Account.objects.filter(user=user).first()
    if account is None:
        return None
    live = Q(token__revoked__isnull=True) & (
        Q(token__expires__isnull=True) | Q(token__expires__gt=now)
    )
    password = Q(token__isnull=True, password_hash=user.password)
    if not user.has_usable_password():
        password = Q(pk__in=[])
    keys = ScramKey.objects.filter(user=user, mechanism=mechanism).filter(
        password | (Q(token__isnull=False) & live)
    )
    found = tuple(ScramSecret(bytes(k.stored_key), bytes(k.server_key)) for k in keys)
    if not found:
        return None
    return ScramUser(bytes(account.scram_salt), account.scram_iterations, found)
