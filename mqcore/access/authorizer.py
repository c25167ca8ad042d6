"""The one authorization check every front end makes (REST, console, live trace, Kafka).

A decision for ``subject`` doing ``operation`` on ``resource``, in this order (Kafka's
``AclAuthorizer`` with Cairn's roles as the last step):

1. A **deny** entry that applies (to ``User:<name>``, ``User:*`` or ``Role:<role>``, from the
   subject's host or ``*``) and names the resource with this operation or ``ALL``: denied.
   Deny always wins.
2. An **allow** entry that applies and names the resource with this operation, ``ALL``, or an
   operation that implies it (``model.IMPLIED_BY``): allowed.
3. The subject's **role** allows it (:data:`ROLE_DEFAULTS`): allowed.
4. Otherwise denied.

So roles stay the defaults, an allow entry grants more (a service user with no role allowed
to write topics ``orders.``*), and a deny entry takes away (an operator denied a topic).

The entries come from the database (the Django side builds an :class:`Authorizer` from them
and a new one whenever they change; ``version`` tells them apart). :class:`CachedDecisions`
keeps one subject's decisions for one authorizer version, so a Kafka connection checks each
(operation, resource) once: the produce path pays a dict lookup per batch.

Thread-safety: an :class:`Authorizer` is immutable; a :class:`CachedDecisions` belongs to one
connection or request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mqcore.access.model import (
    ANONYMOUS,
    WILDCARD,
    AclEntry,
    Operation,
    Permission,
    Principal,
    Resource,
    ResourceType,
)

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)

_VIEW = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS}),
    ResourceType.GROUP: frozenset({Operation.DESCRIBE}),
    ResourceType.CLUSTER: frozenset({Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE}),
}
_OPERATE = {
    ResourceType.TOPIC: _VIEW[ResourceType.TOPIC]
    | {
        Operation.WRITE,
        Operation.CREATE,
        Operation.ALTER,
        Operation.DELETE,
        Operation.ALTER_CONFIGS,
    },
    # Group membership (join, sync, heartbeat), commits and offset resets are READ.
    ResourceType.GROUP: _VIEW[ResourceType.GROUP] | {Operation.READ, Operation.DELETE},
    ResourceType.CLUSTER: _VIEW[ResourceType.CLUSTER]
    | {Operation.CREATE, Operation.IDEMPOTENT_WRITE},
    ResourceType.TRANSACTIONAL_ID: _VIEW[ResourceType.TRANSACTIONAL_ID],
}
_EVERYTHING = frozenset(Operation)

#: What each role may do without any ACL entry. Admin may do everything, ACLs, users and
#: config import included (``CLUSTER ALTER``: CreateAcls/DeleteAcls, as in Kafka).
ROLE_DEFAULTS: Mapping[str, Mapping[ResourceType, frozenset[Operation]]] = {
    VIEWER: _VIEW,
    OPERATOR: _OPERATE,
    ADMIN: {rtype: _EVERYTHING for rtype in ResourceType},
}


@dataclass(frozen=True, slots=True)
class Subject:
    """Who is asking: a user name (None: anonymous), the user's role (None: no role), the
    client's address, and how it came (``rest``, ``console``, ``kafka``, ``trace``)."""

    user: str | None
    role: str | None
    host: str = WILDCARD
    front_end: str = ""

    @property
    def principal(self) -> Principal:
        return Principal.user(self.user if self.user is not None else ANONYMOUS)

    def principals(self) -> frozenset[Principal]:
        found = {self.principal, Principal.user(WILDCARD)} if self.user else {self.principal}
        if self.role:
            found.add(Principal("Role", self.role))
        return frozenset(found)


@dataclass(frozen=True, slots=True)
class Decision:
    """An answer and why (for error messages and the audit log)."""

    allowed: bool
    reason: str
    #: Refused by a deny entry (not merely not allowed): see :func:`allowed_on_any`.
    by_deny: bool = False

    def __bool__(self) -> bool:
        return self.allowed


def allowed_on_any(decisions: Iterable[Decision]) -> Decision:
    """One answer for an operation allowed on any of several resources (a topic is created
    with ``CREATE`` on the cluster or on its name): a deny entry on any of them refuses
    (deny first, as for one resource, so a deny on ``private-``* refuses an operator whose
    role may create on the cluster); otherwise the first allowed; otherwise the last refusal.
    """
    found = list(decisions)
    assert found, "allowed_on_any() needs a decision"
    for decision in found:
        if decision.by_deny:
            return decision
    return next((d for d in found if d.allowed), found[-1])


class Authorizer:
    """Decides with a fixed set of ACL entries (module docstring). Immutable."""

    def __init__(self, entries: Iterable[AclEntry] = (), version: int = 0) -> None:
        self.entries: tuple[AclEntry, ...] = tuple(entries)
        self.version = version
        by_type: dict[ResourceType, list[AclEntry]] = {}
        for entry in self.entries:
            by_type.setdefault(entry.resource_type, []).append(entry)
        self._by_type = {rtype: tuple(found) for rtype, found in by_type.items()}

    def decide(self, subject: Subject, operation: Operation, resource: Resource) -> Decision:
        """The decision for ``subject`` doing ``operation`` on ``resource``, with its reason."""
        principals = subject.principals()
        relevant = [
            e
            for e in self._by_type.get(resource.type, ())
            if e.applies_to(principals, subject.host) and e.names(resource)
        ]
        what = f"{operation.label} on {resource.type.label} {resource.name!r}"
        for entry in relevant:
            if entry.permission is Permission.DENY and entry.covers(operation):
                return Decision(
                    False, f"{what} is denied to {entry.principal} by an ACL", by_deny=True
                )
        for entry in relevant:
            if entry.permission is Permission.ALLOW and entry.covers(operation):
                return Decision(True, f"{what} is allowed to {entry.principal} by an ACL")
        if subject.role is not None and operation in ROLE_DEFAULTS.get(subject.role, {}).get(
            resource.type, frozenset()
        ):
            return Decision(True, f"{what} is allowed to the {subject.role} role")
        who = subject.principal
        role = f" (role {subject.role})" if subject.role else " (no role)"
        return Decision(False, f"{what} is not allowed to {who}{role}")

    def allowed(self, subject: Subject, operation: Operation, resource: Resource) -> bool:
        return self.decide(subject, operation, resource).allowed


@dataclass
class CachedDecisions:
    """One subject's decisions under one authorizer version (a Kafka connection's cache).

    ``check`` asks the authorizer only for an (operation, resource) not seen since the
    authorizer last changed; at most ``limit`` answers are kept (the oldest go)."""

    subject: Subject
    limit: int = 4096
    _version: int = -1
    _answers: dict[tuple[Operation, Resource], Decision] = field(default_factory=dict)

    def check(self, authorizer: Authorizer, operation: Operation, resource: Resource) -> Decision:
        if authorizer.version != self._version:
            self._answers.clear()
            self._version = authorizer.version
        key = (operation, resource)
        found = self._answers.get(key)
        if found is None:
            found = authorizer.decide(self.subject, operation, resource)
            if len(self._answers) >= self.limit:
                self._answers.pop(next(iter(self._answers)))
            self._answers[key] = found
        return found
