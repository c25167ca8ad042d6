"""Failed logins: throttling per user and per address, lockout, and the audit of logins.

Every login of every front end goes through here (the REST API's ``/auth/login``, the
console's login page, Kafka SASL through :class:`accounts.access.DjangoAccess`):

* **Per user** (settings ``CAIRN_ACCOUNTS``, README "Security"): after ``THROTTLE_AFTER``
  failures in a row the next attempt must wait 1 s after the last failure, then 2, 4, ... up to
  ``THROTTLE_MAX_SECONDS``; an attempt made sooner is refused without looking at the secret
  and not counted. After ``LOCKOUT_AFTER`` failures the user is locked out for
  ``LOCKOUT_SECONDS`` (0: until an admin lifts it): even the right secret fails. A success
  resets the count.
* **Per address**: ``ADDRESS_MAX_FAILURES`` failures within ``ADDRESS_WINDOW_SECONDS`` refuse
  every login from that address (any user, known or not) until the window ends.

Audited: each success (``login``), failure (``login.failed``), lockout (``login.lockout``);
:func:`lift` (``login.unlock``) is audited by the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts import audit
from accounts.models import Account, AddressFailures
from accounts.roles import role_of
from accounts.scram_keys import account_of
from mqcore.access.authorizer import Subject
from mqcore.access.backend import LoginRefused


def _policy() -> dict[str, int]:
    return dict(settings.CAIRN_ACCOUNTS)


@dataclass(frozen=True)
class Throttled(LoginRefused):
    """Refused before the secret was looked at; ``retry_after_s`` until the next try."""

    retry_after_s: int = 1


def _user_wait(account: Account | None, now: datetime, policy: dict[str, int]) -> Throttled | None:
    if account is None:
        return None
    if account.locked_until is not None and account.locked_until > now:
        left = int((account.locked_until - now).total_seconds()) + 1
        return Throttled("account locked out after repeated failed logins", True, left)
    after = policy["THROTTLE_AFTER"]
    if after and account.failures >= after and account.last_failure is not None:
        delay = min(2 ** (account.failures - after), policy["THROTTLE_MAX_SECONDS"])
        ready = account.last_failure + timedelta(seconds=delay)
        if ready > now:
            left = int((ready - now).total_seconds()) + 1
            return Throttled("too many failed logins for this user; wait", True, left)
    return None


def _address_wait(address: str, now: datetime, policy: dict[str, int]) -> Throttled | None:
    limit = policy["ADDRESS_MAX_FAILURES"]
    if not limit or not address:
        return None
    row = AddressFailures.objects.filter(address=address[:64]).first()
    if row is None:
        return None
    ends = row.window_start + timedelta(seconds=policy["ADDRESS_WINDOW_SECONDS"])
    if ends > now and row.failures >= limit:
        left = int((ends - now).total_seconds()) + 1
        return Throttled("too many failed logins from this address; wait", True, left)
    return None


def _account(username: str) -> Account | None:
    return Account.objects.filter(user__username=username).first()


def allowed(username: str, address: str) -> Throttled | None:
    """None if ``username`` from ``address`` may try now; else why not."""
    now, policy = timezone.now(), _policy()
    return _user_wait(_account(username), now, policy) or _address_wait(address, now, policy)


def _count_address(address: str, now: datetime, policy: dict[str, int]) -> None:
    if not address:
        return
    window = timedelta(seconds=policy["ADDRESS_WINDOW_SECONDS"])
    row, created = AddressFailures.objects.select_for_update().get_or_create(
        address=address[:64], defaults={"failures": 1, "window_start": now}
    )
    if created:
        return
    if row.window_start + window <= now:
        row.failures, row.window_start = 1, now
        row.save(update_fields=["failures", "window_start"])
    else:
        AddressFailures.objects.filter(pk=row.pk).update(failures=F("failures") + 1)


def _subject(user: Any, username: str, address: str, front_end: str) -> Subject:
    return Subject(
        user.get_username() if user is not None else username,
        role_of(user) if user is not None else None,
        address or "*",
        front_end,
    )


def finished(
    username: str, address: str, front_end: str, succeeded: bool, mechanism: str
) -> Subject | LoginRefused:
    """Record a login's outcome (counters, lockout, audit). On success the user's subject,
    unless it is locked out (checked again here: a lockout may have begun meanwhile)."""
    now, policy = timezone.now(), _policy()
    user = get_user_model()._default_manager.filter(username=username).first()
    subject = _subject(user, username, address, front_end)
    detail = {"mechanism": mechanism}
    with transaction.atomic():
        if succeeded and user is not None and user.is_active:
            account = account_of(user)
            waiting = _user_wait(account, now, policy)
            if waiting is not None:
                audit.record_subject(
                    subject,
                    "login.failed",
                    "user",
                    username,
                    new={**detail, "reason": waiting.reason},
                )
                return waiting
            if account.failures:
                Account.objects.filter(pk=account.pk).update(failures=0, last_failure=None)
            type(user)._default_manager.filter(pk=user.pk).update(last_login=now)
            audit.record_subject(subject, "login", "user", username, new=detail)
            return subject
        reason = "inactive user" if user is not None and succeeded else "wrong username or secret"
        _count_address(address, now, policy)
        audit.record_subject(
            subject, "login.failed", "user", username[:300], new={**detail, "reason": reason}
        )
        if user is None:
            return LoginRefused(reason)
        account = Account.objects.select_for_update().get(pk=account_of(user).pk)
        account.failures += 1
        account.last_failure = now
        limit = policy["LOCKOUT_AFTER"]
        fields = ["failures", "last_failure"]
        locked = (
            bool(limit)
            and account.failures >= limit
            and (account.locked_until is None or account.locked_until <= now)
        )
        if locked:
            seconds = policy["LOCKOUT_SECONDS"]
            account.locked_until = now + (
                timedelta(seconds=seconds) if seconds else timedelta(days=365 * 100)
            )
            fields.append("locked_until")
        account.save(update_fields=fields)
        if locked:
            audit.record_subject(
                subject,
                "login.lockout",
                "user",
                username,
                new={"failures": account.failures, "until": account.locked_until.isoformat()},
            )
    return LoginRefused(reason)


def lift(username: str | None, address: str | None) -> dict[str, Any]:
    """Clear a user's failures and lockout and/or an address's failures; what was there."""
    found: dict[str, Any] = {}
    with transaction.atomic():
        if username:
            account = _account(username)
            if account is not None:
                found["user"] = {
                    "failures": account.failures,
                    "locked_until": account.locked_until.isoformat()
                    if account.locked_until is not None
                    else None,
                }
                Account.objects.filter(pk=account.pk).update(
                    failures=0, last_failure=None, locked_until=None
                )
        if address:
            row = AddressFailures.objects.filter(address=address).first()
            if row is not None:
                found["address"] = {"failures": row.failures}
                row.delete()
    return found


def state(user: Any) -> dict[str, Any]:
    """The user's failed-login state, for the users list."""
    account = Account.objects.filter(user=user).first()
    now = timezone.now()
    locked = account is not None and account.locked_until is not None and account.locked_until > now
    return {
        "failed_logins": account.failures if account is not None else 0,
        "locked_until": account.locked_until if locked and account is not None else None,
    }


