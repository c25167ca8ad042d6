"""ACL entries in the database, and the process's cached :class:`Authorizer` over them.

Every change bumps :class:`accounts.models.AclVersion` in the same transaction. This process
rebuilds its authorizer right after its own changes commit; changes made by another process
(a ``manage.py`` command, a second web worker) are noticed by a version check made at most
every :data:`REFRESH_S` seconds, on a thread of its own, so :func:`authorizer` never touches
the database itself and is safe to call on the event loop and per message.
"""

from __future__ import annotations

import logging
import threading
import time

from django.core.exceptions import SynchronousOnlyOperation
from django.db import IntegrityError, transaction

from accounts.models import AclRecord, AclVersion
from mqcore.access.authorizer import Authorizer
from mqcore.access.model import (
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)

log = logging.getLogger(__name__)

#: How stale another process's ACL change may be here, at most (seconds).
REFRESH_S = 2.0


def to_entry(record: AclRecord) -> AclEntry:
    return AclEntry(
        principal=Principal.parse(record.principal),
        resource_type=ResourceType(record.resource_type),
        resource_name=record.resource_name,
        pattern_type=PatternType(record.pattern_type),
        operation=Operation(record.operation),
        permission=Permission(record.permission),
        host=record.host,
    )


def _fields(entry: AclEntry) -> dict[str, object]:
    return {
        "principal": str(entry.principal),
        "resource_type": int(entry.resource_type),
        "resource_name": entry.resource_name,
        "pattern_type": int(entry.pattern_type),
        "operation": int(entry.operation),
        "permission": int(entry.permission),
        "host": entry.host,
    }


def _prefilter(selected: AclFilter):  # type: ignore[no-untyped-def]
    """The database side of a filter (exact columns); ``AclFilter.matches`` does the rest."""
    rows = AclRecord.objects.all()
    if selected.principal is not None:
        rows = rows.filter(principal=str(selected.principal))
    if selected.resource_type is not None:
        rows = rows.filter(resource_type=int(selected.resource_type))
    if selected.operation is not None:
        rows = rows.filter(operation=int(selected.operation))
    if selected.permission is not None:
        rows = rows.filter(permission=int(selected.permission))
    if selected.host is not None:
        rows = rows.filter(host=selected.host)
    return rows


def records(selected: AclFilter) -> list[tuple[int, AclEntry]]:
    """(id, entry) of the stored entries ``selected`` matches, oldest first."""
    found = []
    for record in _prefilter(selected):
        entry = to_entry(record)
        if selected.matches(entry):
            found.append((record.pk, entry))
    return found


def version() -> int:
    row = AclVersion.objects.filter(pk=1).first()
    return row.version if row is not None else 1


def _bump() -> None:
    row, created = AclVersion.objects.select_for_update().get_or_create(
        pk=1, defaults={"version": 2}
    )
    if not created:
        row.version += 1
        row.save(update_fields=["version"])
    # Stale now: the next authorizer() reads again (in this transaction, on this thread),
    # and once more after the commit, for every thread.
    cache.forget()
    transaction.on_commit(cache.reload)


def create(entries: list[AclEntry]) -> list[bool]:
    """Store each entry; per entry True if it is new (an equal stored one is kept)."""
    created = []
    with transaction.atomic():
        for entry in entries:
            try:
                with transaction.atomic():
                    _, new = AclRecord.objects.get_or_create(**_fields(entry))
            except IntegrityError:  # made meanwhile by another request
                new = False
            created.append(new)
        if any(created):
            _bump()
    return created


def delete(selected: AclFilter, ids: list[int] | None = None) -> list[tuple[int, AclEntry]]:
    """Delete the entries ``selected`` matches (and, with ``ids``, whose id is one of them)."""
    with transaction.atomic():
        gone = [(pk, entry) for pk, entry in records(selected) if ids is None or pk in set(ids)]
        if gone:
            AclRecord.objects.filter(pk__in=[pk for pk, _ in gone]).delete()
            _bump()
    return gone


class AuthorizerCache:
    """The process's current :class:`Authorizer` (module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Authorizer | None = None
        self._checked = 0.0
        self._checking = False

    def get(self) -> Authorizer:
        current = self._current
        if current is None:
            return self._load_now()
        if time.monotonic() - self._checked > REFRESH_S and not self._checking:
            self._checking = True
            threading.Thread(target=self._check, name="acl-version", daemon=True).start()
        return current

    def _check(self) -> None:
        from django.db import connection

        try:
            current = self._current
            if current is None or version() != current.version:
                self.reload()
            else:
                self._checked = time.monotonic()
        except Exception:  # the database is away: keep the current entries, try again later
            log.warning("ACL version check failed; keeping the current entries", exc_info=True)
            self._checked = time.monotonic()
        finally:
            self._checking = False
            connection.close()

    def _load_now(self) -> Authorizer:
        try:
            return self.reload()
        except SynchronousOnlyOperation:
            # Called on an event loop before the runtime warmed the cache: read on a thread
            # (once; the runtime reads the entries when it starts).
            done: list[Authorizer] = []
            reader = threading.Thread(target=lambda: done.append(self._reload_closing()))
            reader.start()
            reader.join()
            return done[0] if done else Authorizer(version=0)

    def _reload_closing(self) -> Authorizer:
        from django.db import connection

        try:
            return self.reload()
        finally:
            connection.close()

    def reload(self) -> Authorizer:
        """Read every entry and the version (blocking: not on the event loop)."""
        with transaction.atomic():
            now_version = version()
            entries = [to_entry(r) for r in AclRecord.objects.all()]
        fresh = Authorizer(entries, version=now_version)
        with self._lock:
            self._current = fresh
            self._checked = time.monotonic()
            return fresh

    def forget(self) -> None:
        """Drop the cached authorizer (tests: a new database)."""
        with self._lock:
            self._current = None
            self._checked = 0.0


cache = AuthorizerCache()


def authorizer() -> Authorizer:
    """The current authorizer: the stored entries and the roles' defaults."""
    return cache.get()
