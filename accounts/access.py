""":class:`DjangoAccess`: the accounts store as a :class:`mqcore.access.backend.AccessBackend`.

The runtime (``cairn.runtime.BrokerRuntime.access``) hands it to the Kafka listener; the
console and the live trace take their authorizer from it (``webui.access``), REST through
:mod:`api.permissions`. Every method but :meth:`DjangoAccess.authorizer` queries the database and
must run off the event loop.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import F
from django.utils import timezone

from accounts import acls, audit, logins, scram_keys, service
from accounts.roles import role_of
from mqcore.access.authorizer import Authorizer, Subject
from mqcore.access.backend import LoginRefused
from mqcore.access.model import AclEntry, AclFilter
from mqcore.access.scram import ScramUser


class DjangoAccess:
    """See the module docstring."""

    def authorizer(self) -> Authorizer:
        return acls.authorizer()

    def login_allowed(self, username: str, host: str) -> LoginRefused | None:
        return logins.allowed(username, host)

    def authenticate_password(
        self, username: str, secret: str, host: str, front_end: str
    ) -> Subject | LoginRefused:
        return logins.authenticate(username, secret, host, front_end, tokens=True)[1]

    def scram_user(self, mechanism: str, username: str) -> ScramUser | None:
        user = get_user_model()._default_manager.filter(username=username).first()
        if user is None or not user.is_active:
            return None
        return scram_keys.scram_user(user, mechanism, timezone.now())

    def login_finished(
        self, username: str, host: str, front_end: str, succeeded: bool, mechanism: str
    ) -> Subject | LoginRefused:
        return logins.finished(username, host, front_end, succeeded, mechanism)

    def subject_for_certificate(
        self, common_name: str, host: str, front_end: str
    ) -> Subject | None:
        user = get_user_model()._default_manager.filter(username=common_name).first()
        if user is None or not user.is_active:
            return None
        return Subject(user.get_username(), role_of(user), host, front_end)

    def audit(
        self,
        subject: Subject,
        action: str,
        target_type: str,
        target: str,
        old: Any = None,
        new: Any = None,
    ) -> None:
        audit.record_subject(subject, action, target_type, target, old=old, new=new)

    def count(self, subject: Subject, action: str) -> None:
        from accounts.models import ActionCount

        updated = ActionCount.objects.filter(
            principal=str(subject.principal), action=action
        ).update(count=F("count") + 1, last=timezone.now())
        if not updated:
            ActionCount.objects.get_or_create(
                principal=str(subject.principal), action=action, defaults={"count": 1}
            )

    def acl_entries(self, selected: AclFilter) -> list[AclEntry]:
        return [entry for _, entry in acls.records(selected)]

    def create_acls(self, subject: Subject, entries: list[AclEntry]) -> list[str | None]:
        service.add_acls(subject, entries)
        return [None for _ in entries]

    def delete_acls(self, subject: Subject, selected: AclFilter) -> list[AclEntry]:
        return [entry for _, entry in service.delete_acls(subject, selected)]


_instance: DjangoAccess | None = None


def django_access() -> DjangoAccess:
    """The process's one instance."""
    global _instance
    if _instance is None:
        _instance = DjangoAccess()
    return _instance
