"""What a front end needs from the accounts store, as an interface (the Kafka listener's view).

The accounts (users, their roles, password hashes, API tokens, SCRAM credentials, ACL entries,
failed-login counters) and the audit log live in the database, on the Django side. Front ends
that are not Django (the Kafka listener) get an :class:`AccessBackend` from the runtime
(``cairn/runtime.py`` builds the Django implementation) and never import Django.

Every method may block (a database query): call them off the event loop
(``asyncio.to_thread``), except :meth:`AccessBackend.authorizer`, which returns a cached,
immutable snapshot and is cheap enough for the produce path.

:class:`StaticAccess` is a complete in-memory implementation, for tests of front ends and for
tools that run without a database.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mqcore.access.authorizer import Authorizer, Subject
from mqcore.access.model import AclEntry, AclFilter
from mqcore.access.scram import ScramUser, derive_user


@dataclass(frozen=True, slots=True)
class LoginRefused:
    """A login that did not succeed, and why (said to the client only as "authentication
    failed"; the reason goes to the log and the audit trail). ``locked``: the account or
    the address is locked out or throttled, whatever the secret was."""

    reason: str
    locked: bool = False


class AccessBackend(Protocol):
    """The accounts store, as the Kafka listener (and any non-Django front end) uses it."""

    def authorizer(self) -> Authorizer:
        """The current ACL snapshot (a new object, with a higher version, after a change).
        Cheap and thread-safe."""
        ...

    def login_allowed(self, username: str, host: str) -> LoginRefused | None:
        """None if ``username`` from ``host`` may try to log in now; else why not (locked
        out, throttled). Checked before any secret is looked at."""
        ...

    def authenticate_password(
        self, username: str, secret: str, host: str, front_end: str
    ) -> Subject | LoginRefused:
        """Check a password or one of the user's API tokens (SASL/PLAIN). Records the
        outcome (failure counters, lockout, audit of failures and lockouts)."""
        ...

    def scram_user(self, mechanism: str, username: str) -> ScramUser | None:
        """The user's credentials for ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; None for an
        unknown or disabled user (the caller then fakes an exchange, so that a client
        cannot tell unknown users from wrong passwords)."""
        ...

    def login_finished(
        self, username: str, host: str, front_end: str, succeeded: bool, mechanism: str
    ) -> Subject | LoginRefused:
        """Record the outcome of a login checked by the caller (SCRAM, a client
        certificate): failure counters, lockout, audit. Returns the subject on success
        (with the user's current role), or why it counts as refused (a lockout)."""
        ...

    def subject_for_certificate(
        self, common_name: str, host: str, front_end: str
    ) -> Subject | None:
        """The subject a TLS client certificate's subject CN stands for (a Cairn user of
        that name, enabled), or None."""
        ...

    def audit(
        self,
        subject: Subject,
        action: str,
        target_type: str,
        target: str,
        old: Any = None,
        new: Any = None,
    ) -> None:
        """Write one audit entry (principal, address and front end from ``subject``)."""
        ...

    def count(self, subject: Subject, action: str) -> None:
        """Count a routine action that is not logged one by one (consumer commits)."""
        ...

    def acl_entries(self, selected: AclFilter) -> list[AclEntry]:
        """The stored entries ``selected`` matches (DescribeAcls, ``GET /api/v1/acls``)."""
        ...

    def create_acls(self, subject: Subject, entries: list[AclEntry]) -> list[str | None]:
        """Store each entry (an existing equal entry is kept, not doubled); per entry None or
        why it was refused. Audited. The caller has checked ``subject`` may (CLUSTER ALTER)."""
        ...

    def delete_acls(self, subject: Subject, selected: AclFilter) -> list[AclEntry]:
        """Delete the entries ``selected`` matches; return them. Audited."""
        ...


@dataclass
class StaticAccess:
    """An in-memory :class:`AccessBackend`: users with a role and plain secrets, fixed ACL
    entries, an audit list. For tests and database-less tools; never for production secrets
    (it keeps them in memory as given)."""

    users: Mapping[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)
    entries: Iterable[AclEntry] = ()
    scram_iterations: int = 4096
    audited: list[tuple[str, str, str, str, Any, Any]] = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=dict)
    locked: set[str] = field(default_factory=set)
    _authorizer: Authorizer = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._authorizer = Authorizer(self.entries, version=1)

    def set_entries(self, entries: Iterable[AclEntry]) -> None:
        with self._lock:
            self._authorizer = Authorizer(entries, version=self._authorizer.version + 1)

    def authorizer(self) -> Authorizer:
        return self._authorizer

    def login_allowed(self, username: str, host: str) -> LoginRefused | None:
        return LoginRefused("locked out", locked=True) if username in self.locked else None

    def authenticate_password(
        self, username: str, secret: str, host: str, front_end: str
    ) -> Subject | LoginRefused:
        found = self.users.get(username)
        if found is None or not any(
            hmac.compare_digest(secret.encode(), s.encode()) for s in found[1]
        ):
            return LoginRefused("unknown user or wrong password")
        return Subject(username, found[0], host, front_end)

    def scram_user(self, mechanism: str, username: str) -> ScramUser | None:
        found = self.users.get(username)
        if found is None:
            return None
        return derive_user(mechanism, found[1], salt=username.encode().ljust(16, b"\0"),
                           iterations=self.scram_iterations)  # fmt: skip

    def login_finished(
        self, username: str, host: str, front_end: str, succeeded: bool, mechanism: str
    ) -> Subject | LoginRefused:
        found = self.users.get(username)
        if not succeeded or found is None:
            return LoginRefused("unknown user or wrong password")
        return Subject(username, found[0], host, front_end)

    def subject_for_certificate(
        self, common_name: str, host: str, front_end: str
    ) -> Subject | None:
        found = self.users.get(common_name)
        return None if found is None else Subject(common_name, found[0], host, front_end)

    def audit(
        self,
        subject: Subject,
        action: str,
        target_type: str,
        target: str,
        old: Any = None,
        new: Any = None,
    ) -> None:
        self.audited.append((str(subject.principal), action, target_type, target, old, new))

    def count(self, subject: Subject, action: str) -> None:
        self.counted[action] = self.counted.get(action, 0) + 1

    def acl_entries(self, selected: AclFilter) -> list[AclEntry]:
        return [e for e in self._authorizer.entries if selected.matches(e)]

    def create_acls(self, subject: Subject, entries: list[AclEntry]) -> list[str | None]:
        with self._lock:
            kept = list(self._authorizer.entries)
            kept += [e for e in dict.fromkeys(entries) if e not in kept]
            self._authorizer = Authorizer(kept, version=self._authorizer.version + 1)
        for e in entries:
            self.audit(subject, "acl.create", "acl", str(e.principal), None, e.as_dict())
        return [None for _ in entries]

    def delete_acls(self, subject: Subject, selected: AclFilter) -> list[AclEntry]:
        with self._lock:
            gone = [e for e in self._authorizer.entries if selected.matches(e)]
            kept = [e for e in self._authorizer.entries if not selected.matches(e)]
            self._authorizer = Authorizer(kept, version=self._authorizer.version + 1)
        for e in gone:
            self.audit(subject, "acl.delete", "acl", str(e.principal), e.as_dict(), None)
        return gone