def secret_matches(user: Any, secret: str, *, tokens: bool) -> bool:
    """Whether ``secret`` is the user's password (or, with ``tokens``, one of its live API
    tokens). A right password whose SCRAM keys are stale (a hash replaced by a hasher
    upgrade) gets them derived again."""
    from accounts import scram_keys
    from accounts import tokens as token_texts
    from accounts.models import ApiToken

    if user.check_password(secret):
        if not scram_keys.password_keys_current(user):
            scram_keys.derive_password(user, secret)
        return True
    if not tokens or len(secret) > token_texts.MAX_TOKEN_LENGTH:
        return False
    now = timezone.now()
    return (
        ApiToken.objects.filter(user=user, digest=token_texts.digest(secret), revoked__isnull=True)
        .exclude(expires__lte=now)
        .exists()
    )


def authenticate(
    username: str, secret: str, address: str, front_end: str, *, tokens: bool = False
) -> tuple[Any, Subject | LoginRefused]:
    """A whole password login: the throttle and lockout check, the secret, the outcome
    recorded. Returns the user (None unless it succeeded) and the subject or why not."""
    waiting = allowed(username, address)
    if waiting is not None:
        subject = Subject(username or None, None, address or "*", front_end)
        audit.record_subject(
            subject, "login.failed", "user", username[:300], new={"reason": waiting.reason}
        )
        return None, waiting
    user = get_user_model()._default_manager.filter(username=username).first()
    ok = user is not None and user.is_active and secret_matches(user, secret, tokens=tokens)
    outcome = finished(username, address, front_end, ok, "password")
    return (user if isinstance(outcome, Subject) else None), outcome
